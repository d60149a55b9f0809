"""``k3lab release``: the whole scenario matrix in one command, one verdict, one combined report.

1. **Static** (in process, all scenarios): render, preflight and golden (the default sim
   inventory's artefacts against ``golden/``; a lab inventory's renders are not golden).
2. **Live**: one ``k3lab cycle`` per scenario, as a subprocess, at most ``--jobs`` at a time. On
   the sim each concurrent slot gets its own networks (``K3LAB_SIM_SUBNET``), the image is built
   once up front, and the largest topologies start first so the slots finish together. On the lab
   target each scenario needs its inventory (``--inventory SCENARIO=FILE``).
3. **Gate**: each run under the policy (:mod:`k3lab.model.policy`, :mod:`k3lab.reports.gate`).
4. **Report** in the release directory: ``release.json`` (what ``k3lab compare`` reads),
   ``release.md``, ``release.html``, ``junit.xml``; each run's own directory is under ``runs/``.

Exit status: 0 PASS, 1 FAIL, 3 INCOMPLETE (a blocking check could not be evaluated).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from k3lab import __version__, formats, outputs, settings
from k3lab.errors import UsageError
from k3lab.launch.simimage import neighbours
from k3lab.model import catalog, runs, siminventory, targetkinds
from k3lab.model.accept import AcceptedFinding
from k3lab.model.policy import Policy
from k3lab.model.policy import load as load_policy
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render
from k3lab.render import golden
from k3lab.reports import gate, releasereport
from k3lab.reports.releasereport import Cycle, ReleaseDoc

FILE = runs.RELEASE
SLOTS = 3  # cycles at a time by default: on 2 cores, 3 slots overlap one cycle's waits with the others' work


def _log(msg: str) -> None:
    formats.log("release", msg)


# ------------------------------------------------------------------------------------- static


def static_rows(sid: str, inventory: str | None, options: dict[str, str], target: str, strict: bool = False,
                accepted: Sequence[AcceptedFinding] = ()) -> list[gate.StaticRow]:
    """render / preflight / golden of one scenario, as gate rows (each with its duration). ``strict``: a
    preflight warning neither the inventory nor the policy (``accepted``) accepts fails the preflight row."""
    from k3lab.model.select import load_inventory

    t = time.monotonic()
    try:
        inv, name = load_inventory(sid, inventory)
        rendered = render.build(sid, inv, options, target, inventory_name=name)
    except Exception as exc:  # an inventory or render error is this scenario's failure, not the release's crash
        return [gate.StaticRow(id="static.render", status="fail", message=f"render failed: {exc}",
                          duration=round(time.monotonic() - t, 4))]
    rows = [gate.StaticRow(id="static.render", status="pass", duration=round(time.monotonic() - t, 4),
                      message=f"{len(rendered.plan.nodes)} nodes, {sum(len(f) for f in rendered.files.values())} files")]
    t = time.monotonic()
    findings = preflight.run(rendered.plan, rendered.files)
    outcome = preflight.judge(findings, [*inv.accept, *accepted])
    failing = outcome.errors + (outcome.warnings if strict else [])
    msg = "; ".join(f"{f.check} [{', '.join(f.nodes)}]: {f.message}" for f in failing) or \
        f"{len(preflight.CHECKS)} checks, 0 errors, {len(outcome.warnings)} warning(s)"
    msg += "".join(f"; accepted {f.check} [{', '.join(f.nodes)}]: {a.reason}" for f, a in outcome.accepted)
    rows.append(gate.StaticRow(id="static.preflight", status="fail" if outcome.failed(strict) else "pass", message=msg,
                          accepted=preflight.report(rendered.plan, outcome, strict)["accepted"],
                          duration=round(time.monotonic() - t, 4)))
    if inventory:
        rows.append(gate.StaticRow(id="static.golden", status="na", message="a lab inventory renders its own values",
                              duration=0.0))
        return rows
    t = time.monotonic()
    differ = golden.drift(rendered.plan, lambda node, name: rendered.files[node][name])
    rows.append(gate.StaticRow(id="static.golden", status="fail" if differ else "pass", duration=round(time.monotonic() - t, 4),
                          message=f"drifted from golden/: {', '.join(differ[:8])}" if differ else "equal to golden/"))
    return rows


# --------------------------------------------------------------------------------------- live


def _slot_env(slot: int) -> dict[str, str]:
    """Slot 0 keeps the default networks (so single runs and golden see the usual addresses)."""
    if slot == 0:
        return {}
    # device networks stay private: 172.30/16 and 172.31/16, then 10.130/16 on (the lab emulator has 10.213-214)
    device = f"172.{29 + slot}.0.0/16" if slot <= 2 else f"10.{127 + slot}.0.0/16"
    return {siminventory.SUBNET_ENV: f"172.28.{slot}.0/24", siminventory.DEVICE_SUBNET_ENV: device}


class Live:
    """Runs ``k3lab cycle`` subprocesses in bounded slots; Ctrl-C/SIGTERM interrupt them (they tear down)."""

    def __init__(self, out: Path, jobs: int, target: str, timeout: float, extra: list[str]):
        self.out, self.jobs, self.target, self.timeout, self.extra = out, jobs, target, timeout, extra
        self.slots: queue.Queue[int] = queue.Queue()
        for s in range(jobs):
            self.slots.put(s)
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopping = False

    def cycle(self, sid: str, inventory: str | None, inject: str | None) -> Cycle:
        slot = self.slots.get()
        try:
            if self.stopping:
                return Cycle(scenario=sid, exit=None, wall_s=0.0, note="not started: release interrupted")
            runs = self.out / "runs" / sid
            runs.mkdir(parents=True, exist_ok=True)
            log = self.out / "logs" / f"{sid}.log"
            log.parent.mkdir(exist_ok=True)
            argv = [sys.executable, "-m", "k3lab.cli.main", "cycle", sid, "--target", self.target]
            if inventory:
                argv += ["--inventory", inventory]
            if inject:
                argv += ["--inject", inject]
            if self.extra:
                argv += ["--", *self.extra]
            env = {**os.environ, "K3LAB_RUNS": str(runs), **(_slot_env(slot) if targetkinds.kind(self.target).own_subnet else {})}
            _log(f"{sid}: cycle started (slot {slot}){' with fault ' + inject if inject else ''}")
            t = time.monotonic()
            with log.open("w") as fh:
                proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env)
                with self.lock:
                    self.procs.add(proc)
                try:
                    code = proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGINT)  # the cycle tears down on SIGINT
                    code = proc.wait(timeout=120)
                    fh.write(f"\n[release] cycle timed out after {self.timeout:.0f}s\n")
                finally:
                    with self.lock:
                        self.procs.discard(proc)
            wall = time.monotonic() - t
            dirs = sorted(p for p in runs.iterdir() if p.is_dir())
            tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-3:]
            _log(f"{sid}: cycle exit {code} in {wall:.1f}s")
            return Cycle(scenario=sid, exit=code, wall_s=round(wall, 2), run_dir=str(dirs[-1]) if dirs else None,
                         log=str(log), note=" | ".join(tail)[-600:], slot=slot)
        finally:
            self.slots.put(slot)

    def interrupt(self) -> None:
        self.stopping = True
        with self.lock:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)


# ------------------------------------------------------------------------------------ release


def run_release(scenarios: list[str], policy: Policy, out: Path, target: str = "sim",
                inventories: dict[str, str] | None = None, jobs: int | None = None, live: bool = True,
                inject: dict[str, str] | None = None, timeout: float = 1800, pytest_extra: list[str] | None = None,
                policy_source: str = "default", strict: bool = False, force: bool = False) -> ReleaseDoc:
    """The release into ``out`` (absent or empty; any directory with ``force``): built in a directory beside
    it and swapped in when complete, so a failed or interrupted release leaves the previous one whole."""
    out = outputs.check_dir(out, force)
    with outputs.staged_dir(out, keep_on_error=live) as stage:
        if live:  # where the cycles' runs and logs are until the release is complete (kept if it fails)
            _log(f"building the release in {stage}; it becomes {out} when complete")
        doc = _release(scenarios, policy, stage, target, inventories or {}, jobs, live, inject or {}, timeout,
                       pytest_extra, policy_source, strict)
        doc = _moved(doc, stage, out)
        outputs.write_file(stage / FILE, json.dumps(doc, indent=2) + "\n")
        releasereport.write_all(stage, doc, shown_in=out)
    return doc


def _moved(doc: ReleaseDoc, stage: Path, out: Path) -> ReleaseDoc:
    """``doc`` with the paths of the staging directory (run directories, cycle logs) where they will be."""
    text = json.dumps(doc)
    old, new = json.dumps(str(stage.absolute()))[1:-1], json.dumps(str(out.absolute()))[1:-1]
    moved: ReleaseDoc = json.loads(text.replace(old, new)) if old in text else doc  # the same keys, paths replaced
    return moved


def _release(scenarios: list[str], policy: Policy, out: Path, target: str, inventories: dict[str, str],
             jobs: int | None, live: bool, inject: dict[str, str], timeout: float, pytest_extra: list[str] | None,
             policy_source: str, strict: bool) -> ReleaseDoc:
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.monotonic()
    static = {sid: static_rows(sid, inventories.get(sid), {}, target, strict, policy.for_scenario(sid).accepted_findings)
              for sid in scenarios}
    static_s = time.monotonic() - t0
    _log(f"static: {len(scenarios)} scenarios rendered, preflighted and compared with golden/ in {static_s:.2f}s")
    cycles: dict[str, Cycle] = {}
    warnings: list[str] = []
    slots = max(1, jobs) if jobs else SLOTS
    t1 = time.monotonic()
    if live:
        if targetkinds.kind(target).simulated:  # every cycle on this machine's engine, from the sim image
            _build_images(scenarios)
            slots, warnings = _sim_slots(scenarios, slots, explicit=bool(jobs))
        runner = Live(out, slots, target, timeout, _cycle_pytest_args(target, pytest_extra or []))
        cycles = _run_cycles(runner, scenarios, static, inventories, inject)
    live_s = time.monotonic() - t1 if live else 0.0
    verdicts = [_verdict(policy, sid, static[sid], cycles.get(sid), live) for sid in scenarios]
    return ReleaseDoc(
        schema=1, kind="k3lab-release", k3lab=__version__, target=target, strict=strict,
        policy=policy_source, started=started.isoformat(timespec="seconds"),
        finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        host=releasereport.Host(python=platform.python_version(), machine=platform.machine(), cpus=os.cpu_count(),
                                load=_load(), warnings=warnings),
        jobs=slots, live=live, scope="full" if live else "static-only", injected=inject,
        timings=releasereport.Timings(total_s=round(time.monotonic() - t0, 2), static_s=round(static_s, 3),
                                      live_s=round(live_s, 2),
                                      sum_of_cycles_s=round(sum(c["wall_s"] for c in cycles.values()), 2)),
        cycles=cycles, overall=gate.overall(verdicts), overall_label=gate.overall_label(verdicts),
        scenarios=[v.to_json() for v in verdicts])


def _cycle_pytest_args(target: str, extra: list[str]) -> list[str]:
    if not targetkinds.kind(target).simulated or any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in extra):
        return list(extra)
    # the slots already keep the cores busy; xdist's workers would add ~3 CPU-s of interpreter
    # start-up per cycle (measured: release 169.8 s -> 154.9 s on 2 cores)
    return [*extra, "-n", "0"]


def _run_cycles(runner: Live, scenarios: list[str], static: dict[str, list[gate.StaticRow]],
                inventories: dict[str, str], inject: dict[str, str]) -> dict[str, Cycle]:
    """Every scenario whose static stage passed, ``runner.jobs`` at a time; Ctrl-C/SIGTERM stop them all."""
    cycles: dict[str, Cycle] = {}
    runnable = [s for s in scenarios if not any(r["status"] == "fail" for r in static[s])]
    for sid in set(scenarios) - set(runnable):
        cycles[sid] = Cycle(scenario=sid, exit=None, wall_s=0.0, note="not run: the static stage failed")
    # largest topologies first: the slots then finish at about the same time
    runnable.sort(key=lambda s: -_node_count(s))
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum, frame):
        _log("interrupted: stopping the running cycles (each tears down)")
        runner.interrupt()

    for sig in previous:
        signal.signal(sig, stop)
    try:
        with ThreadPoolExecutor(max_workers=runner.jobs) as pool:
            futures = {sid: pool.submit(runner.cycle, sid, inventories.get(sid), inject.get(sid)) for sid in runnable}
            for sid, fut in futures.items():
                cycles[sid] = fut.result()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return cycles


def _verdict(policy: Policy, sid: str, static: list[gate.StaticRow], cycle: Cycle | None, live: bool) -> gate.Verdict:
    eff = policy.for_scenario(sid)
    run_dir = cycle.get("run_dir") if cycle else None
    if cycle and run_dir:
        return gate.evaluate_run(eff, run_dir, static, cycle.get("note", ""))
    items = gate.static_items(eff, static)
    if live:
        items.append(gate.Item("live.results", "live.results", "live", "block", "incomplete",
                               f"no run: {cycle.get('note', 'not started') if cycle else 'not started'}"))
    return gate.decide(sid, items)


def _build_images(scenarios: list[str]) -> None:
    """Every sim image the cycles need, built once up front: two cycles importing the same tag at
    once would each make an image, and their nodes would record different image ids."""
    from k3lab.launch.endpoints import local_client
    from k3lab.launch.simimage import image, vllm_ascend

    client = local_client(timeout=120)
    for version in sorted({vllm_ascend.version_for(catalog.SCENARIOS[s].seed) for s in scenarios}):
        _log(f"sim image {image.ensure(client, version)} (vllm-ascend {version}) ready")


def _sim_slots(scenarios: list[str], jobs: int, explicit: bool) -> tuple[int, list[str]]:
    """Slots for the sim, and host warnings. The largest ``jobs`` topologies run at once, and the
    kernel's one ARP table must hold their device networks (:mod:`k3lab.launch.simimage.neighbours`):
    by default the slots shrink until it does; an explicit ``--jobs`` is kept, with a warning."""
    plans = sorted((render.build(s, siminventory.default(s), {}, "sim").plan for s in scenarios),
                   key=neighbours.entries, reverse=True)
    warning = neighbours.warning(plans[:jobs])
    if warning and not explicit:
        fits = next((n for n in range(jobs - 1, 0, -1) if neighbours.warning(plans[:n]) is None), 1)
        warning = f"{jobs} cycles at a time reduced to {fits}: {warning}"
        jobs = fits
    if warning:
        _log(f"WARNING: {warning}")
    return jobs, [warning] if warning else []


def _node_count(sid: str) -> int:
    return len(siminventory.default(sid).nodes)


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def load(path: str | Path) -> runs.Release:
    """A release document validated by its model (k3lab.model.runs.Release)."""
    return runs.release(path)


# ------------------------------------------------------------------------------------ command


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        sid, sep, value = item.partition("=")
        if not sep or not value:
            raise UsageError(f"{what} takes SCENARIO=VALUE, got {item!r}")
        from k3lab.model.select import scenario_id

        out[scenario_id(sid)] = value
    return out


def _inventories(items: list[str]) -> dict[str, str]:
    inventories = _pairs(items, "--inventory")
    if piped := [sid for sid, path in inventories.items() if path == "-"]:
        # each cycle is its own process, which reads its inventory again: standard input is read only once
        raise UsageError(f"--inventory {piped[0]}=-: a release reads each inventory in its cycles; give a file")
    return inventories


def cmd_release(args) -> int:
    policy = load_policy(args.policy)  # a PolicyError is an input error: exit 2 with the field named
    if args.jobs is not None and not 1 <= args.jobs <= 32:
        raise UsageError(f"--jobs takes 1 to 32 cycles at a time, got {args.jobs}")
    args.target = args.target or "sim"
    scenarios = args.scenario or list(catalog.SCENARIOS)
    from k3lab.model.select import scenario_id

    for sid in scenarios:
        scenario_id(sid)  # unknown ids: a usage error with a did-you-mean
    inventories = _inventories(args.inventory)
    missing = [s for s in scenarios if s not in inventories]
    if targetkinds.kind(args.target).needs_inventory and missing and not args.static_only:
        raise UsageError(f"--target {args.target} needs --inventory SCENARIO=FILE for {', '.join(missing)}")
    inject = _pairs(args.inject, "--inject")
    _check_injections(inject, scenarios, args.target)
    if not args.static_only:
        _require_live(args.target, inventories)
    out = Path(args.out) if args.out else settings.current().releases / time.strftime("%Y%m%d-%H%M%S")
    force = bool(getattr(args, "force", False))
    outputs.check_dir(out, force)  # before the first cycle: a bad --out must not cost a release
    doc = run_release(scenarios, policy, out, args.target, inventories, args.jobs, not args.static_only, inject,
                      args.conformance_timeout, list(getattr(args, "pytest_args", []) or []),
                      str(args.policy or "default"), args.strict, force)
    formats.emit(args, doc, lambda d: _print_summary(d, out))
    return gate.EXIT[doc["overall"]]


def _require_live(target: str, inventories: dict[str, str]) -> None:
    """The sim cycles' [sim] extra and engine, before the first cycle starts (a lab's engines are its nodes')."""
    from k3lab.launch import prereq

    if targetkinds.kind(target).simulated:
        # the local engine when the cycles use it: a sim inventory names its own engine
        prereq.require("k3lab release", prereq.sim_extra, *([prereq.docker_engine] if not inventories else []))


