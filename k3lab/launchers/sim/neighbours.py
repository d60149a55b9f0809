"""Will the host kernel's ARP table hold the simulated device network?

Every simulated device address (and A3 vNIC carrier) is a secondary address on its node's NIC, so each
device ping needs an ARP entry at both ends. Linux keeps ONE neighbour table for all network
namespaces, capped by ``net.ipv4.neigh.default.gc_thresh3`` (1024 by default): past it, new
entries are refused ("neighbour table overflow" in dmesg) and pings are lost. k3_a3_pd alone
needs ~580 entries; a release running its three largest scenarios at once, ~1,050. This is the
cause of the rare "3 packets transmitted, 2 received" on a healthy sim under load (seen
2026-12-04 in dmesg during ``k3lab release --jobs 3``).

The kit does not change host kernel settings: it warns with the remedy (CI applies it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

GC_THRESH3 = Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
REMEDY = ("sysctl -w net.ipv4.neigh.default.gc_thresh1=1024 net.ipv4.neigh.default.gc_thresh2=8192 "
          "net.ipv4.neigh.default.gc_thresh3=16384")


def entries(plan) -> int:
    """ARP entries one run needs at once: the reachability check pings once from every device (an
    entry at each end), plus the node NICs' traffic."""
    return 2 * sum(n.device_count for n in plan.nodes) + 2 * len(plan.nodes)


def limit(path: Path | None = None) -> int | None:
    try:
        return int((path or GC_THRESH3).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # not Linux, or not readable here: nothing to say


def warning(plans: Iterable, path: Path | None = None) -> str | None:
    """A warning when the runs that share this kernel at once may overflow its neighbour table."""
    cap = limit(path)
    need = sum(entries(p) for p in plans)
    if cap is None or need <= cap:
        return None
    return (f"the simulated device network needs up to {need} ARP entries at once, and this kernel's "
            f"neighbour table holds {cap} for all runs together (net.ipv4.neigh.default.gc_thresh3): "
            f"device pings may be lost ('neighbour table overflow' in dmesg) and fail the reachability "
            f"check on a healthy deployment. As root: {REMEDY}")
