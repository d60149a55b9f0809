"""Weights outside /root/.cache on the emulated lab (issue #36 item 1): ``labemu up --weights /mnt/weights``
keeps each host's checkpoints in its own /mnt/weights (nothing in its /root/.cache), the inventory mounts it
read-only and names model_path under it; preflight is clean and a cycle is green.

Its own module: the lab of test_labemu.py keeps its checkpoints in /root/.cache.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from k3lab.launch import labemu
from tests.integration.conftest import require
from tests.integration.test_labemu import k3lab

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
SCENARIO = "k3_a3_mixed"  # four hosts
WEIGHTS = "/mnt/weights"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require(os.geteuid() == 0 and bool(shutil.which("nsenter")) and os.path.exists("/usr/sbin/sshd"),
            "needs root, nsenter and openssh-server")
    out = tmp_path_factory.mktemp("labemu-weights") / "lab.yaml"
    res = k3lab("labemu", "up", "--scenario", SCENARIO, "--weights", WEIGHTS, "--out", str(out), timeout=600)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        state = json.loads((labemu._state_dir() / "state.json").read_text())
        yield {"inventory": out, "hosts": [labemu.Host(h["index"]) for h in state["hosts"]]}
    finally:
        done = k3lab("labemu", "down", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not Path(WEIGHTS, ".k3lab-labemu").exists()  # the mount point up made is gone


def test_weights_outside_root_cache_cycle_green(lab, runs_dir):
    inv = yaml.safe_load(lab["inventory"].read_text())
    model = f"{WEIGHTS}/Kimi-K3-w4a8"
    assert inv["model_path"] == model
    assert inv["mounts"] == [{"source": WEIGHTS, "target": WEIGHTS, "read_only": True}]
    for h in lab["hosts"]:  # the checkpoint is only in the host's weights directory
        assert (h.root / "weights" / "Kimi-K3-w4a8" / "config.json").exists()
        assert not (h.root / "cache" / "Kimi-K3-w4a8").exists()
    pre = k3lab("preflight", SCENARIO, "-i", str(lab["inventory"]), timeout=300)
    assert pre.returncode == 0 and "PF-MOUNT-PATHS" not in pre.stdout + pre.stderr, pre.stdout + pre.stderr
    res = k3lab("cycle", SCENARIO, "-i", str(lab["inventory"]), timeout=1800)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    run_dir = sorted(runs_dir.iterdir())[-1]
    host_stage = json.loads((run_dir / "host-stage.json").read_text())
    assert host_stage["findings"] == []
    cks = [ck for facts in host_stage["facts"].values() for ck in facts["checkpoints"]]
    assert cks and all(ck["path"] == model and ck["host_path"] == model for ck in cks)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert "inventory-mounts" in {d["id"] for d in plan["deviations"]}
    # every container is gone after the cycle, on every host
    for h in lab["hosts"]:
        ps = subprocess.run(["docker", "-H", f"unix://{h.sock}", "ps", "-aq"], capture_output=True, text=True)
        assert not ps.stdout.strip(), h.name
