"""k3lab: render, preflight and (with a target) bring the deployment guides' scenarios up and down.

Which commands need a Docker engine is NO_DOCKER below; the help, the README and the docs show it.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys

from k3lab import errors, formats, settings
from k3lab.errors import UsageError
from k3lab.model import hints, select
from k3lab.model.select import _kv, did_you_mean, load_inventory, scenario_id

# Adding a subcommand: write one ``_add_<name>(sub)`` function that registers its subparser and sets
# ``fn=lazy("<module>", "<function>")`` (the module is imported only when the command runs, so the
# static commands start fast), then append it to COMMANDS at the bottom of this file.


def lazy(module: str, func: str, needs=None):
    """A handler that imports ``<module>`` only when its command runs; ``needs(args)`` first checks the
    machine's prerequisites (k3lab.launch.prereq), before that import: a missing engine or package is
    reported in a fraction of a second, not after the live half's libraries have loaded."""

    def handler(args: argparse.Namespace) -> int:
        if needs is not None:
            needs(args)
        return getattr(importlib.import_module(module), func)(args)

    handler.__name__ = f"{module}.{func}"
    return handler


# ------------------------------------------------------------------------------ shared helpers


def build(args: argparse.Namespace, target: str | None = None):
    from k3lab.render import artefacts as render

    scenario_id(args.scenario)
    tgt = select.target(args.scenario, target or getattr(args, "target", None), args.inventory)
    inv, name = load_inventory(args.scenario, args.inventory)
    return render.build(args.scenario, inv, _kv(args.option), tgt, inventory_name=name)


def _needs_target(args: argparse.Namespace) -> None:
    """up and cycle: the sim target's [sim] extra and engine, then what the target itself needs."""
    from k3lab.launch import prereq
    from k3lab.model.targetkinds import check_stages_only

    usage = functools.partial(check_stages_only, stages_only=getattr(args, "stages_only", False),
                              keep=getattr(args, "keep", False))
    name = prereq.for_target(f"k3lab {args.cmd}", args.scenario, args.target, args.inventory, usage)
    from k3lab.launch import targets  # a target's own needs (k8s: its client, a kubeconfig, an API that answers)

    prereq.require(f"k3lab {args.cmd}", *targets.get(name).prerequisites(args.scenario, args.inventory))


def _needs_live_sim(args: argparse.Namespace) -> None:
    """bench's live part: a sim bring-up."""
    if not args.no_live:
        from k3lab.launch import prereq

        prereq.require("k3lab bench", *prereq.SIM)


def _needs_labemu(args: argparse.Namespace) -> None:
    from k3lab.launch import prereq

    prereq.require(f"k3lab labemu {args.action}", *prereq.LABEMU_ACTION[args.action])


# ------------------------------------------------------------------------------ static commands


def cmd_list(args: argparse.Namespace) -> int:
    from k3lab.model import catalog

    rows = []
    for sc in catalog.SCENARIOS.values():
        roles = dict(sc.roles)
        if sc.pool != "none":  # one MetaService host: its own node, or metaservice_node names another
            roles["metaservice"] = 1
        rows.append({"id": sc.id, "platform": sc.platform, "nodes": {r: n for r, n in roles.items() if n},
                     "guide": "K3.1 Pro" if "K3.1" in sc.section else "K3", "section": sc.section, "title": sc.title})
    formats.emit(args, {"scenarios": rows}, _print_list_ids if getattr(args, "quiet", False) else _print_list)
    return 0


def _print_list_ids(doc: dict) -> None:
    for row in doc["scenarios"]:
        print(row["id"])


def _print_list(doc: dict) -> None:
    print(f"{'id':22} {'platform':8} {'nodes':32} {'guide':9} {'section':22} title")
    for r in doc["scenarios"]:
        nodes = " ".join(f"{n}x{role}" for role, n in r["nodes"].items())
        print(f"{r['id']:22} {r['platform']:8} {nodes:32} {r['guide']:9} {r['section']:22} {r['title']}")


