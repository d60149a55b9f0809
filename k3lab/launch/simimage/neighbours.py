"""Will the host kernel's ARP table hold the simulated networks?

Every simulated device address (and A3 vNIC carrier) is a secondary address on its node's NIC. Linux
keeps ONE neighbour table for all network namespaces, capped by ``net.ipv4.neigh.default.gc_thresh3``
(1024 by default): past it, new entries are refused ("neighbour table overflow" in dmesg) and pings and
KV transfers are lost on a healthy deployment. Learnt entries for every device pair needed ~7,700 for
k3_a3_pd alone, so the sim target pins every peer device address as a permanent entry
(:meth:`k3lab.launch.targets.sim.SimTarget.pin_neighbours`), which the cap does not count. What is
still learnt: each node's entries for its peers' NICs and the bridge gateway, and the host's for every
node: n(n+1) for n nodes, 306 for the largest scenario (17 nodes), under the default cap with room for a release's
concurrent cycles.

The kit does not change host kernel settings: past the cap it refuses to start, with the need, the
limit and the remedy (exit 3).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

GC_THRESH3 = Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3")
REMEDY = ("sysctl -w net.ipv4.neigh.default.gc_thresh1=1024 net.ipv4.neigh.default.gc_thresh2=8192 "
          "net.ipv4.neigh.default.gc_thresh3=16384")


def entries(plan) -> int:
    """Learnt ARP entries one run needs at once: every node's for its peers' NICs and its gateway, the
    host's for every node (the device addresses are permanent entries, not counted by the cap)."""
    n = len(plan.nodes)
    return n * (n - 1) + n + n


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
    return (f"the simulated networks need up to {need} learnt ARP entries at once, and this kernel's "
            f"neighbour table holds {cap} for all runs together (net.ipv4.neigh.default.gc_thresh3): "
            f"pings and KV transfers would be lost ('neighbour table overflow' in dmesg) and fail a healthy "
            f"deployment. As root: {REMEDY}")
