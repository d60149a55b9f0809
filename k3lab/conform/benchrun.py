"""Where a load generator runs: the kit host (default) or a node's container (``--bench-node NODE``).

On lab runs the kit host needs the tool (``vllm`` for perf, ``ais_bench`` for accuracy) and, for
``vllm bench serve``, the checkpoint's tokenizer (the plan's model path, or ``--bench-tokenizer``).
``--bench-node`` instead runs it with ``docker exec`` inside that node's container, where the image
has vllm and the checkpoint is mounted; the K3 guide (§8.1) puts AISBench on the master node too.
Either way proxy variables are dropped (the guides unset them) and the API key travels in the
environment, never on the command line that is saved as evidence.

Benchmarks run for hours and their tools retry network errors with backoff, so a service that died
mid-run would hold them until their timeout. On the kit host a :class:`ServiceWatch` stops such a
run once an API has failed ``/health`` for a grace period (``--bench-down-grace``); in a container
the run is bounded by its timeout only.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Protocol

import requests

from k3lab import outputs
from k3lab.conform.evidence import check
from k3lab.launch.backends import tar_of
from k3lab.launch.endpoints import HOST_PROXY_VARS
from k3lab.model import apikey
from k3lab.model.runs import RunState

Watch = Callable[[], "str | None"]  # polled during a run: why it must stop now, or None
STOPPED = 125  # exit status of a run the watch stopped (124 stays "timed out", as coreutils timeout)


class ServiceWatch:
    """Polled while a benchmark runs: the reason to stop once any API has failed ``/health`` for
    ``grace_s`` seconds in a row (a restart within the grace is ridden out, as the tools retry)."""

    def __init__(self, urls: list[str], get: Callable[[str], int], grace_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.urls, self.get, self.grace_s, self.clock = urls, get, grace_s, clock
        self.down_since: dict[str, float] = {}

    @property
    def every_s(self) -> float:
        return max(1.0, min(30.0, self.grace_s / 5))

    def __call__(self) -> str | None:
        now = self.clock()
        for url in self.urls:
            try:
                ok = self.get(f"{url}/health") == 200
            except requests.RequestException:
                ok = False
            if ok:
                self.down_since.pop(url, None)
                continue
            since = self.down_since.setdefault(url, now)
            if now - since >= self.grace_s:
                return f"stopped: the service stopped answering, {url}/health failing for {now - since:.0f} s"
        return None


def watched(plan, http, config) -> ServiceWatch:
    """The watch of a run against ``plan``'s APIs, through the suite's session (the API key included)."""
    return ServiceWatch([a.url for a in plan.expect.apis], lambda url: http.get(url, timeout=5).status_code,
                        config.getoption("--bench-down-grace"))


def require_service_up(code: int, out: str, what: str, where: str, log: str, then: str = "run it again") -> None:
    """A run the watch stopped fails here, naming the API that went down, before its output is judged."""
    __tracebackhide__ = True
    check(code != STOPPED, what, "the service answering /health throughout the run",
          (out.strip().splitlines() or ["no output"])[-1], where, "an engine or the proxy went down during the run",
          f"read the engines' logs in evidence/ and evidence/bench/{log}; bring the service back and {then}")


class Runner(Protocol):
    where: str

    def which(self, program: str) -> bool: ...
    def run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None,
            cwd: str | None = None, watch: Watch | None = None) -> tuple[int, str]: ...
    def read(self, path: str) -> str: ...
    def write(self, path: str, text: str) -> None: ...
    def workdir(self, name: str) -> str: ...
    def newest(self, directory: str, suffix: str = ".json") -> str | None: ...


def api_key_env() -> dict[str, str]:
    """vllm bench serve sends $OPENAI_API_KEY; the AISBench config reads $K3LAB_API_KEY."""
    key = apikey.get()
    return {"OPENAI_API_KEY": key, "K3LAB_API_KEY": key} if key else {}


class HostRunner:
    def __init__(self, base: Path):
        self.base = base
        self.where = "kit host"

    def which(self, program: str) -> bool:
        return shutil.which(program) is not None

    def run(self, argv, timeout, env=None, cwd=None, watch=None):
        full = {k: v for k, v in os.environ.items() if k not in HOST_PROXY_VARS} | (env or {})
        with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: hours of output never block the tool
            try:
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True, env=full, cwd=cwd,
                                        start_new_session=True)  # its own group: a stop reaches its children
            except OSError as exc:  # no such program or working directory: the caller's check says what is missing
                return 127, f"[k3lab] cannot run {argv[0]}" + (f" in {cwd}" if cwd else "") + f": {exc}"
            stop = _supervise(proc, timeout, watch)
            log.seek(0)
            out = log.read()
        if stop is None:
            return proc.returncode, out
        return (124 if stop.startswith("timed out") else STOPPED), out + f"\n[k3lab] {stop}"

    def read(self, path):
        return Path(path).read_text()

    def write(self, path, text):
        outputs.write_run_file(Path(path), text)

    def workdir(self, name):
        path = self.base / name
        shutil.rmtree(path, ignore_errors=True)  # a fresh directory: the newest result is this run's
        path.mkdir(parents=True)
        return str(path)

    def newest(self, directory, suffix=".json"):
        files = sorted(Path(directory).glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime)
        return str(files[-1]) if files else None


def _supervise(proc: subprocess.Popen, timeout: float, watch: Watch | None) -> str | None:
    """Wait for ``proc``; on the timeout or a watch's reason, stop its process group and say why.
    Its own session keeps a terminal's Ctrl-C from it, so an interrupt here stops it too."""
    deadline = time.monotonic() + timeout
    every = getattr(watch, "every_s", 30.0)
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(0.0, min(every, left)))
                return None
            except subprocess.TimeoutExpired:
                reason = f"timed out after {timeout:.0f}s" if left <= every else (watch() if watch else None)
            if reason:
                _stop(proc)
                return reason
    except BaseException:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