def cmd_render(args: argparse.Namespace) -> int:
    from k3lab.render import artefacts as render

    out = render.check_out(args.out, force=args.force)
    rendered = build(args)
    errors_found = _render_preflight(args, rendered)
    if errors_found and not args.force:
        formats.say(f"render {args.scenario}: {len(errors_found)} preflight error(s); nothing written (fix them, or "
              f"--force writes the files anyway with the errors at the top of RUNBOOK.md)", file=sys.stderr)
        return errors.CHECKS_FAILED
    preamble = "".join(["> **Rendered with --force despite these preflight errors; the deployment would fail:**\n>\n",
                        *(f"> - {line}\n" for line in errors_found), "\n"]) if errors_found else ""
    written = render.write(rendered, out, force=args.force, preamble=preamble)
    from k3lab.model import targetkinds

    where = targetkinds.kind(rendered.plan.target).where
    formats.say(f"rendered {args.scenario} for {len(rendered.plan.nodes)} nodes of {where} into {written} "
          f"({written / 'RUNBOOK.md'} says how to run them by hand)")
    return 0


def _render_preflight(args: argparse.Namespace, rendered) -> list[str]:
    """The static preflight's errors for a render, each as printed (a render that cannot run is not written)."""
    from k3lab.preflight import checks as preflight

    inv, _ = load_inventory(args.scenario, args.inventory) if args.inventory else (None, None)
    findings = preflight.run(rendered.plan, rendered.files, sim_subnet=rendered.sim_subnet)
    outcome = preflight.judge(findings, inv.accept if inv is not None else [])
    lines = []
    for f in outcome.errors:  # a finding's message ends with its remedy
        where = f" [{', '.join(f.nodes)}]" if f.nodes else ""
        lines.append(f"{f.check}{where}: {f.message}")
    for line in lines:
        formats.say(f"ERROR   {line}", file=sys.stderr)  # messages quote the inventory
    return lines


def cmd_preflight(args: argparse.Namespace) -> int:
    from k3lab.preflight import checks as preflight

    if args.list:
        from k3lab.preflight import hostchecks, labchecks

        formats.emit(args, {"checks": preflight.catalogue() + labchecks.catalogue() + hostchecks.catalogue()},
                     _print_check_list)
        return 0
    if not args.scenario:
        raise UsageError("preflight: give a SCENARIO or --list")
    inv, _ = load_inventory(args.scenario, args.inventory) if args.inventory else (None, None)
    rendered = build(args)
    findings = preflight.run(rendered.plan, rendered.files, sim_subnet=rendered.sim_subnet)
    outcome = preflight.judge(findings, inv.accept if inv is not None else [])
    doc = preflight.report(rendered.plan, outcome, args.strict)
    formats.emit(args, doc, _print_preflight)
    return errors.CHECKS_FAILED if doc["verdict"] == "FAIL" else errors.OK


def _print_check_list(doc: dict) -> None:
    for c in doc["checks"]:
        print(f"{c['id']:16} {c['severity']:8} {c['must']}\n{'':25} remedy: {c['remedy']}")


def _print_preflight(doc: dict) -> None:
    """Messages, node names and acceptance reasons come from an inventory or policy: shown, never run."""
    for f in doc["findings"]:
        where = f" [{', '.join(f['nodes'])}]" if f["nodes"] else ""
        formats.say(f"{f['severity'].upper():7} {f['check']}{where}: {f['message']} Remedy: {f['remedy']}")
    for a in doc["accepted"]:
        formats.say(f"ACCEPTED {a['check']} [{', '.join(a['nodes'])}]: {a['message']} (accepted: {a['reason']})")
    for a in doc["acceptances_without_effect"]:
        formats.say(f"NOTE    acceptance of {a['check']} has no effect: {a['why']}")
    strict = " (--strict: warnings fail)" if doc["strict"] else ""
    formats.say(f"preflight {doc['scenario']}: {doc['checks']} checks, {doc['errors']} error(s), {doc['warnings']} "
                f"warning(s), {len(doc['accepted'])} accepted{strict}: {doc['verdict']}")


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from k3lab.model import inventory

    formats.emit(args, inventory.json_schema(), lambda doc: print(json.dumps(doc, indent=2)))
    return 0


