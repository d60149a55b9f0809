"""The CLI's handlers for the live commands: up, cycle, check, down, status, bench.

They turn parsed arguments into calls of the bring-up engine (k3lab.launchers.lifecycle) and the tools
(faults, bench). The engine never imports this module or the CLI, so the layers import one way.
"""
from __future__ import annotations

import argparse
import subprocess
import time

from k3lab import formats
from k3lab.errors import UsageError
from k3lab.launchers import suite
from k3lab.launchers.backends import LABEL, remove_by_label
from k3lab.launchers.endpoints import LOCAL_ENDPOINT, ClientPool, SshOptions, describe
from k3lab.launchers.lifecycle import RUNS, Interrupted, Run, _log, attach, collect, down, down_all, up
from k3lab.model import runs


def _suite(run: Run, args: argparse.Namespace) -> int:
    """The conformance suite against a deployment that is up, then evidence and reports."""
    code = 1
    try:
        t = time.monotonic()
        argv = suite.command(run.dir, *args.pytest_args, junit=run.dir / "junit.xml")
        code = subprocess.call(argv, timeout=args.conformance_timeout)
        run.timings["conformance_s"] = time.monotonic() - t
    except subprocess.TimeoutExpired:
        _log(f"conformance suite timed out after {args.conformance_timeout}s")
    except (KeyboardInterrupt, Interrupted):
        code = 130
    finally:
        collect(run)
        try:
            from k3lab.reports.runreports import rebuild

            reports = rebuild(run.dir)
            _log("reports: " + ", ".join(str(p) for p in reports.values()))
        except Exception as exc:  # a report problem must never block teardown
            _log(f"reports failed: {exc!r}")
    return code


def cmd_up(args: argparse.Namespace) -> int:
    from k3lab.model.select import _kv

    run = up(args.scenario, args.inventory, _kv(args.option), args.target, pull=args.pull, strict=args.strict)
    if not args.keep:
        collect(run)
        down(run)
    print(run.dir)
    return 0


def cmd_cycle(args: argparse.Namespace) -> int:
    """up, conformance suite, down; exit status is the suite's."""
    from k3lab.model.select import _kv

    fault = _fault(args)
    run = up(args.scenario, args.inventory, _kv(args.option), args.target, pull=args.pull,
             sim_faults=fault.at_start if fault else None, strict=args.strict)
    code = 1
    try:
        if fault and fault.running:
            from k3lab.tools import faults

            faults.inject(run, fault)
            _log(f"injected fault {fault.id}: {fault.mode}")
        code = _suite(run, args)
    finally:
        if not args.keep:
            down(run)
        else:
            run.save("up")
    _log(f"run {run.id}: conformance exit {code}; evidence in {run.dir}")
    return code


def cmd_check(args: argparse.Namespace) -> int:
    """Attach mode: the conformance suite against a deployment operators started by hand (no up, no down)."""
    from k3lab.model.select import _kv

    if not args.inventory:
        raise UsageError("k3lab check: give the lab inventory of the running deployment (-i lab.yaml)")
    run = attach(args.scenario, args.inventory, _kv(args.option))
    code = _suite(run, args)
    run.save("attached")
    _log(f"run {run.id}: conformance exit {code}; evidence in {run.dir}")
    return code


def _run_endpoints(run: str) -> tuple[list[str], SshOptions]:
    """The endpoints a run used (its run-state.json), else the local engine."""
    if (RUNS / run / runs.RUN_STATE).is_file():
        state = runs.run_state(RUNS / run)
        eps = list(dict.fromkeys(state.endpoints.values())) or [LOCAL_ENDPOINT]
        return eps, SshOptions.from_dict(state.ssh)
    return [LOCAL_ENDPOINT], SshOptions()


def _fault(args: argparse.Namespace):
    """``cycle --inject FAULT``: a live fault of the catalog on the sim (how k3lab release proves its gate)."""
    if not getattr(args, "inject", None):
        return None
    from k3lab.tools import faults

    fault = faults.CATALOG.get(args.inject)
    if fault is None or fault.kind != "live":
        raise UsageError(f"--inject takes a live fault id of k3lab/tools/faults.py (k3lab faults --list), "
                         f"not {args.inject!r}")
    if fault.scenario != args.scenario or (args.target or ("lab" if args.inventory else "sim")) != "sim":
        raise UsageError(f"fault {fault.id} is for {fault.scenario} on the sim target")
    return fault


def cmd_down(args: argparse.Namespace) -> int:
    if args.all or not args.run:
        return down_all()
    endpoints, ssh = _run_endpoints(args.run)
    pool = ClientPool(ssh)
    removed = 0
    for ep in endpoints:
        client = pool.get(ep)
        removed += len(remove_by_label(client, args.run))
    _log(f"run {args.run}: removed {removed} container(s) on {len(endpoints)} endpoint(s)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    endpoints, ssh = _run_endpoints(args.run) if args.run else ([LOCAL_ENDPOINT], SshOptions())
    pool = ClientPool(ssh)
    flt = {"label": f"{LABEL}={args.run}" if args.run else LABEL}
    rows = [{"run": c.labels.get(LABEL), "node": c.labels.get("k3lab.node", "?"), "status": c.status, "container": c.name,
             "endpoint": describe(ep)}
            for ep in endpoints for c in pool.get(ep).containers.list(all=True, filters=flt, ignore_removed=True)]
    formats.emit(args, {"containers": rows}, _print_status)
    return 0


def _print_status(doc: dict) -> None:
    for r in doc["containers"]:
        print(f"{r['run']}  {r['node']:8} {r['status']:10} {r['container']:24} {r['endpoint']}")


def cmd_bench(args: argparse.Namespace) -> int:
    from k3lab.tools import bench

    return bench.main(args.out, args.scenario or ["a3_pd_1m", "k3_a3_pd"], not args.no_live)
