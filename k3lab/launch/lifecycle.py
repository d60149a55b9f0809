"""Bring a scenario up phase by phase, gate on readiness, collect evidence, always tear down.

``up`` runs the phases of :mod:`k3lab.launch.pipeline`: render and the static preflight, the
target's own checks (a lab's preflight and host stage), the containers (created, files staged through
the target), the target's checks of the started nodes (a lab's hardware stage), then each stage of the
plan: its processes started in parallel, its gates awaited (every wait has a timeout). A failing gate
names the node and process that is pending or dead, with the tail of its log. Teardown is not called
from here and there: each resource registers its removal with the run's
:class:`~k3lab.launch.scope.RunScope` when it is created, and the scope removes it on every path
(success unless ``--keep``, failure, Ctrl-C, SIGTERM).
"""
from __future__ import annotations

import json
import shlex
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from k3lab import formats, outputs, settings, waits
from k3lab.errors import ChecksFailed, EnvError, RunInterrupted
from k3lab.launch import findings, metrics, targets
from k3lab.launch.endpoints import HTTP, describe, each_host, reason
from k3lab.launch.pipeline import Phase, Pipeline
from k3lab.launch.scope import Interrupted, RunScope
from k3lab.launch.targets import Target
from k3lab.launch.targets.base import Removed
from k3lab.launch.targets.lab import AttachedLab, LabTarget
from k3lab.model import apikey, runs, targetkinds
from k3lab.model.plan import Gate, Plan, Process
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render

__all__ = ["GateFailed", "Interrupted", "Run", "attach", "collect", "down", "down_all", "up"]