def cmd_faults(args: argparse.Namespace) -> int:
    from k3lab.tools import faults

    if args.list:
        listing = [{"id": f.id, "kind": f.kind, "scenario": f.scenario, "mode": f.mode} for f in faults.CATALOG.values()]
        formats.emit(args, {"faults": listing}, _print_fault_list)
        return 0
    for fid in args.id or []:
        if fid not in faults.CATALOG:
            raise UsageError(did_you_mean(fid, faults.CATALOG, "fault id") + "; see k3lab faults --list")
    if args.static_only and args.id and all(faults.CATALOG[i].kind != "static" for i in args.id):
        raise UsageError(f"--static-only with only live fault ids ({', '.join(args.id)}): nothing would run")
    _require_fault_rows(args, faults.CATALOG.values())
    from k3lab import outputs

    # the matrix rewrites its own files row by row (nox -s faults): replaced atomically, never written through
    report = outputs.check_file(args.out, force=True, make_parent=True) if args.out else None
    if report is not None:
        outputs.check_file(report.with_suffix(".md"), force=True)
    rows = faults.run_matrix(args.id or None, live=not args.static_only, report=report)
    formats.emit(args, {"rows": rows}, lambda doc: faults.print_table(doc["rows"]))
    return errors.OK if all(r["verdict"] in ("ok", "skipped") for r in rows) else errors.CHECKS_FAILED


def _require_fault_rows(args: argparse.Namespace, catalog) -> None:
    """What the selected live and lab rows run on, checked before the first row starts."""
    from k3lab.launch import prereq

    if args.static_only:
        return
    kinds = {f.kind for f in catalog if not args.id or f.id in args.id}
    # without root the lab and host rows are reported as skipped (the matrix runs where it can); as root,
    # what the emulated lab needs beyond root is checked up front like the live rows' engine
    emulated = prereq.LABEMU if kinds & {"lab", "host"} and os.geteuid() == 0 else ()
    checks = [*(prereq.SIM if "live" in kinds else ()), *emulated]
    prereq.require("k3lab faults", *dict.fromkeys(checks))  # the [sim] extra once when both need it


def _print_fault_list(doc: dict) -> None:
    for f in doc["faults"]:
        print(f"{f['id']:26} {f['kind']:6} {f['scenario']:22} {f['mode']}")


# ------------------------------------------------------------------------------ parser


