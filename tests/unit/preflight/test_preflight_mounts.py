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


def test_weights_outside_root_cache_pass_with_an_inventory_mount():
    """Issue #36 item 1: the remedy is a mounts entry, not copying hundreds of GB onto every node."""
    r = faults._inv("a3_pd_1m", {}, target="lab", model_path="/mnt/weights/Kimi-K3.1-Pro",
                    mounts=[{"source": "/mnt/weights", "read_only": True}])
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    chk = next(c for c in checks.CHECKS if c.id == "PF-MOUNT-PATHS")
    assert "mounts" in chk.remedy and "copy" not in chk.remedy


def test_a_node_whose_mount_lacks_the_weights_is_named():
    r = faults._inv("a3_pd_1m", {"d1": {"mounts": [{"source": "/x", "target": "/mnt/other"}]}}, target="lab",
                    model_path="/mnt/weights/Kimi-K3.1-Pro", mounts=[{"source": "/mnt/weights"}])
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    r = faults._inv("a3_pd_1m", {"d1": {"mounts": [{"source": "/x", "target": "/mnt/weights/Kimi-K3.1-Pro-other"}]}},
                    target="lab", model_path="/mnt/weights/Kimi-K3.1-Pro")
    found = [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    assert {f.nodes[0] for f in found} == {n.name for n in r.plan.nodes}  # the prefix is not a parent


def test_caches_under_a_read_only_mount_are_refused():
    r = faults._inv("k3_a2_mixed", {}, target="lab",  # its scripts export TIKTOKEN_CACHE_DIR=/root/.cache/tiktoken-k3
                    mounts=[{"source": "/srv/tok", "target": "/root/.cache/tiktoken-k3", "read_only": True}])
    found = [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    assert found and all("read-only mount /root/.cache/tiktoken-k3" in f.message for f in found)
    r = faults._inv("a3_pd_1m", {}, target="lab", model_path="/root/.cache/w/Kimi",
                    mounts=[{"source": "/srv/w", "target": "/root/.cache/w", "read_only": True}])
    assert not [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]  # the model is only read
