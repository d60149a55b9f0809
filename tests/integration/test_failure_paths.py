"""Every way a run can end leaves nothing behind (#31): each phase of the pipeline made to fail in turn.

Each row runs the real CLI in a child process (tests/integration/phasefail.py wraps one phase: an
exception, a failed gate, a failed suite, Ctrl-C, a ``kill``), then looks for what the run left on the
engine and reads its run-state. A failed ``cycle`` that stopped tearing down went unnoticed by 1,868
tests because none of them ran a failing path end to end and then looked.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import leftovers

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "k3_a3_mixed"  # four nodes: the cheapest scenario with every kind of stage
QUICK_SUITE = ["--", "-p", "no:cacheprovider", "-k", "test_health or test_container_running"]


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job starts with SIGINT ignored


def run_failing(phase: str, mode: str, *k3lab_args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "tests.integration.phasefail", phase, mode, "--", *k3lab_args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=default_sigint,
                          env={**os.environ})


def state_of(runs_dir: Path) -> dict:
    states = list(runs_dir.glob("*/run-state.json"))
    assert len(states) == 1, states
    return json.loads(states[0].read_text())


# phase, how it fails, command, expected exit code
ROWS = [
    ("containers", "exception", "cycle", 4),
    ("containers", "sigterm", "up", 130),
    ("stage-heads", "gate", "cycle", 1),
    ("stage-workers", "sigint", "cycle", 130),
    ("stage-workers", "exception", "up", 4),
    ("stage-proxy", "sigterm", "cycle", 130),  # a3_pd_1m: PD has a proxy stage
    ("suite", "sigterm", "cycle", 130),
    ("collect", "exception", "cycle", 0),  # evidence is best effort: the verdict is the suite's
    ("reports", "sigint", "cycle", 130),
]


@pytest.mark.parametrize("phase, mode, command, code", ROWS, ids=[f"{p}-{m}-{c}" for p, m, c, _ in ROWS])
def test_a_failing_phase_leaves_nothing(phase, mode, command, code, runs_dir, clean_engine):
    extra = QUICK_SUITE if command == "cycle" else []
    res = run_failing(phase, mode, command, "a3_pd_1m" if phase == "stage-proxy" else SCENARIO, *extra)
    out = res.stdout + res.stderr
    assert f"phasefail: {phase} done, now {mode}" in out, out
    assert res.returncode == code, out
    assert leftovers() == ("", ""), out
    state = state_of(runs_dir)
    assert state["status"] == "down", state
    assert state["left"] == {}
    phases = {p["name"]: p["status"] for p in state["phases"]}
    want = {"exception": "error", "gate": "failed", "sigint": "interrupted", "sigterm": "interrupted"}
    assert phases[phase] == want[mode], state["phases"]
    assert "Traceback" not in out, out


def test_render_failure_creates_nothing(runs_dir, clean_engine):
    res = run_failing("render-preflight", "exception", "cycle", SCENARIO)
    assert res.returncode == 4, res.stdout + res.stderr
    assert leftovers() == ("", "")
    assert not list(runs_dir.glob("*/run-state.json")), "nothing started, so no run was recorded"


def test_a_live_fault_fails_the_cycle_and_leaves_nothing(runs_dir, clean_engine):
    """``k3lab cycle a3_pd_1m --inject FAULT``: exit 1 (the suite found it), nothing left (#31's done-when).
    The bug of #31: a failed suite left every container running."""
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "cycle", "a3_pd_1m", "--inject", "L-LINK-DOWN",
                          "--", "-p", "no:cacheprovider", "-k", "test_hccn_links_up or test_health"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "test_hccn_links_up" in out and "FAILED" in out, out
    assert leftovers() == ("", ""), out
    state = state_of(runs_dir)
    assert state["status"] == "down"
    assert {p["name"]: p["status"] for p in state["phases"]}["suite"] == "failed"


def test_keep_keeps_a_deployment_that_came_up_but_not_one_that_failed(runs_dir, clean_engine):
    res = run_failing("stage-workers", "gate", "up", SCENARIO, "--keep")
    assert res.returncode == 1, res.stdout + res.stderr
    assert leftovers() == ("", ""), "a failed bring-up is removed even with --keep"
    kept = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "up", SCENARIO, "--keep"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert leftovers()[0], "--keep leaves the deployment up"
    run = Path(kept.stdout.strip().splitlines()[-1]).name
    down = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "down", run], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers() == ("", "")