class Parser(argparse.ArgumentParser):
    """argparse with did-you-mean for misspelt subcommands and choices, and exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        if "invalid choice:" in message:
            word = message.split("invalid choice:", 1)[1].split("(")[0].strip().strip("'")
            choices = [a.strip().strip("'") for a in message.split("(choose from", 1)[-1].rstrip(")").split(",")]
            message += hints.hint(word, choices)
        raise UsageError(f"{self.prog}: {message}")


def _scenario_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("scenario", nargs=None if required else "?", metavar="SCENARIO",
                   help="scenario id (k3lab list shows the twelve)")
    p.add_argument("--inventory", "-i", metavar="FILE",
                   help="lab inventory YAML (k3lab init writes one); without it the generated sim inventory")
    from k3lab.model.catalog import OPTIONS

    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="scenario option, repeatable; keys: " + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))


def _pull_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pull", choices=["never", "missing", "always"], default="never",
                   help="lab: image pull policy on each node (default never: the image must be there)")


def _strict_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="warnings fail too (exit 1), except those the inventory or policy accepts with a reason")


def _target_arg(p: argparse.ArgumentParser, kubernetes: bool = True) -> None:
    p.add_argument("--target", choices=["sim", "lab", "k8s"] if kubernetes else ["sim", "lab"],
                   help="sim: every node a container on the local engine; lab: each node's own endpoint"
                        + ("; k8s: Kubernetes pods through its API (the inventory's k8s section; the [k8s] extra)" if kubernetes
                           else "") + " (default: lab with --inventory, else sim)")


def _add_list(sub) -> None:
    p = sub.add_parser("list", help="list the scenarios: platform, nodes per role, guide and section "
                       "(-q: the ids only)")
    formats.add(p)
    p.set_defaults(fn=cmd_list)


def _add_render(sub) -> None:
    p = sub.add_parser("render", help="write every per-node artefact and plan.json (no Docker)")
    _scenario_args(p)
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory; must be absent or empty unless --force")
    p.add_argument("--force", action="store_true", help="replace the contents of a non-empty --out, and write even "
                   "when the static preflight finds errors (RUNBOOK.md then opens with them); without it such a "
                   "render exits 1 and writes nothing")
    _target_arg(p)
    p.set_defaults(fn=cmd_render)


def _add_preflight(sub) -> None:
    p = sub.add_parser("preflight", help="static checks on the rendered plan (no Docker); exit 1 on errors")
    _scenario_args(p, required=False)
    p.add_argument("--list", action="store_true", help="list every check: ID, severity, MUST, remedy")
    _strict_arg(p)
    formats.add(p, json_alias=True)
    _target_arg(p)
    p.set_defaults(fn=cmd_preflight)


def _add_schema(sub) -> None:
    p = sub.add_parser("schema", help="print the inventory JSON Schema (no Docker)")
    formats.add(p, choices=("json",))
    p.set_defaults(fn=cmd_schema)


def _add_init(sub) -> None:
    p = sub.add_parser("init", help="write a commented lab inventory for a scenario (no Docker)")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario id (k3lab list)")
    p.add_argument("--out", required=True, metavar="FILE", help="inventory file to write (refused if it exists)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.add_argument("--target", choices=["lab", "k8s"], help="k8s: add the commented k8s section (default: lab)")
    p.set_defaults(fn=lazy("k3lab.cli.initinv", "cmd_init"))


def _add_faults(sub) -> None:
    p = sub.add_parser("faults", help="run the fault matrix and print expected vs observed failing checks")
    p.add_argument("--list", action="store_true", help="list the fault ids (static, live, lab, host) and exit")
    p.add_argument("--id", action="append", metavar="FAULT", help="only this fault id (repeatable; see --list)")
    p.add_argument("--static-only", action="store_true", help="only the static rows (no Docker)")
    p.add_argument("--out", metavar="FILE", help="also write the rows to FILE (JSON) and a Markdown table beside it "
                   "(FILE with .md) as they come; nox -s faults writes build/faults.json and build/faults.md")
    p.add_argument("--json", dest="out", metavar="FILE", help="deprecated spelling of --out FILE")
    formats.add(p)
    p.set_defaults(fn=cmd_faults)


def _add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks as JSON (render+preflight CLI timings; live bring-up unless --no-live)")
    p.add_argument("--out", default="build/bench.json", metavar="FILE", help="JSON output (default build/bench.json)")
    p.add_argument("--scenario", action="append", metavar="SCENARIO",
                   help="scenario for the live part (repeatable; default a3_pd_1m and k3_a3_pd)")
    p.add_argument("--no-live", action="store_true", help="render and preflight only (no Docker)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.cli.commands", "cmd_bench", needs=_needs_live_sim))


def _bring_up_parser(sub, name: str, summary: str, keep: str, *own) -> None:
    """A command that brings a scenario up (``up``, ``cycle``): one set of bring-up options, in one
    order, with the command's own options (``(flag, add_argument keywords)``) before strict and pull."""
    p = sub.add_parser(name, help=summary)
    _scenario_args(p)
    _target_arg(p)
    p.add_argument("--keep", action="store_true", help=keep)
    for flag, kwargs in own:
        p.add_argument(flag, **kwargs)
    _strict_arg(p)
    _pull_arg(p)
    p.set_defaults(fn=lazy("k3lab.cli.commands", f"cmd_{name}", needs=_needs_target))


