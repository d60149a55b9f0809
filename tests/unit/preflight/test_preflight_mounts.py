"""PF-MOUNT-PATHS: a path the scripts use inside a lab container must lie under one of its mounts (issue #21)."""
from __future__ import annotations

from k3lab.preflight import checks
from k3lab.tools import faults


def test_model_path_outside_every_mount_is_refused_before_anything():
    r = faults.m_mount_paths()
    found = [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    assert found and all(f.severity == "error" for f in found)
    assert {f.nodes[0] for f in found} == {n.name for n in r.plan.nodes}
    assert "/mnt/weights/Kimi-K3" in found[0].message and "/root/.cache" in found[0].message


def test_the_guides_model_path_passes():
    r = faults._inv("a3_pd_1m", {}, target="lab")
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]


def test_sim_target_has_no_mounts_to_check():
    r = faults._inv("a3_pd_1m", {}, model_path="/mnt/weights/Kimi-K3")
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]


def test_checkpoint_remedy_never_asks_to_write_into_the_kit():
    chk = next(c for c in checks.CHECKS if c.id == "PF-CHECKPOINT")
    assert "fixtures" not in chk.remedy and "HST-MODEL" in chk.remedy
    r = faults._inv("a3_pd_1m", {}, target="lab", model_path="/root/.cache/not-in-the-kit")
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-CHECKPOINT"]