class GateFailed(ChecksFailed, RuntimeError):
    """A readiness gate failed: exit code 1. The message names stage, node, process and log tail;
    callers (the fault matrix) read them from the fields, never from the text."""

    def __init__(self, message: str, stage: str = "", node: str | None = None, process: str | None = None,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.stage, self.node, self.process, self.log_tail = stage, node, process, log_tail
        self.run_dir: Path | None = None  # set by up() once the evidence is collected

    def record(self, run_dir: Path) -> None:
        """gate-failure.json in the run directory: the diagnosis (k3lab.diagnosis) reads where it stopped."""
        self.run_dir = run_dir
        doc = {"stage": self.stage, "node": self.node, "process": self.process,
               "message": str(self).splitlines()[0] if str(self) else "", "log_tail": self.log_tail}
        outputs.write_run_file(run_dir / runs.GATE_FAILURE, apikey.redact(json.dumps(doc, indent=2)))


def _log(msg: str) -> None:
    formats.log("k3lab", msg)


@dataclass
class Run:
    id: str
    dir: Path
    plan: Plan
    rendered: render.Rendered
    target: Target
    timings: dict[str, float]
    scope: RunScope
    pipeline: Pipeline
    # per node: what the guide's interactive shell (~/.bashrc, set_env.sh) adds to a bare docker exec
    shell_env: dict[str, dict[str, str]] = field(default_factory=dict)
    attached: bool = False

    def __post_init__(self) -> None:
        # registered first, so it runs last: once everything else is removed, the state says what is left
        self.scope.on_close(f"run {self.id}'s state", self._record_teardown)

    @property
    def backend(self) -> Target:
        """The target (older name, kept for the tools that still say ``run.backend``)."""
        return self.target

    def state(self, status: str) -> runs.RunState:
        """run-state.json through its model: what every reader will validate (the phases ride as an extra key)."""
        return runs.RunState.model_validate({"version": runs.VERSION, "run": self.id, "status": status, "scenario": self.plan.scenario,
                "target": self.plan.target, "plan": str(self.dir / "plan.json"), "run_dir": str(self.dir),
                "containers": self.target.container_names(), "network": None,
                "endpoints": {n.name: n.endpoint for n in self.plan.nodes}, "timings": self.timings,
                "left": self.scope.left or self.target.left, "attached": self.attached,
                "phases": [r.as_dict() for r in self.pipeline.results], **self.target.state()})

    def save(self, status: str) -> None:
        outputs.write_run_file(self.dir / runs.RUN_STATE, self.state(status).model_dump_json(indent=2))

    def _record_teardown(self) -> dict[str, str]:
        left = self.scope.left
        self.timings["teardown_s"] = getattr(self.target, "teardown_s", 0.0)
        # a hand-started deployment stays up: only the kit's own helpers were removed
        self.save("attached" if self.attached else "down-incomplete" if left else "down")
        _log(f"run {self.id}: removed {self.target.removed_what()} in {self.timings['teardown_s']:.1f}s")
        if left:
            _log(f"run {self.id}: NOT removed from {describe_left(left)}; 'k3lab down {self.id}' once they answer")
        return {}


# --------------------------------------------------------------------------------- processes



def pid_file(proc: Process) -> str:
    return f"{proc.cwd.rstrip('/')}/.k3lab/{proc.id.replace('/', '_')}.pid"


# the paths (inventory values) reach the shell as variables of its environment, never as its text
START = ('mkdir -p "$(dirname -- "$K3_PID")" "$(dirname -- "$K3_LOG")" && echo $$ > "$K3_PID" && '
         'exec bash "$K3_SCRIPT" >> "$K3_LOG" 2>&1')


def start_process(run: Run, proc: Process) -> None:
    """Start one planned process detached; its shell records a PID so liveness can be checked."""
    script = proc.script or ""
    pid = pid_file(proc)
    # the environment the guide's interactive shell has in this image (shell parity), then the kit's own
    env = {**run.shell_env.get(proc.node, {}), "K3_PID": pid, "K3_LOG": proc.log, "K3_SCRIPT": script}
    env.update(run.target.process_env())
    secret = apikey.get()
    if secret and proc.kind in ("engine", "launcher"):
        env["VLLM_API_KEY"] = secret
    if secret and proc.kind == "proxy":
        env["OPENAI_API_KEY"] = secret
    run.target.exec_detached(proc.node, ["bash", "-c", START], env=env, workdir=proc.cwd)


def alive(run: Run, proc: Process) -> bool:
    """False only when the recorded PID is gone; a process that has not written its PID yet counts as alive."""
    return alive_all(run, [proc])[proc.id]


def alive_all(run: Run, procs: list[Process]) -> dict[str, bool]:
    """``alive`` for several processes: one exec per node, nodes in parallel (a round trip each on a lab)."""
    from concurrent.futures import ThreadPoolExecutor

    known = run.target.liveness(procs)  # k8s: the pods' phase and container states
    if known is not None:
        return known
    by_node: dict[str, list[Process]] = {}
    for p in procs:
        by_node.setdefault(p.node, []).append(p)

    def node_alive(node: str) -> dict[str, bool]:
        group = by_node[node]
        # each line answers for one process, so a partial answer (exec cut short) still counts for
        # the lines it has; an unanswered process (exec failed, container gone) counts as gone
        answers = run.target.exec(node, alive_argv([pid_file(p) for p in group]), timeout=10).output.split()
        return {p.id: i < len(answers) and answers[i] == "0" for i, p in enumerate(group)}

    result: dict[str, bool] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for got in pool.map(node_alive, by_node):
            result.update(got)
    return result


# one line per pid file, in order: 0 alive (or no PID yet), 1 gone. The paths come from the
# inventory (paths.workdir): they are the script's arguments, never part of its text.
ALIVE = 'for f in "$@"; do if [ ! -s "$f" ] || kill -0 "$(cat -- "$f")" 2>/dev/null; then echo 0; else echo 1; fi; done'


def alive_argv(pid_files: list[str]) -> list[str]:
    return ["bash", "-c", ALIVE, "k3lab-alive", *pid_files]


def log_tail(run: Run, proc: Process, lines: int = 20) -> str:
    res = run.target.exec(proc.node, ["tail", "-n", str(lines), proc.log], timeout=10)
    # a failed tail says why in its own output (no such file); a silent failure says so here
    return res.output if res.ok or res.output.strip() else f"(tail {proc.log} exited {res.rc} with no output)"


# ------------------------------------------------------------------------------- shell parity

_SPLIT = "\0@@k3lab-interactive@@\0"
# one round trip: the bare docker exec environment, then the interactive shell's (reads ~/.bashrc)
SHELL_PARITY = 'env -0; printf "\\0@@k3lab-interactive@@\\0"; bash -ic "env -0" 2>/dev/null </dev/null'
SHELL_NOISE = {"_", "SHLVL", "PWD", "OLDPWD", "PS1", "PS2", "PS4", "HISTFILE", "HISTSIZE", "HISTFILESIZE",
               "HISTCONTROL", "COLUMNS", "LINES", "TERM", "BASHOPTS", "SHELLOPTS"}


def _env0(text: str) -> dict[str, str]:
    out = {}
    for item in text.split("\0"):
        if "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out


def shell_env(run: Run, node) -> dict[str, str]:
    """Variables the guide's interactive shell has that a bare ``docker exec`` lacks or has otherwise.

    The difference goes to ``evidence/<node>/shell-env.txt``; processes are started with it, so the
    engine scripts see what an operator's ``docker exec -it ... bash`` sees (LD_LIBRARY_PATH,
    LD_PRELOAD, CANN set_env.sh)."""
    res = run.target.exec(node.name, ["bash", "-c", SHELL_PARITY], timeout=30)
    code = res.rc  # recorded in the evidence; what the shells printed is compared either way
    bare_raw, found, shell_raw = res.output.partition(_SPLIT)
    bare, shell = _env0(bare_raw), _env0(shell_raw) if found else {}
    delta = {k: v for k, v in shell.items() if bare.get(k) != v and k not in SHELL_NOISE}
    lines = [f"# {node.name}: environment of the guide's interactive shell (bash -i: ~/.bashrc) vs a bare docker exec",
             f"# exit {code}; {len(delta)} variable(s) differ; processes are started with the interactive values"]
    for k in sorted(set(delta) | {k for k in bare if k not in shell and k not in SHELL_NOISE and found}):
        lines.append(f"{k}\n  docker exec: {bare.get(k, '(unset)')}\n  login shell: {shell.get(k, '(unset)')}")
    ndir = run.dir / "evidence" / node.name
    outputs.real_dirs(ndir, run.dir)  # evidence/ and the node's folder: real folders
    outputs.write_run_file(ndir / "shell-env.txt", apikey.redact("\n".join(lines) + "\n"))
    return delta


# -------------------------------------------------------------------------------------- gates


def _tcp_open(run: Run, gate: Gate) -> bool:
    host, port = gate.target.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=1):
        return True