def _add_up(sub) -> None:
    _bring_up_parser(sub, "up", "bring a scenario up (sim by default, lab with --inventory)", "leave the deployment up",
                     ("--stages-only", {"action": "store_true",
                                        "help": "lab: prove the hosts and the hardware (host and hardware stages), "
                                                "then tear down; no engine starts (exit 1 naming node and host)"}))


def _add_cycle(sub) -> None:
    _bring_up_parser(
        sub, "cycle", "up, run the conformance suite, down (pytest arguments after --)",
        "leave the deployment up after the suite",
        ("--conformance-timeout", {"type": float, "default": 1800, "metavar": "SECONDS",
                                   "help": "time limit of the conformance suite (default 1800)"}),
        ("--inject", {"metavar": "FAULT",
                      "help": "sim only: inject a live fault of the catalog (k3lab faults --list), to prove a gate fails"}))


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="attach: run the conformance suite against a deployment started by hand "
                       "(no up, no down; pytest arguments after --)")
    _scenario_args(p)
    p.add_argument("--conformance-timeout", type=float, default=1800, metavar="SECONDS",
                   help="time limit of the conformance suite (default 1800)")
    p.set_defaults(fn=lazy("k3lab.cli.commands", "cmd_check"))


def _add_labemu(sub) -> None:
    p = sub.add_parser("labemu", help="emulated multi-host lab on this machine (namespaces, engines, sshd)")
    p.add_argument("action", choices=["up", "down", "status", "break", "repair"],
                   help="up: create the hosts and write --out; down: remove them; status: list them; "
                   "break: break one host's facts (--node, --fault); repair: every host as up made it")
    p.add_argument("--node", help="break: the node whose host is broken")
    p.add_argument("--fault", help="break: no-config | other-checkpoint | old-driver | hccn-entry | unreserved-ports | "
                   "link-down[:DEVICE] | npu-alarm[:DEVICE] | pair-unreachable")
    p.add_argument("--nodes", type=int, help="number of hosts (default: the scenario's node count)")
    p.add_argument("--scenario", default="a3_pd_1m", help="scenario whose node roles the inventory gets")
    p.add_argument("--out", default="lab.yaml", help="lab inventory to write")
    p.add_argument("--endpoints", choices=["mixed", "ssh", "tcp"], default="mixed",
                   help="endpoint kinds in the inventory (mixed: every fourth host over tcp://)")
    p.add_argument("--weights", metavar="DIR", help="up: keep each host's checkpoints in DIR (e.g. /mnt/weights) "
                   "instead of /root/.cache, and give the inventory a read-only mounts entry for it and model_path "
                   "under it (a lab's shared weights outside /root/.cache)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.launch.labemu", "cmd_labemu", needs=_needs_labemu))


def _add_down(sub) -> None:
    p = sub.add_parser("down", help="tear down a run, or every k3lab run with --all")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (k3lab status)")
    p.add_argument("--all", action="store_true", help="every k3lab run: the local engine's, and each recorded run of the other targets")
    # no prerequisite up front: down --all asks each target itself and names the one that does not answer
    p.set_defaults(fn=lazy("k3lab.cli.commands", "cmd_down"))


def _add_status(sub) -> None:
    p = sub.add_parser("status", help="containers of a run (or of all runs)")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id (default: every run)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.cli.commands", "cmd_status"))


