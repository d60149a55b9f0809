"""The sim's ARP-table estimate: one kernel table for every run, capped by gc_thresh3."""
from __future__ import annotations

from k3lab.launchers.sim import neighbours
from k3lab.model import siminventory
from k3lab.render import artefacts as render


def plan(sid: str):
    return render.build(sid, siminventory.default(sid), {}, "sim").plan


def test_entries_are_two_per_device_and_per_node():
    assert neighbours.entries(plan("k3_a3_pd")) == 2 * 17 * 16 + 2 * 17
    assert neighbours.entries(plan("a5_pd_pooled")) == 2 * 9 * 8 + 2 * 9


def test_default_kernel_limit_holds_one_large_run_but_not_three(tmp_path):
    cap = tmp_path / "gc_thresh3"
    cap.write_text("1024\n")
    assert neighbours.warning([plan("k3_a3_pd")], cap) is None
    three = [plan("k3_a3_pd"), plan("a3_pd_pooled"), plan("a5_pd_pooled")]
    warning = neighbours.warning(three, cap)
    assert warning and "1046 ARP entries" in warning and "holds 1024" in warning
    assert "sysctl -w " in warning and "net.ipv4.neigh.default.gc_thresh3=16384" in warning
    cap.write_text("16384\n")
    assert neighbours.warning(three, cap) is None


def test_unreadable_limit_says_nothing(tmp_path):
    assert neighbours.limit(tmp_path / "absent") is None
    (tmp_path / "junk").write_text("many\n")
    assert neighbours.warning([plan("k3_a3_pd")] * 5, tmp_path / "junk") is None