def _http_200(run: Run, gate: Gate) -> bool:
    headers = {}
    if apikey.get() and "/v1/" in gate.target:
        headers["Authorization"] = f"Bearer {apikey.get()}"
    return HTTP.get(gate.target, timeout=2, headers=headers).status_code == 200


def _log_line(run: Run, gate: Gate) -> bool:
    proc = next(p for p in run.plan.processes() if p.id == gate.process)
    return run.target.exec(gate.node, ["grep", "-qF", gate.target, proc.log], timeout=10).ok


def _proxy_instances(run: Run, gate: Gate) -> bool:
    body = requests.get(gate.target, timeout=2).json()
    return body.get("status") == "ok" and all(body.get(f"{role}_instances") == n
                                              for role, n in (gate.instances or {}).items())


def _metaservice_capacity(run: Run, gate: Gate) -> bool:
    text = HTTP.get(gate.target, timeout=2).text
    return int(metrics.total(text, "memcache_total_capacity_bytes", medium="dram")) == gate.expect


GATE_PROBES = {"tcp": _tcp_open, "http": _http_200, "log": _log_line, "proxy_instances": _proxy_instances,
               "metaservice_capacity": _metaservice_capacity}


def gate_ok(run: Run, gate: Gate) -> bool:
    """One probe of one readiness gate; an unreachable or malformed answer is 'not yet'."""
    probe = GATE_PROBES.get(gate.kind)
    try:
        return bool(probe and probe(run, gate))
    except (OSError, requests.RequestException, ValueError):
        return False