def _add_release(sub) -> None:
    p = sub.add_parser("release", help="all scenarios: static stage, live cycles, one verdict, combined report")
    p.add_argument("--scenario", "-s", action="append", metavar="SCENARIO", help="only these (default: all twelve)")
    _target_arg(p, kubernetes=False)
    p.add_argument("--inventory", "-i", action="append", default=[], metavar="SCENARIO=FILE",
                   help="lab inventory per scenario (required for --target lab)")
    p.add_argument("--policy", metavar="FILE", help="gate policy YAML (default k3lab/model/policies/default.yaml)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="cycles at a time (default 3; on the sim fewer when the host's ARP table cannot hold "
                        "the largest topologies at once, see the warning)")
    p.add_argument("--out", metavar="DIR", help="release directory (default releases/<timestamp>)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out; the previous release stays "
                   "until the new one is complete")
    _strict_arg(p)
    p.add_argument("--static-only", action="store_true", help="render, preflight and golden only (no Docker)")
    p.add_argument("--inject", action="append", default=[], metavar="SCENARIO=FAULT",
                   help="sim only: run SCENARIO with a live fault of the catalog (proves the gate fails)")
    p.add_argument("--conformance-timeout", type=float, default=1800, metavar="SECONDS", help="per cycle")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.tools.release", "cmd_release"))


def _add_compare(sub) -> None:
    p = sub.add_parser("compare", help="regressions from A (last good) to B (candidate): releases or run directories")
    p.add_argument("a", metavar="A", help="release directory (release.json) or run directory: the last good")
    p.add_argument("b", metavar="B", help="release or run directory: the candidate")
    formats.add(p, choices=("text", "markdown", "json"))
    p.add_argument("--out", metavar="FILE", help="write the output to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="replace an existing --out file (or symlink, never its target)")
    p.add_argument("--policy", metavar="FILE", help="gate policy for run directories and thresholds (default policy)")
    p.set_defaults(fn=lazy("k3lab.tools.compare", "cmd_compare"))


def _add_triage(sub) -> None:
    p = sub.add_parser("triage", help="diagnose a failed run: its likely cause, node, evidence and remedy (no Docker)",
                       description="Diagnose a run directory or a folder of logs collected by hand (one folder per "
                                   "node) against the catalogue of known failure modes (k3lab/diagnosis/catalogue.yaml).",
                       epilog="exit codes: 0 no error in the logs, 1 a diagnosis (a known cause, or the first error "
                              "line when none matched), 2 bad input (missing, not a directory, unreadable, no "
                              "readable log in it); .gz logs are read, skipped files are listed")
    p.add_argument("dir", metavar="DIR", help="run directory (runs/<id>) or folder of logs, one folder per node")
    formats.add(p, json_alias=True)
    p.add_argument("--all", action="store_true", help="every cause that matched, not only the first three")
    p.set_defaults(fn=lazy("k3lab.diagnosis.triage", "cmd_triage"))


def _add_baseline(sub) -> None:
    p = sub.add_parser("baseline", help="perf baselines: record one from a run's vllm bench serve result")
    p.add_argument("action", choices=["record"], help="record: write a baseline with its provenance")
    p.add_argument("run", metavar="RUN", help="run directory with evidence/bench/perf-result.json (a --perf run)")
    p.add_argument("--out", metavar="FILE", help="baseline file (default fixtures/baselines/<scenario>.json)")
    p.add_argument("--threshold", type=float, default=None, help="threshold stored in the baseline (default 0.97)")
    p.add_argument("--force", action="store_true", help="replace an existing baseline file")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.tools.baseline", "cmd_baseline"))


def _add_checks(sub) -> None:
    p = sub.add_parser("checks", help="list every check (static, lab, host, hardware, conformance): stage, id, area, "
                       "MUST, remedy and the fault rows that prove it (no Docker)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.tools.checklist", "cmd_checks"))


def _add_policy(sub) -> None:
    p = sub.add_parser("policy", help="gate policy: write a commented example (init --out FILE), validate a file "
                       "(--check) or print its JSON Schema (--schema)")
    p.add_argument("action", nargs="?", choices=["init"], help="init: write a commented example policy to --out")
    p.add_argument("--out", metavar="FILE", help="init: the policy file to write (refused if it exists)")
    p.add_argument("--force", action="store_true", help="init: overwrite an existing --out file")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", metavar="FILE", help="validate FILE; exit 2 naming the field, FILE:LINE and the "
                   "closest known key or value")
    g.add_argument("--schema", action="store_true", help="print the policy JSON Schema")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.model.policy", "cmd_policy"))


