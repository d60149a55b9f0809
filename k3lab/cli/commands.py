"""The CLI's handlers for the live commands: up, cycle, check, down, status, bench.

They turn parsed arguments into calls of the bring-up engine (k3lab.launch.lifecycle) and the tools
(faults, bench). The engine never imports this module or the CLI, so the layers import one way.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from k3lab import formats, outputs, settings
from k3lab.errors import CHECKS_FAILED, ENVIRONMENT, EnvError, UsageError
from k3lab.launch import prereq, suite
from k3lab.launch.backends import LABEL, teardown
from k3lab.launch.endpoints import (
    ClientPool,
    SshOptions,
    describe,
    each_host,
    reason,
)
from k3lab.launch.lifecycle import (
    GateFailed,
    Run,
    _log,
    attach,
    collect,
    describe_left,
    down_all,
    up,
)
from k3lab.launch.pipeline import Phase
from k3lab.launch.scope import Interrupted, RunScope
from k3lab.model import runs


def _suite(run: Run, args: argparse.Namespace) -> int:
    """The conformance suite against a deployment that is up, then evidence and reports: three phases of
    the run's pipeline. A failed suite is the run's verdict, not an end: evidence and reports follow it."""
    code = [1]

    def conformance() -> bool:
        argv = suite.command(run.dir, *args.pytest_args, junit=run.dir / "junit.xml")
        try:
            code[0] = subprocess.call(argv, timeout=args.conformance_timeout)
        except subprocess.TimeoutExpired:
            _log(f"conformance suite timed out after {args.conformance_timeout}s")
        except (KeyboardInterrupt, Interrupted):
            code[0] = 130
        return code[0] == 0

    try:
        run.pipeline.run([Phase("suite", conformance, "conformance_s")])
    finally:
        # each on its own: reports from what was collected, even when collecting failed part-way
        for phase in (Phase("collect", lambda: collect(run), "collect_s"),
                      Phase("reports", lambda: _write_reports(run.dir), "reports_s")):
            try:
                run.pipeline.run([phase])
            except Exception as exc:  # noqa: BLE001 - named; teardown and the verdict must still follow
                _log(f"{phase.name} failed: {exc!r}")
    return code[0]


def print_diagnosis(run_dir: Path | None) -> None:
    """The failed run's likely cause, node and remedy as the terminal's last lines (k3lab.diagnosis)."""
    if run_dir is None:
        return
    from k3lab.diagnosis.engine import diagnose
    from k3lab.diagnosis.triage import text

    try:
        lines = text(diagnose(run_dir))
    except Exception as exc:  # noqa: BLE001 - a diagnosis problem must never hide the failure itself
        lines = [f"diagnosis: not made ({exc!r}); k3lab triage {run_dir} retries it"]
    formats.say("\n".join(lines), file=sys.stderr, flush=True)


def _bring_up(args: argparse.Namespace, **kw) -> Run:
    """``up``; a failed readiness gate is reported with its reports and diagnosis, then exit 1."""
    from k3lab.model.select import _kv

    try:
        return up(args.scenario, args.inventory, _kv(args.option), args.target, pull=args.pull,
                  strict=args.strict, **kw)
    except GateFailed as exc:
        if exc.run_dir is not None:
            _write_reports(exc.run_dir)
        formats.say(f"k3lab: {exc}", file=sys.stderr, flush=True)
        print_diagnosis(exc.run_dir)
        raise SystemExit(CHECKS_FAILED) from None


def _write_reports(run_dir: Path) -> None:
    try:
        from k3lab.reports.runreports import rebuild

        reports = rebuild(run_dir)
        _log("reports: " + ", ".join(str(p) for p in reports.values()))
    except Exception as exc:  # a report problem must never block teardown
        _log(f"reports failed: {exc!r}")


def cmd_up(args: argparse.Namespace) -> int:
    with RunScope(log=_log) as scope:
        run = _bring_up(args, stages_only=args.stages_only, scope=scope)
        if args.keep:  # a deployment that came up stays up; a failed one is removed all the same
            scope.keep()
        elif not args.stages_only:
            collect(run)
    _left_is_environment(scope)
    formats.say(str(run.dir))
    return 0


def cmd_cycle(args: argparse.Namespace) -> int:
    """up, conformance suite, down, in one scope: whatever ends the cycle (a failed gate or suite, an
    exception, Ctrl-C, SIGTERM), everything it created is removed unless ``--keep``. Exit status: the
    suite's, or 3 when a host kept part of the run (its NPUs are still held)."""
    fault = _fault(args)
    code = 1
    run: Run | None = None
    with RunScope(log=_log) as scope:
        run = _bring_up(args, sim_faults=fault.at_start if fault else None, scope=scope)
        if args.keep:  # kept once it came up, whatever the suite says (a failed bring-up is removed)
            scope.keep()
        if fault and fault.running:
            from k3lab.tools import faults

            faults.inject(run, fault)
            _log(f"injected fault {fault.id}: {fault.mode}")
        code = _suite(run, args)
        if args.keep:
            run.save("up")
    if scope.left:
        _log(f"run {run.id}: the suite exited {code}; exit 3 because the run is still on {describe_left(scope.left)}")
        code = ENVIRONMENT
    _log(f"run {run.id}: conformance exit {code}; evidence in {run.dir}")
    if code not in (0, 130):
        print_diagnosis(run.dir)
    return code