class NodeRunner:
    def __init__(self, container, node: str):
        self.container = container
        self.where = f"{node} (container {container.name})"

    def _exec(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[int, str]:
        res = self.container.exec_run(argv, environment=env or None, workdir=cwd)
        return res.exit_code, res.output.decode(errors="replace")

    def which(self, program):
        return self._exec(["sh", "-c", 'command -v "$1"', "sh", program])[0] == 0

    def run(self, argv, timeout, env=None, cwd=None, watch=None):
        unset = [a for v in HOST_PROXY_VARS for a in ("-u", v)]
        # exec_run has no timeout; coreutils timeout gives the same exit status 124 as HostRunner
        return self._exec(["env", *unset, "timeout", str(int(timeout)), *argv], env, cwd)

    def read(self, path):
        code, out = self._exec(["cat", path])
        if code:
            raise FileNotFoundError(f"{self.where}: {path}: {out.strip()}")
        return out

    def write(self, path, text):
        archive = tar_of({Path(path).name: (text.encode(), 0o644)})
        if not self.container.put_archive(str(Path(path).parent), archive):
            raise OSError(f"{self.where}: could not write {path}")

    def workdir(self, name):
        path = f"/tmp/k3lab-bench/{name}"
        self._exec(["sh", "-c", 'rm -rf "$1" && mkdir -p "$1"', "sh", path])
        return path

    def newest(self, directory, suffix=".json"):
        code, out = self._exec(["sh", "-c", f'ls -t "$1"/*{shlex.quote(suffix)} 2>/dev/null | head -n 1', "sh",
                                directory])
        return out.strip() or None


def runner_for(config, plan, state: RunState, run_dir: Path) -> Runner:
    node = config.getoption("--bench-node")
    if not node:
        return HostRunner(Path(run_dir) / "bench")
    from k3lab.launch.endpoints import SshOptions, docker_client

    if node not in state.containers:
        raise ValueError(f"--bench-node {node}: no such node in this run ({', '.join(state.containers)})")
    client = docker_client(plan.node(node).endpoint, SshOptions.from_dict(state.ssh))
    return NodeRunner(client.containers.get(state.containers[node]), node)