def _add_report(sub) -> None:
    p = sub.add_parser("report", help="rebuild a run's reports (summary.md, report.html, gate.json) from its "
                       "artefacts and print the gate's verdict; exit 0 PASS, 1 FAIL, 3 INCOMPLETE (no Docker)")
    p.add_argument("run", metavar="RUN", help="run directory (runs/<run>)")
    p.add_argument("--policy", metavar="FILE", help="gate policy (default: the kit's)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.reports.runreports", "cmd_report"))


def cmd_completion(args: argparse.Namespace) -> int:
    from k3lab.cli import completion

    print(completion.script(args.shell), end="")
    return 0


def _add_completion(sub) -> None:
    p = sub.add_parser("completion", help="print a shell completion script: commands, options, scenario, fault and "
                       "run ids (eval \"$(k3lab completion bash)\"; zsh the same; fish: k3lab completion fish | source)")
    p.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell the script is for")
    p.set_defaults(fn=cmd_completion)


def _add_env(sub) -> None:
    p = sub.add_parser("env", help="every setting the kit reads from the environment: value, source (environment "
                       "variable or default) and where runs and releases go (no Docker)")
    formats.add(p)
    p.set_defaults(fn=lazy("k3lab.cli.envcmd", "cmd_env"))


COMMANDS = [_add_list, _add_render, _add_preflight, _add_schema, _add_init, _add_up, _add_cycle, _add_check, _add_down,
            _add_status, _add_faults, _add_bench, _add_labemu, _add_release, _add_compare, _add_baseline,
            _add_policy, _add_report, _add_completion, _add_triage, _add_checks, _add_env]
_BY_NAME = {add.__name__.removeprefix("_add_"): add for add in COMMANDS}

# The one list of what runs without a Docker engine: a command, or (a tuple) only with one of those arguments.
# Bare k3lab's help prints it (no_docker_text), the README and docs/index.md say the same words
# (tests/unit/cli/test_no_docker.py compares them) and tests/unit/test_readme.py runs their commands by it.
NO_DOCKER: dict[str, tuple[str, ...] | None] = {
    "list": None, "render": None, "preflight": None, "schema": None, "init": None, "checks": None, "env": None,
    "faults": ("--list", "--static-only"), "bench": ("--no-live",), "release": ("--static-only",),
    "compare": None, "baseline": None, "policy": None, "triage": None, "report": None, "completion": None,
}


def needs_docker(argv: list[str]) -> bool:
    """Whether ``k3lab ARGV`` talks to a Docker engine (the local one, or each lab node's), by NO_DOCKER."""
    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd is None or cmd not in _BY_NAME:
        return False  # bare k3lab, --help, --version, a typo: nothing runs
    if cmd not in NO_DOCKER:
        return True
    only = NO_DOCKER[cmd]
    return only is not None and not set(only) & set(argv)


def _names(words: list[str]) -> str:
    return ", ".join(words[:-1]) + (" and " if len(words) > 1 else "") + words[-1]