def _check_injections(inject: dict[str, str], scenarios: list[str], target: str) -> None:
    """Checked up front: a bad SCENARIO=FAULT pair must not cost a whole release."""
    if not inject:
        return
    from k3lab.tools import faults

    for sid, fid in inject.items():
        fault = faults.CATALOG.get(fid)
        if fault is None or fault.kind != "live":
            raise UsageError(f"--inject {sid}={fid}: not a live fault of the catalog (k3lab faults --list)")
        if fault.scenario != sid or not targetkinds.kind(target).simulated:
            raise UsageError(f"--inject {sid}={fid}: fault {fid} is for {fault.scenario} on the sim target")
        if sid not in scenarios:
            raise UsageError(f"--inject {sid}={fid}: {sid} is not among the release's scenarios")


def _print_summary(doc: dict[str, Any], out: Path) -> None:
    t = doc["timings"]
    for v in doc["scenarios"]:
        formats.say(f"{v.get('label') or v['verdict']:10} {v['scenario']}"
                    + (f"  ({len(v['reasons'])} reason(s); first: {v['reasons'][0]})" if v["reasons"] else ""))
    scope = " (static only: render, preflight and golden; no deployment was checked)" if not doc["live"] else ""
    formats.say(f"release {doc.get('overall_label') or doc['overall']}{scope}: {len(doc['scenarios'])} scenarios, wall {t['total_s']:.1f}s "
          f"(static {t['static_s']:.2f}s, live {t['live_s']:.1f}s, sum of cycles {t['sum_of_cycles_s']:.1f}s); "
          f"report {out / 'release.html'}")