def wait_stage(run: Run, stage, timeout: float, progress, started: list[str]) -> None:
    """Wait for the stage's gates; fail at once, naming it, when any process started so far has exited."""
    pending = list(stage.gates)
    procs = {p.id: p for p in run.plan.processes()}
    last_alive_check = [time.monotonic()]

    def passed() -> bool:
        pending[:] = [g for g in pending if not gate_ok(run, g)]
        if not pending:
            return True
        progress(stage.name, len(stage.gates) - len(pending), len(stage.gates), pending[0])
        if time.monotonic() - last_alive_check[0] > 2:
            last_alive_check[0] = time.monotonic()
            _fail_on_exited(run, stage.name, [procs[pid] for pid in started], pending[0])
        return False

    if waits.poll(passed, timeout, 0.25):
        return
    g = pending[0]
    proc = procs.get(g.process) if g.process else None
    tail = log_tail(run, proc) if proc else ""
    raise GateFailed(f"stage {stage.name}: timed out after {timeout:.0f}s waiting for {g.describe()} "
                     f"({len(pending)} gate(s) pending); last log lines of {g.process}:\n{tail}",
                     stage.name, proc.node if proc else None, g.process, tail)


def _fail_on_exited(run: Run, stage: str, started: list[Process], waiting: Gate) -> None:
    """A started process that has exited fails its stage at once, naming it, instead of at the timeout."""
    living = alive_all(run, started)
    for proc in started:
        if not living[proc.id]:
            tail = log_tail(run, proc)
            raise GateFailed(f"stage {stage}: {proc.id} on {proc.node} exited before {waiting.describe()}; "
                             f"last log lines:\n{tail}", stage, proc.node, proc.id, tail)