def _left_is_environment(scope: RunScope) -> None:
    if scope.left:
        raise EnvError(f"run {scope.run_id} is still on {describe_left(scope.left)}: their endpoints did not "
                       f"answer; run 'k3lab down {scope.run_id}' again once they do (the run-state remembers them)")


def cmd_check(args: argparse.Namespace) -> int:
    """Attach mode: the conformance suite against a deployment operators started by hand (no up, no down;
    only the kit's own helper containers are removed)."""
    from k3lab.model.select import _kv

    if not args.inventory:
        raise UsageError("k3lab check: give the lab inventory of the running deployment (-i lab.yaml)")
    with RunScope(log=_log) as scope:
        run = attach(args.scenario, args.inventory, _kv(args.option), scope)
        code = _suite(run, args)
        run.save("attached")
    _log(f"run {run.id}: conformance exit {code}; evidence in {run.dir}")
    if code not in (0, 130):
        print_diagnosis(run.dir)
    return code


def _run_endpoints(run: str) -> tuple[dict[str, str], SshOptions]:
    """Per node the endpoint a run used (its run-state.json), else the local engine."""
    if (settings.current().runs / run / runs.RUN_STATE).is_file():
        state = runs.run_state(settings.current().runs / run)
        return dict(state.endpoints) or {"local": prereq.local_endpoint()}, SshOptions.from_dict(state.ssh)
    # the kit host's engine as the sim and down --all see it: $DOCKER_HOST when set
    return {"local": prereq.local_endpoint()}, SshOptions()


def _fault(args: argparse.Namespace):
    """``cycle --inject FAULT``: a live fault of the catalog on the sim (how k3lab release proves its gate)."""
    if not getattr(args, "inject", None):
        return None
    from k3lab.tools import faults

    fault = faults.CATALOG.get(args.inject)
    if fault is None or fault.kind != "live":
        raise UsageError(f"--inject takes a live fault id of k3lab/tools/faults.py (k3lab faults --list), "
                         f"not {args.inject!r}")
    from k3lab.model import select, targetkinds

    target = select.target(args.scenario, args.target, args.inventory)
    if fault.scenario != args.scenario or not targetkinds.kind(target).simulated:
        raise UsageError(f"fault {fault.id} is for {fault.scenario} on the sim target")
    return fault


RUN_ID_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}"


def run_id(run: str | None) -> str:
    """A run id names one directory under runs/ and a container label: never empty, never a path
    (an empty ``$RUN`` in a script must not mean every run, ``../x`` must not read outside runs/)."""
    if run is None or not re.fullmatch(RUN_ID_RE, run) or run.strip(".") == "":
        raise UsageError(f"not a run id: {run!r} (k3lab status lists them: letters, digits, '_', '.', '-')")
    return run


