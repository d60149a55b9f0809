"""test_cross_node_reachability against fake nodes: which address each pair uses, how many execs each
node gets, and that a failure names both ends (the live check runs on the sim and the emulated lab)."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3lab.conformance import nodetools
from k3lab.launchers.endpoints import CommandResult
from tests import suite

reachability = suite.load("test_npu").test_cross_node_reachability


class _Host:
    """A node whose tools answer like the stand-ins; ``down`` lists addresses nobody reaches."""

    def __init__(self, name, index, pod, down=()):
        self.name, self.index, self.pod, self.down, self.execs = name, index, pod, set(down), 0

    def _answer(self, cmd):
        m = re.search(r"hccn_tool -i (\d+) -(\w+) -g", cmd)
        if cmd == nodetools.SPOD:
            return f"Super Pod ID : {self.pod}\n"
        if m and m.group(2) == "ip":
            return f"ipaddr:10.88.{self.index}.{m.group(1)}\nnetmask:255.255.0.0\n"
        if m and m.group(2) == "vnic":  # the driver's scheme, 192.<server>.<2+die>.<199-device>
            d = int(m.group(1))
            return f"vnic link status: UP\nvnic ipaddr: 192.{self.index}.{2 + d % 2}.{199 - d}\nvnic netmask: 255.255.255.0\n"
        return "link status: UP\n"

    def batch(self, commands, timeout=None):
        self.execs += 1
        return {c: CommandResult(c, 0, self._answer(c), "", self.name) for c in commands}

    def run(self, script):  # the ping exec: one '@@ k' block per pair
        self.execs += 1
        out = ["@@ start"]
        for k, part in enumerate(script.split("; echo '@@ ")[1:]):
            target = re.search(r"-g address (\S+)", part).group(1)
            got, loss = (0, "100.00%") if target in self.down else (3, "0.00%")
            out += [f"@@ {k}", f"3 packets transmitted, {got} received, {loss} packets loss"]
        return CommandResult(script, 0, "\n".join(out) + "\n", "", self.name)


def _lab(pods, down=()):
    nodes = [SimpleNamespace(name=f"n{i}", platform="A3", device_count=16, artefacts=[]) for i in range(len(pods))]
    hosts = {n.name: _Host(n.name, i, pod, down) for i, (n, pod) in enumerate(zip(nodes, pods))}
    store = nodetools.Store(None)
    tools = {n.name: nodetools.NodeTools(hosts[n.name], n, store) for n in nodes}
    return SimpleNamespace(nodes=nodes), hosts, tools


def test_one_super_pod_pings_vnics_with_two_execs_per_node():
    plan, hosts, tools = _lab([0, 0, 0, 0])
    reachability(plan, hosts, tools, Path("/runs/r1"))
    assert {h.execs for h in hosts.values()} == {2}  # batch + pings; no -ip query


def test_across_super_pods_the_device_ip_is_asked_in_one_more_exec():
    plan, hosts, tools = _lab([0, 0, 1, 1])
    reachability(plan, hosts, tools, Path("/runs/r1"))
    assert {h.execs for h in hosts.values()} == {3}


def test_an_unreachable_vnic_is_named_with_both_ends():
    plan, hosts, tools = _lab([0, 0, 0, 0], down={"192.2.3.194"})
    with pytest.raises(AssertionError, match=r"n\d device \d+ -> n2 device 5 \(-hccs_ping 192\.2\.3\.194\)"):
        reachability(plan, hosts, tools, Path("/runs/r1"))
