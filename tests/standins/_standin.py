"""Running the sim stand-ins on the host: environment, node files, processes and waits.

Every wait is bounded and every process started through ``Procs`` is killed at teardown.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from k3lab.launch.simimage import image

ROOTFS = image.ROOTFS
SITE = ROOTFS / "opt" / "k3lab-sim" / "site"  # the image's site: MemCache packages, dist-info directories
SIM_PATH = image.host_pythonpath()  # k3sim and the site, importable here as in the image
PYTHONPATH = os.pathsep.join(SIM_PATH)
PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
              "no_proxy", "NO_PROXY")


def free_port(span: int = 4) -> int:
    """A free port whose next ``span - 1`` neighbours are free too: engines bind port + rank (KV
    handshake per TP rank), so two ports from ``bind(0)`` could land next to each other and clash.
    Taken below the kernel's ephemeral range, where outgoing connections cannot grab it meanwhile.
    Blocks are handed out in order through this worker's range, so a block never overlaps one given
    earlier that is not bound yet (seen: a Decode's KV port drawn onto the next Decode's API port,
    whose /metrics then hit a ZMQ socket)."""
    global _cursor
    low, high = _worker_ports()
    if _cursor is None or not low <= _cursor < high:
        _cursor = random.SystemRandom().randrange(low, high - span)  # runs in a row start apart
    for _ in range((high - low) // span):
        base = _cursor if _cursor + span <= high else low
        _cursor = base + span
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + span):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError(f"no block of free ports between {low} and {high}")


_cursor: int | None = None


def _worker_ports(low: int = 20000, high: int = 32000) -> tuple[int, int]:
    """This xdist worker's share of the range: a port checked free here is not also picked by a test
    on another worker before either binds it (seen: a real engine's KV port taken, EADDRINUSE)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (high - low) // max(count, 1)
    return low + index * size, low + (index + 1) * size


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The host environment minus proxies, with the sim site importable and a private node file."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and not k.startswith(("MMC_", "K3SIM_"))}
    # a private hccn_tool lock too: tests on other xdist workers would otherwise share /tmp's and
    # get "hccn_tool is busy" from each other
    # and no tool service but the test's own: the shims otherwise ask the port in the host's
    # /run/k3lab-sim/tool-service, which an emulated lab's node-init leaves there (a 950 test got an
    # A3 table from whatever listened on that port)
    env.update(PYTHONPATH=PYTHONPATH, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               K3SIM_NODE_FILE=str(tmp_path / "node.json"), K3SIM_HCCN_LOCK=str(tmp_path / ".hccn_tool.lock"),
               K3SIM_TOOL_SERVICE=str(tmp_path / "no-tool-service"))
    env.update(extra)
    return env


def write_node(tmp_path: Path, **data) -> Path:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"node": "t0", "faults": {}, **data}))
    return path


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 10,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=stdin)


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def wait_until(predicate: Callable[[], object], timeout: float = 5.0, interval: float = 0.02) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class Proc:
    """A background process whose output goes to files that can be read while it runs."""

    def __init__(self, args: list[str], env: dict[str, str], workdir: Path, cwd: Path | None = None):
        workdir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = workdir / "stdout", workdir / "stderr"
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.popen = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=err,
                                          start_new_session=True)

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def wait_output(self, text: str, timeout: float = 5.0, stream: str = "out") -> None:
        try:
            wait_until(lambda: text in getattr(self, stream) or self.popen.poll() is not None, timeout)
        except AssertionError:
            pass  # reported below with the output
        assert text in getattr(self, stream), f"{text!r} not in {stream}:\n{self.out}\n---\n{self.err}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)


@pytest.fixture
def procs(tmp_path: Path):
    """Start background processes with ``procs(args, env)``; all are killed after the test."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str], cwd: Path | None = None) -> Proc:
        proc = Proc(args, env, tmp_path / f"proc{len(started)}", cwd)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