def no_docker_text() -> str:
    """The two sentences bare ``k3lab``, the README and docs/index.md show: what needs no Docker, what does."""
    free = [f"`{cmd}`" if only is None else ", ".join(f"`{cmd} {arg}`" for arg in only) for cmd, only in NO_DOCKER.items()]
    names = [add.__name__.removeprefix("_add_") for add in COMMANDS]
    docker = [f"`{c}`" for c in names if c not in NO_DOCKER]
    live = [f"`{c}`" for c in names if NO_DOCKER.get(c)]
    return (f"These commands need no Docker engine: {', '.join(free)}. {', '.join(docker)}, live {_names(live)} "
            "talk to Docker: the local engine for the simulator, each node's own endpoint (usually `ssh://`) for a lab.")


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print the k3lab version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from k3lab import __version__

        print(f"k3lab {__version__}")
        parser.exit(0)


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or (``command``) the top level with only that subcommand's parser.

    Building every subparser costs about 2% of a ``k3lab render`` process; a command's help, errors and
    parsing need only its own parser (the top level has no option that takes a value).
    """
    import re
    import textwrap

    # a command and its argument ("faults --list") stay on one line
    words = re.sub(r"`([^`]*)`", lambda m: m.group(1).replace(" ", "\0"), no_docker_text())
    description = __doc__.split("\n")[0] + "\n\n" + textwrap.fill(words, 100).replace("\0", " ")
    ap = Parser(prog="k3lab", description=description, epilog=errors.EXIT_CODES_HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action=_Version)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    only = _BY_NAME.get(command or "")
    for add in [only] if only else COMMANDS:
        add(sub)
    for p in [ap, *sub.choices.values()]:
        _verbosity_args(p)
    return ap


def _verbosity_args(p: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's default must not overwrite ``k3lab -v COMMAND``
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress lines on stderr (errors and the result only); list: the ids only")
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more detail on stderr")


def _suggest_options(ap: argparse.ArgumentParser, cmd: str | None, extras: list[str]) -> str:
    sp = ap
    for action in ap._actions:  # argparse keeps subparsers here; there is no public accessor
        if isinstance(action, argparse._SubParsersAction) and cmd in action.choices:
            sp = action.choices[cmd]
    known = [s for a in sp._actions for s in a.option_strings]
    word = extras[0]
    if word.startswith("-"):
        msg = did_you_mean(word.split("=", 1)[0], [k for k in known if k.startswith("--")], "option")
        return f"{sp.prog}: {msg.split(' (known')[0]}; see {sp.prog} --help"
    return f"{sp.prog}: unexpected argument(s) {' '.join(extras)!r}; see {sp.prog} --help"


def _run(argv: list[str]) -> int:
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (k3lab completion): answer, then exit
        from k3lab.cli import completion

        completion.complete(parser())
    # everything after the first "--" goes to pytest untouched (argparse cannot place it after options)
    passthrough: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    first = next((a for a in argv if not a.startswith("-")), None)
    ap = parser(first)
    if not argv:
        ap.print_help()
        return errors.OK
    args, extras = ap.parse_known_args(argv)
    if extras:
        raise UsageError(_suggest_options(ap, args.cmd, extras))
    if args.cmd is None:
        ap.print_help()
        return errors.OK
    args.pytest_args = passthrough
    settings.use(settings.load())  # every setting read once, here; a bad one is exit 2 naming the variable
    formats.set_verbosity(getattr(args, "verbose", 0) - (1 if getattr(args, "quiet", False) else 0))
    return args.fn(args)


def _say(exc: BaseException | str) -> None:
    text = str(exc).strip() or type(exc).__name__
    if not text.startswith("k3lab"):
        text = "k3lab: " + text
    print(errors.printable(text), file=sys.stderr)  # input quoted in a message never drives the terminal


def main(argv: list[str] | None = None) -> int:
    """Run one command; every failure becomes a message and a documented exit code (see errors.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at interpreter exit, so that a closed pipe is handled below
        return code
    except BrokenPipeError:  # before ConnectionError (environment): the reader stopped reading, nothing failed
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit-time flush must not fail again
        return errors.PIPE_CLOSED
    except errors.K3labError as exc:
        _say(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("k3lab: interrupted", file=sys.stderr)
        return errors.INTERRUPTED
    except SystemExit as exc:  # argparse --help/--version, and handlers that exit with a message
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        _say(exc.code)
        return errors.CHECKS_FAILED
    except RecursionError as exc:  # before the generic handler: deep input that slipped past the caps
        path = errors.write_crash_log(exc, argv)
        print(f"k3lab: input nested too deeply (traceback in {path})", file=sys.stderr)
        return errors.USAGE
    except Exception as exc:  # noqa: BLE001 - the one place that turns a crash into exit code 4
        exit_code = getattr(exc, "exit_code", None)
        if isinstance(exit_code, int):  # e.g. a failed registry download says 3 itself
            _say(exc)
            return exit_code
        if errors.is_environment_error(exc):
            _say(f"environment error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return errors.ENVIRONMENT
        path = errors.write_crash_log(exc, argv)
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(errors.printable(f"k3lab: internal error: {type(exc).__name__}: {first} (traceback in {path}; "
                               "please report it)"), file=sys.stderr)
        return errors.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
