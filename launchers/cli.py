"""``k3lab``: list, render, preflight, and (with a target) bring scenarios up and down."""
from __future__ import annotations

import argparse
import json
import sys

from . import catalog, inventory, preflight, render, siminventory


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"k3lab: --option takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def load_inventory(scenario: str, path: str | None) -> tuple[inventory.Inventory, str]:
    if path:
        return inventory.load(path), str(path)
    return siminventory.default(scenario), "default (sim)"


def build(args: argparse.Namespace, target: str | None = None) -> render.Rendered:
    inv, name = load_inventory(args.scenario, args.inventory)
    tgt = target or getattr(args, "target", None) or ("lab" if args.inventory else "sim")
    return render.build(args.scenario, inv, _kv(args.option), tgt, inventory_name=name)


def cmd_list(args: argparse.Namespace) -> int:
    for sc in catalog.SCENARIOS.values():
        print(sc.id if args.quiet else f"{sc.id:22} {sc.section:24} {sc.title}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    rendered = build(args)
    out = render.write(rendered, args.out)
    print(f"rendered {args.scenario} for {len(rendered.plan.nodes)} nodes into {out}")
    return 0


def cmd_preflight(args: argparse.Namespace) -> int:
    if args.list:
        from . import labpreflight

        for c in preflight.catalogue() + labpreflight.catalogue():
            print(f"{c['id']:16} {c['severity']:8} {c['must']}\n{'':25} remedy: {c['remedy']}")
        return 0
    if not args.scenario:
        raise SystemExit("k3lab preflight: give a SCENARIO or --list")
    rendered = build(args)
    findings = preflight.run(rendered.plan, rendered.files)
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        for f in findings:
            where = f" [{', '.join(f.nodes)}]" if f.nodes else ""
            print(f"{f.severity.upper():7} {f.check}{where}: {f.message}")
        errs = len(preflight.errors(findings))
        print(f"preflight {args.scenario}: {len(preflight.CHECKS)} checks, {errs} error(s), "
              f"{len(findings) - errs} warning(s)")
    return 1 if preflight.errors(findings) else 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(inventory.json_schema(), indent=2))
    return 0


def _scenario_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("scenario", nargs=None if required else "?", help="scenario id (k3lab list)")
    p.add_argument("--inventory", "-i", help="lab inventory YAML (default: the sim inventory)")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE", help="scenario option")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="k3lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="list the scenario ids")
    p.add_argument("-q", "--quiet", action="store_true", help="ids only")
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("render", help="write every per-node artefact and plan.json")
    _scenario_args(p)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--target", choices=["sim", "lab"])
    p.set_defaults(fn=cmd_render)
    p = sub.add_parser("preflight", help="static checks on the rendered plan")
    _scenario_args(p, required=False)
    p.add_argument("--list", action="store_true", help="list the checks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_preflight)
    p = sub.add_parser("schema", help="print the inventory JSON Schema")
    p.set_defaults(fn=cmd_schema)
    try:
        from . import lifecycle
    except ImportError:  # the live half is optional until its dependencies are installed
        lifecycle = None
    if lifecycle is not None:
        lifecycle.add_commands(sub, _scenario_args)
        from . import labemu

        labemu.add_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first "--" goes to pytest untouched (argparse cannot place it after options)
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    args = parser().parse_args(argv)
    args.pytest_args = passthrough
    try:
        return args.fn(args)
    except (inventory.InventoryError, render.RenderError, catalog.UnknownScenario) as exc:
        print(f"k3lab: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a readiness gate failed: the message names node, process and log tail
        print(f"k3lab: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)  # a failed registry download is an environment error (3)


if __name__ == "__main__":
    sys.exit(main())
