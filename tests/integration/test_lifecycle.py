"""Bring-up, interruption at every stage, crash recovery, collision refusal and the SSH transport."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from k3lab.model import siminventory

from .conftest import leftovers

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
K3LAB = [sys.executable, "-m", "k3lab.cli.main"]
ROOT = Path(__file__).resolve().parents[2]


def start(args: list[str], env=None) -> subprocess.Popen:
    return subprocess.Popen([*K3LAB, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True, preexec_fn=default_sigint)


def default_sigint() -> None:
    # A shell's background job starts with SIGINT ignored, and Python then keeps ignoring it: restore
    # the default so the interrupt tests send a real Ctrl-C wherever the suite itself was started.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(proc: subprocess.Popen, needle: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"never saw {needle!r}; output:\n{seen}")


@pytest.mark.parametrize("stage, sig", [
    ("containers", signal.SIGINT),              # containers being created
    ("metaservice:", signal.SIGTERM),            # waiting for the MetaService
    ("stage metaservice: ready", signal.SIGINT),  # providers starting
    ("stage providers: ready", signal.SIGTERM),   # heads starting
    ("stage heads: ready", signal.SIGINT),        # workers starting
    ("stage workers: ready", signal.SIGTERM),     # proxy starting
])
def test_interrupt_at_any_stage_leaves_nothing(stage, sig, runs_dir, clean_engine):
    proc = start(["up", "a3_pd_pooled"])
    try:
        wait_for(proc, stage)
        os.killpg(proc.pid, sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert leftovers() == ("", ""), out


def test_down_all_recovers_a_crashed_run(runs_dir, clean_engine):
    proc = start(["up", "k3_a3_mixed", "--keep"])
    wait_for(proc, "stage heads: ready")
    os.killpg(proc.pid, signal.SIGKILL)  # no teardown at all
    proc.wait(timeout=30)
    assert leftovers()[0], "the crashed run should have left containers for down --all to find"
    res = subprocess.run([*K3LAB, "down", "--all"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_up_refuses_to_collide_with_a_live_run(runs_dir, clean_engine):
    first = subprocess.run([*K3LAB, "up", "k3_a3_mixed", "--keep"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    second = subprocess.run([*K3LAB, "up", "k3_a3_mixed"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    run_id = first.stdout.strip().splitlines()[-1].rsplit("/", 1)[-1]
    down = subprocess.run([*K3LAB, "down", run_id], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode != 0 and "still up" in (second.stdout + second.stderr)
    assert down.returncode == 0


def test_gate_failure_names_node_process_and_log(runs_dir, clean_engine):
    """A worker that cannot start (its NIC does not exist) fails the gate with the engine's own error."""
    inv = siminventory.default("k3_a3_mixed").model_dump(mode="json")
    inv["nodes"][2]["nic"] = "eth9"
    path = runs_dir.parent / "bad-nic.yaml"
    path.write_text(yaml.safe_dump(inv))
    env = {**os.environ, "K3LAB_SIM_GATE_TIMEOUT": "40"}
    res = subprocess.run([*K3LAB, "up", "k3_a3_mixed", "-i", str(path), "--target", "sim"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "node2/engine" in out and "eth9" in out, out


def test_api_key_guards_every_api_and_never_lands_in_the_run_dir(runs_dir, clean_engine):
    secret = "k3lab-secret-" + os.urandom(4).hex()
    env = {**os.environ, "K3LAB_API_KEY": secret}
    res = subprocess.run([*K3LAB, "cycle", "k3_a3_mixed", "--", "-q", "-k", "api_key or models"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), f"secret leaked into {path}"
    assert secret not in res.stdout + res.stderr