class Progress:
    """Stage progress: a rich status line on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.last = ""
        self.started = time.monotonic()
        self.status = None
        if self.tty:
            from rich.console import Console

            self.status = Console().status("")
            self.status.start()

    def __call__(self, stage: str, done: int, total: int, gate: Gate) -> None:
        line = f"{stage}: {done}/{total} gates ready, {time.monotonic() - self.started:.1f}s, waiting for {gate.describe()}"
        if self.status is not None:
            self.status.update(line)
        elif line.split(",")[0] != self.last:
            self.last = line.split(",")[0]
            _log(line)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


# ------------------------------------------------------------------------------------ up/down


def _target(plan: Plan, run_id: str, inv, scope: RunScope, sim_faults: dict | None, pull: str,
            strict: bool) -> Target:
    cls = targets.get(plan.target)
    if cls is LabTarget:
        return LabTarget.for_inventory(plan, run_id, inv, scope, pull=pull, strict=strict)
    return cls.for_inventory(plan, run_id, inv, scope, faults=sim_faults)


def up(scenario: str, inventory_path: str | None, options: dict[str, str], target: str | None,
       keep_on_failure: bool = False, sim_faults: dict | None = None, pull: str = "never", strict: bool = False,
       stages_only: bool = False, scope: RunScope | None = None) -> Run:
    """Render, preflight and bring the plan up, phase by phase (:mod:`k3lab.launch.pipeline`).

    Every resource is registered with ``scope`` when it is created. Given a scope (``cycle``), the caller's
    ``with`` closes it; without one, ``up`` makes its own: on failure it is closed here (unless
    ``keep_on_failure``), on success the run keeps it open until :func:`down`.
    ``sim_faults`` (tests and the fault matrix only): simulated faults present from the start.
    ``strict``: a preflight warning the inventory does not accept stops the run before anything starts.
    ``stages_only`` (lab): the host and hardware stages, then teardown; no engine starts."""
    from k3lab.model.select import load_inventory
    from k3lab.model.select import target as target_of

    tgt = target_of(scenario, target, inventory_path)
    targetkinds.check_stages_only(tgt, stages_only)
    inv, inv_name = load_inventory(scenario, inventory_path)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    own = scope is None
    scope = scope if scope is not None else RunScope(run_id, _log)
    scope.run_id = run_id
    timings: dict[str, float] = {}
    pipeline = Pipeline(timings)
    started = time.monotonic()
    static: dict = {}

    def render_and_preflight() -> None:
        rendered = render.build(scenario, inv, options, tgt, inventory_name=inv_name, run_label=run_id)
        static.update(rendered=rendered, checked=_refuse_preflight_errors(rendered, inv, strict))

    pipeline.run([Phase("render-preflight", render_and_preflight, "render_preflight_s")])
    plan = static["rendered"].plan
    tgt_obj = _target(plan, run_id, inv, scope, sim_faults, pull, strict)
    tgt_obj.refuse_to_start()
    for warning in tgt_obj.warnings():
        _log(f"WARNING: {warning}")
    run_dir = settings.current().runs / run_id
    render.write(static["rendered"], run_dir / "rendered")
    outputs.write_run_file(run_dir / "plan.json", render.plan_json(plan))
    outputs.write_run_file(run_dir / "preflight.json", json.dumps(static["checked"], indent=2) + "\n")  # the reports list its acceptances
    run = Run(run_id, run_dir, plan, static["rendered"], tgt_obj, timings, scope=scope, pipeline=pipeline)
    run.save("starting")
    _log(f"run {run_id}: {scenario} on {tgt}, {len(plan.nodes)} nodes, run dir {run_dir}")
    progress = Progress()
    try:
        with scope.signals():  # SIGTERM ends the run like Ctrl-C: the except below still runs
            _bring_up(run, progress, stages_only, started)
    except (Exception, KeyboardInterrupt, Interrupted) as exc:
        progress.stop()
        _failed(run, exc, keep_on_failure, own)
        if isinstance(exc, (KeyboardInterrupt, Interrupted)):
            raise RunInterrupted("interrupted") from None
        raise
    finally:
        progress.stop()
    return run


def _bring_up(run: Run, progress: Progress, stages_only: bool, started: float) -> None:
    target, pipeline = run.target, run.pipeline
    pipeline.run(target.phases_before_containers(run))
    pipeline.run([Phase("containers", lambda: _create_containers(run), "containers_s")])
    pipeline.run(target.phases_after_containers(run))
    if stages_only:
        run.timings["up_s"] = time.monotonic() - started
        run.save("proven")
        _log(f"run {run.id}: hosts and hardware proven in {run.timings['up_s']:.1f}s; no engine was started")
        down(run)
        return
    pipeline.run(_stage_phases(run, progress))
    run.timings["up_s"] = time.monotonic() - started
    run.save("up")
    _log(f"run {run.id} is up in {run.timings['up_s']:.1f}s; entrypoint {run.plan.expect.entrypoint}")


def _failed(run: Run, exc: BaseException, keep: bool, own: bool) -> None:
    """Evidence and state of a bring-up that stopped, collected before anything is removed; then the
    scope closes (when ``up`` owns it; else on the caller's ``with`` exit, right after)."""
    if not run.scope.closed:
        collect(run)
    if isinstance(exc, GateFailed):
        exc.record(run.dir)
    run.save("failed")
    if keep:
        run.scope.keep()
    if own:
        run.scope.close()


def _stage_phases(run: Run, progress: Progress) -> list[Phase]:
    """One phase per stage of the plan, in the documented order: its processes started, its gates awaited."""
    launched: list[str] = []
    procs = {p.id: p for p in run.plan.processes()}

    def stage_phase(stage) -> Callable[[], None]:
        def launch() -> None:
            t = time.monotonic()
            for pid in stage.processes:
                start_process(run, procs[pid])
                launched.append(pid)
            wait_stage(run, stage, run.target.gate_timeout(stage), progress, launched)
            _log(f"stage {stage.name}: ready in {time.monotonic() - t:.1f}s")

        return launch

    return [Phase(f"stage-{s.name}", stage_phase(s), f"stage_{s.name}_s") for s in run.plan.stages]


def _refuse_preflight_errors(rendered, inv, strict: bool) -> preflight.PreflightReport:
    """The static preflight; its document (findings, accepted ones) unless it fails, then nothing starts."""
    found = preflight.run(rendered.plan, rendered.files, sim_subnet=inv.sim.subnet)
    outcome = findings.refuse(found, inv.accept, strict, "preflight")
    return preflight.report(rendered.plan, outcome, strict)


def _create_containers(run: Run) -> None:
    """Every node's container created, its files staged, started; then each node's login-shell env."""
    from concurrent.futures import ThreadPoolExecutor

    plan = run.plan
    run.target.prepare()
    _log(f"creating {len(plan.nodes)} containers")

    def bring_up(n) -> None:  # per node, no barrier between the steps (each a round trip on a lab)
        run.target.create(n)
        run.target.put(n, _node_files(run, n))
        run.target.start(n)

    run.target.parallel(bring_up, plan.nodes)
    run.target.after_start()
    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        run.shell_env = dict(zip([n.name for n in plan.nodes], pool.map(lambda n: shell_env(run, n), plan.nodes)))
    run.timings["shell_env_s"] = time.monotonic() - t
    run.save("starting")


def _node_files(run: Run, node) -> dict[str, tuple[bytes, int]]:
    files = dict(run.target.stage_extra(node))
    for art in node.artefacts:
        if art.path.startswith("/"):
            files[art.path] = (run.rendered.files[node.name][art.name].encode(), art.mode)
    return files


# Sockets listening on all interfaces, with the command line of the owning process: the guides
# warn that every service listens on 0.0.0.0 without authentication (security posture evidence).
OPEN_SOCKETS = r"""
for t in /proc/net/tcp /proc/net/tcp6; do
  tail -n +2 "$t" | while read -r _ local _ st _ _ _ _ _ inode _; do
    [ "$st" = 0A ] || continue
    addr=${local%:*}; port=$((16#${local##*:}))
    case "$addr" in 00000000|00000000000000000000000000000000) ;; *) continue ;; esac
    owner=$(ls -l /proc/[0-9]*/fd/* 2>/dev/null | grep "socket:\[$inode\]" | head -1 | sed 's#.*/proc/\([0-9]*\)/fd.*#\1#')
    cmd=$( [ -n "$owner" ] && tr '\0\n' '  ' < /proc/$owner/cmdline | cut -c1-160 )
    echo "0.0.0.0:$port pid=${owner:-?} $cmd"
  done
done | sort -t: -k2 -n -u
"""


def collect(run: Run) -> None:
    """Evidence into the run dir: each process log, docker inspect, metrics of every API.

    Nodes in parallel, one exec per node (every log and the open sockets in one batch): on a lab
    each exec over ssh:// is a round trip."""
    from k3lab.launch.endpoints import batch_script, split_batch

    evidence = run.dir / "evidence"
    outputs.real_dirs(evidence)  # a symlink placed at evidence/ must not carry the evidence elsewhere

    def one(node) -> None:
        if not run.target.has(node.name):
            return
        ndir = evidence / node.name
        outputs.real_dirs(ndir)
        try:
            outputs.write_run_file(ndir / "inspect.json", json.dumps(run.target.inspect(node.name), indent=2, default=str))
            logs = sorted({p.log for p in node.all_processes()})
            script, token = batch_script([f"cat {shlex.quote(log)}" for log in logs] + [OPEN_SOCKETS])
            # the batch frames each command's own rc and output: the exec's status adds nothing
            parts = split_batch(run.target.exec(node.name, ["sh", "-c", script], timeout=30).output, token,
                                len(logs) + 1)
            for log, got in zip(logs, parts):
                outputs.write_run_file(ndir / Path(log).name, apikey.redact(got[1] + got[2] if got else "(no answer)\n"))
            outputs.write_run_file(ndir / "open-sockets.txt", apikey.redact(parts[-1][1] if parts[-1] else "(no answer)\n"))
            for name, text in run.target.evidence(node.name).items():
                outputs.write_run_file(ndir / name, apikey.redact(text))
        except Exception as exc:  # evidence is best effort; teardown must still run
            outputs.write_run_file(ndir / "collect-error.txt", repr(exc))

    def versions() -> None:
        try:  # versions as evidence, read from the nodes themselves (k3lab.launch.versions)
            from k3lab.launch.versions import probe

            probe(run)
        except Exception as exc:  # best effort like the rest; the release gate reports a missing versions.json
            outputs.write_run_file(evidence / "versions-error.txt", repr(exc))

    def metrics() -> None:
        for api in run.plan.expect.apis:
            try:
                text = HTTP.get(f"{api.url}/metrics", timeout=2).text
                outputs.write_run_file(evidence / f"metrics-{api.node}-{api.url.rsplit(':', 1)[1]}.prom", text)
            except requests.RequestException:
                pass

    from concurrent.futures import ThreadPoolExecutor

    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:  # independent reads; each waits on other nodes
        per_node = pool.submit(run.target.parallel, one, run.plan.nodes, run.target.host_deadline)
        others = [pool.submit(versions), pool.submit(metrics)]
        for node, why in per_node.result().items():  # a host that did not answer: named, the rest collected
            _log(f"evidence: {why}")
            outputs.write_run_file(evidence / node / "collect-error.txt", why + "\n")
        for job in others:
            job.result()
    run.timings["collect_s"] = time.monotonic() - t


def down(run: Run) -> dict[str, str]:
    """Close the run's scope: everything it created removed from every host that answers. The nodes
    left behind (node -> endpoint), also kept in the run-state so ``k3lab down RUN`` finishes the job
    once they answer."""
    return run.scope.close()


def describe_left(left: dict[str, str]) -> str:
    """``p1 (10.0.0.2), d0 (10.0.0.5)``: the nodes a teardown left behind, with their hosts."""
    return ", ".join(f"{node} ({describe(ep)})" for node, ep in left.items())


def down_all() -> int:
    """Every target asked at once, each within its own deadline: its k3lab runs removed (the sim: every
    container of a k3lab run on the local engine; k8s: each recorded run that is not down, by its run label).
    A target that does not answer is named in one line and the others proceed; exit 3 if any did not."""
    recorded = _recorded_up()
    names = targets.names()
    deadline = settings.current().teardown_deadline_s + settings.current().answer_timeout_s

    def ask(name: str) -> dict[str, Removed] | None:
        return targets.get(name).down_all([s for _, s in recorded.values() if s.target == name])

    answers, failures = each_host(ask, {n: n for n in names}, deadline)
    left: list[str] = []
    for name in names:
        if name in failures:
            _log(f"target {name}: not reached: {reason(failures[name])}")
            left.append(f"target {name}")
            continue
        for run_id, done in (answers.get(name) or {}).items():
            if run_id in recorded:
                path, state = recorded[run_id]
                outputs.write_run_file(path, state.model_copy(update={
                    "status": "down-incomplete" if done.left else "down", "left": done.left}).model_dump_json(indent=2))
            who = f"run {run_id}" if run_id else f"target {name}"
            _log(f"{who}: " + (f"NOT removed from {describe_left(done.left)}" if done.left else f"removed {done.what}"))
            left += [f"run {run_id} on {describe_left(done.left)}"] if done.left else []
    if left:
        raise EnvError(f"not reached: {'; '.join(left)}: 'k3lab down --all' again once they answer")
    return 0


def _recorded_up() -> dict[str, tuple[Path, runs.RunState]]:
    """Run id -> (run-state path, state) of every recorded run of a named target that is not down."""
    out = {}
    for path in sorted(settings.current().runs.glob(f"*/{runs.RUN_STATE}")):
        try:
            state = runs.run_state(path.parent)
        except (OSError, ValueError) as exc:
            _log(f"{path}: skipped ({exc})")
            continue
        if state.status not in ("down", "attached") and state.target:
            out[state.run] = (path, state)
    return out


def attach(scenario: str, inventory_path: str, options: dict[str, str], scope: RunScope) -> Run:
    """Find a hand-started deployment on the inventory's endpoints: nothing is created or started, and
    ``scope`` removes only what the kit adds (the host stage's helper containers)."""
    from k3lab.launch import hoststage, hwstage
    from k3lab.model.select import load_inventory

    inv, inv_name = load_inventory(scenario, inventory_path)
    run_id = "attach-" + time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    scope.run_id = run_id
    rendered = render.build(scenario, inv, options, "lab", inventory_name=inv_name)
    plan = rendered.plan
    run_dir = settings.current().runs / run_id
    render.write(rendered, run_dir / "rendered")
    outputs.write_run_file(run_dir / "plan.json", render.plan_json(plan))
    target = AttachedLab.for_inventory(plan, run_id, inv, scope)
    timings: dict[str, float] = {}
    run = Run(run_id, run_dir, plan, rendered, target, timings, scope=scope, pipeline=Pipeline(timings), attached=True)
    target.find()
    run.save("attached")
    target.touch(plan.nodes)  # the host stage's helpers carry the run label
    hoststage.gate(plan, target.pool, run_id, run_dir, run.timings)  # attach mode proves the hosts first,
    try:  # then the hardware, before the suite
        hwstage.gate(run_dir, run.timings)
    except hwstage.HardwareStageFailed as exc:  # a running deployment is reported on, never stopped: the suite
        _log(f"{exc}\n(attach mode: the suite runs anyway and reports these checks with the rest)")
    _log(f"attached {run_id}: {scenario}, {len(target.containers)}/{len(plan.nodes)} containers found, "
         f"run dir {run_dir}")
    return run