def cmd_down(args: argparse.Namespace) -> int:
    if args.all:
        if args.run is not None:
            raise UsageError("k3lab down: give a run id or --all, not both")
        return down_all()
    if args.run is None:
        raise UsageError("k3lab down: give a run id (k3lab status) or --all")
    endpoints, ssh = _run_endpoints(run_id(args.run))
    path = settings.current().runs / args.run / runs.RUN_STATE
    state = runs.run_state(path.parent) if path.is_file() else None
    if state is not None and _down_by_target(path, state):
        return 0
    # a teardown that could not reach every host recorded the rest: finish those
    todo = dict(state.left) if state and state.left else endpoints
    prereq.for_endpoints("k3lab down", todo.values())
    removed, left = teardown(ClientPool(ssh), args.run, todo)
    if state is not None:
        update = {"status": "down-incomplete" if left else "down", "left": left}
        outputs.write_run_file(path, state.model_copy(update=update).model_dump_json(indent=2))
    _log(f"run {args.run}: removed {len(removed)} container(s) on {len(set(todo.values())) - len(set(left.values()))} "
         f"endpoint(s)")
    if left:
        raise EnvError(f"run {args.run} is still on {describe_left(left)}: their endpoints did not answer; "
                       f"run 'k3lab down {args.run}' again once they do (the run-state remembers them)")
    return 0


def _down_by_target(path: Path, state: runs.RunState) -> bool:
    """A run of a target that removes its own (k8s: by the run label, in the recorded context): done here."""
    if not state.target:
        return False
    from k3lab.launch import targets

    done = targets.get(state.target).down_recorded(state)
    if done is None:
        return False
    update = {"status": "down-incomplete" if done.left else "down", "left": done.left}
    outputs.write_run_file(path, state.model_copy(update=update).model_dump_json(indent=2))
    if done.left:
        raise EnvError(f"run {state.run} is still on {describe_left(done.left)}: it did not answer; run "
                       f"'k3lab down {state.run}' again once it does")
    _log(f"run {state.run}: removed {done.what}")
    return True


def cmd_status(args: argparse.Namespace) -> int:
    endpoints, ssh = (_run_endpoints(run_id(args.run)) if args.run is not None
                      else ({"local": prereq.local_endpoint()}, SshOptions()))
    prereq.for_endpoints("k3lab status", endpoints.values())
    pool = ClientPool(ssh)
    flt = {"label": f"{LABEL}={args.run}" if args.run else LABEL}
    nodes_of: dict[str, list[str]] = {}
    for node, ep in endpoints.items():
        nodes_of.setdefault(ep, []).append(node)
    answers, failures = each_host(lambda ep: pool.get(ep).containers.list(all=True, filters=flt, ignore_removed=True),
                                  {ep: ep for ep in nodes_of}, settings.current().host_deadline_s)
    rows = [{"run": c.labels.get(LABEL), "node": c.labels.get("k3lab.node", "?"), "status": c.status, "container": c.name,
             "endpoint": describe(ep)}
            for ep, listed in answers.items() for c in listed]
    unanswered = [{"nodes": nodes_of[ep], "endpoint": describe(ep), "reason": reason(exc)} for ep, exc in failures.items()]
    formats.emit(args, {"containers": rows, "unanswered": unanswered}, _print_status)
    if failures:
        raise EnvError(f"status of {len(failures)} endpoint(s) unknown: " +
                       ", ".join(f"{', '.join(nodes_of[ep])} ({describe(ep)})" for ep in failures))
    return 0


def _print_status(doc: dict) -> None:
    for r in doc["containers"]:
        formats.say(f"{r['run']}  {r['node']:8} {r['status']:10} {r['container']:24} {r['endpoint']}")
    for r in doc["unanswered"]:
        formats.say(f"{', '.join(r['nodes'])} ({r['endpoint']}): no answer: {r['reason']}")


def cmd_bench(args: argparse.Namespace) -> int:
    from k3lab.tools import bench

    doc = bench.measure(args.out, args.scenario or ["a3_pd_1m", "k3_a3_pd"], not args.no_live)
    formats.emit(args, doc, bench.print_summary)
    return 0
