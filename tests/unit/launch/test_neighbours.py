"""The sim's ARP-table estimate: one kernel table for every run, capped by gc_thresh3. The device addresses
are permanent entries (not counted); what is learnt is every node's entries for its peers' NICs and its
gateway, and the host's for every node."""
from __future__ import annotations

from k3lab.launch.simimage import neighbours
from k3lab.model import siminventory
from k3lab.render import artefacts as render


def plan(sid: str):
    return render.build(sid, siminventory.default(sid), {}, "sim").plan


def test_entries_are_the_nodes_nics_not_their_devices():
    assert neighbours.entries(plan("k3_a3_pd")) == 17 * 16 + 17 + 17
    assert neighbours.entries(plan("a5_pd_pooled")) == 9 * 8 + 9 + 9


def test_default_kernel_limit_holds_the_largest_runs_together(tmp_path):
    cap = tmp_path / "gc_thresh3"
    cap.write_text("1024\n")  # the kernel's default
    three = [plan("k3_a3_pd"), plan("a3_pd_pooled"), plan("a5_pd_pooled")]
    assert neighbours.warning(three, cap) is None
    cap.write_text("400\n")  # a smaller one still holds one large run, not three
    assert neighbours.warning([plan("k3_a3_pd")], cap) is None
    warning = neighbours.warning(three, cap)
    assert warning and "486 learnt ARP entries" in warning and "holds 400" in warning
    assert "sysctl -w " in warning and "net.ipv4.neigh.default.gc_thresh3=16384" in warning


def test_unreadable_limit_says_nothing(tmp_path):
    assert neighbours.limit(tmp_path / "absent") is None
    (tmp_path / "junk").write_text("many\n")
    assert neighbours.warning([plan("k3_a3_pd")] * 5, tmp_path / "junk") is None
