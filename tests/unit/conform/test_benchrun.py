"""Where benchmarks run on the kit host: exit status and output, the timeout, a missing tool, and the
watch that stops a run whose service died (benchmark tools retry network errors for hours)."""
from __future__ import annotations

import os
import sys
import time

import pytest
import requests

from k3lab.conform.benchrun import STOPPED, HostRunner, ServiceWatch

PY = sys.executable


def test_run_returns_status_and_output(tmp_path):
    code, out = HostRunner(tmp_path).run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                                         30)
    assert code == 3 and "out" in out and "err" in out


def test_timeout_stops_the_whole_group(tmp_path):
    marker = tmp_path / "child-alive"
    child = tmp_path / "child.py"
    child.write_text(f"import time\ntime.sleep(2)\nopen({str(marker)!r}, 'w').close()\n")
    # the child outlives its parent unless the stop reaches the group
    script = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(child)!r}]); "
              "print('started', flush=True); time.sleep(60)")
    t = time.monotonic()
    code, out = HostRunner(tmp_path).run([PY, "-c", script], 1)
    assert code == 124 and out.startswith("started") and out.endswith("[k3lab] timed out after 1s")
    assert time.monotonic() - t < 15
    time.sleep(2.5)
    assert not marker.exists()


def test_missing_program_or_directory_is_127(tmp_path):
    code, out = HostRunner(tmp_path).run(["no-such-tool-k3lab"], 5)
    assert code == 127 and "cannot run no-such-tool-k3lab" in out
    code, out = HostRunner(tmp_path).run([PY, "-V"], 5, cwd=str(tmp_path / "nowhere"))
    assert code == 127 and f"in {tmp_path / 'nowhere'}" in out


def test_watch_stops_a_run_whose_service_died(tmp_path):
    calls = []

    def watch():
        calls.append(1)
        return "stopped: the service stopped answering" if len(calls) >= 2 else None

    watch.every_s = 0.2  # type: ignore[attr-defined]
    t = time.monotonic()
    code, out = HostRunner(tmp_path).run([PY, "-c", "print('evaluating', flush=True); import time; time.sleep(60)"],
                                         600, watch=watch)
    assert code == STOPPED and out.startswith("evaluating")
    assert out.endswith("[k3lab] stopped: the service stopped answering")
    assert len(calls) == 2 and time.monotonic() - t < 15


def test_interrupt_stops_the_run(tmp_path):
    """Ctrl-C reaches the kit, not the run (its own session): the run must not outlive the interrupt."""
    pid_file = tmp_path / "pid"

    def watch():
        if pid_file.is_file():  # the run has started: interrupt now
            raise KeyboardInterrupt

    watch.every_s = 0.2  # type: ignore[attr-defined]
    script = (f"import os, time; open({str(pid_file) + '.tmp'!r}, 'w').write(str(os.getpid())); "
              f"os.rename({str(pid_file) + '.tmp'!r}, {str(pid_file)!r}); time.sleep(60)")
    with pytest.raises(KeyboardInterrupt):
        HostRunner(tmp_path).run([PY, "-c", script], 600, watch=watch)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_service_watch_rides_out_a_restart_within_the_grace():
    clock, status = Clock(), {"http://a:8000/health": 200, "http://b:8000/health": 200}
    watch = ServiceWatch(["http://a:8000", "http://b:8000"], status.__getitem__, 300, clock)
    assert watch.every_s == 30 and watch() is None
    status["http://b:8000/health"] = 503
    clock.now = 10
    assert watch() is None
    clock.now = 200
    assert watch() is None
    status["http://b:8000/health"] = 200  # back within the grace: the clock starts again
    clock.now = 400
    assert watch() is None and watch.down_since == {}


def test_service_watch_names_the_api_down_past_the_grace():
    clock = Clock()

    def get(url):
        raise requests.ConnectionError("refused")

    watch = ServiceWatch(["http://172.28.0.11:8000"], get, 60, clock)
    assert watch.every_s == 12
    assert watch() is None
    clock.now = 61
    assert watch() == "stopped: the service stopped answering, http://172.28.0.11:8000/health failing for 61 s"
