"""test_cross_node_reachability against fake nodes: which address each pair uses, how many execs each
node gets, and that a failure names both ends (the live check runs on the sim and the emulated lab)."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3lab.conform import nodetools
from k3lab.launch import hwstage
from k3lab.launch.endpoints import TIMED_OUT, CommandResult
from k3lab.model import catalog
from k3lab.tools import faults
from tests import suite

_check = suite.load("test_npu").test_cross_node_reachability


def reachability(plan, hosts, tools, run_dir, hardware_stage=None):
    """The check as the suite runs it (hardware_stage None), or as the stage does (failures so far)."""
    return _check(plan, hosts, tools, run_dir, hardware_stage)


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

    def exec(self, argv, timeout=None):
        return self.run(argv[-1])

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


def test_one_super_pod_pings_vnics_with_three_execs_per_node():
    plan, hosts, tools = _lab([0, 0, 0, 0])
    reachability(plan, hosts, tools, Path("/runs/r1"))
    assert {h.execs for h in hosts.values()} == {3}  # batch + two ping rounds; no -ip query


def test_across_super_pods_the_device_ip_is_asked_in_one_more_exec():
    plan, hosts, tools = _lab([0, 0, 1, 1])
    reachability(plan, hosts, tools, Path("/runs/r1"))
    assert {h.execs for h in hosts.values()} == {4}


def test_an_unreachable_vnic_is_named_with_both_ends():
    plan, hosts, tools = _lab([0, 0, 0, 0], down={"192.2.3.194"})
    with pytest.raises(AssertionError, match=r"n\d device \d+ -> n2 device 5 \(-hccs_ping 192\.2\.3\.194\)"):
        reachability(plan, hosts, tools, Path("/runs/r1"))


def _vnic(server: int, d: int) -> str:
    return f"192.{server}.{2 + d % 2}.{199 - d}"


class _Recording(_Host):
    """Records every (source node, target address) it pings; ``down_from`` the addresses only it cannot reach."""

    def __init__(self, *args, down_from=(), **kw):
        super().__init__(*args, **kw)
        self.pinged: list[str] = []
        self.down |= set(down_from)

    def run(self, script):
        self.pinged += re.findall(r"-g address (\S+)", script)
        return super().run(script)


def _recording_lab(n, down_from=None):
    plan, _, _ = _lab([0] * n)
    hosts = {x.name: _Recording(x.name, i, 0, down_from=(down_from or {}).get(x.name, ())) for i, x in enumerate(plan.nodes)}
    store = nodetools.Store(None)
    tools = {x.name: nodetools.NodeTools(hosts[x.name], x, store) for x in plan.nodes}
    return plan, hosts, tools


@pytest.mark.parametrize("n", [2, 4, 8])
def test_every_device_is_pinged_once_from_every_other_node(n):
    plan, hosts, tools = _recording_lab(n)
    reachability(plan, hosts, tools, Path("/runs/r7"))
    for i, h in hosts.items():
        want = sorted(_vnic(j, e) for j in range(n) if f"n{j}" != i for e in range(16))
        assert sorted(h.pinged) == want


@pytest.mark.parametrize("run", ["r1", "r2", "r3", "r4", "r5"])
def test_one_broken_device_pair_is_caught_whatever_the_rotation(run):
    # only n1 cannot reach n3's device 9: the sample rarely meets it, the second round always does
    plan, hosts, tools = _recording_lab(8, down_from={"n1": [_vnic(3, 9)]})
    with pytest.raises(AssertionError, match=r"n1 device \d+ -> n3 device 9 \(-hccs_ping 192\.3\.3\.190\)") as exc:
        reachability(plan, hosts, tools, Path(f"/runs/{run}"))
    assert str(exc.value).count(" -> ") == 1


def test_a_node_pair_broken_in_the_sample_is_not_pinged_again():
    every = [_vnic(2, e) for e in range(16)]
    plan, hosts, tools = _recording_lab(4, down_from={"n0": every})
    with pytest.raises(AssertionError, match=r"n0 device \d+ -> n2 device"):
        reachability(plan, hosts, tools, Path("/runs/r1"))
    sampled = [a for a in hosts["n0"].pinged if a in every]
    assert 1 <= len(sampled) <= 6  # the sample's pings to n2 only (16 devices over 3 peers), no second round


class _Slow(_Host):
    """A node whose ping exec runs out of its budget after ``answered`` pairs (coreutils timeout: exit 124)."""

    def __init__(self, *args, answered=3, **kw):
        super().__init__(*args, **kw)
        self.answered, self.budgets = answered, []

    def exec(self, argv, timeout=None):
        self.budgets.append(timeout)
        res = self.run(argv[-1])
        kept = res.stdout.split("\n@@ ")[:self.answered + 1]
        return CommandResult(res.command, TIMED_OUT, "\n@@ ".join(kept) + "\n", "", self.name)


def test_a_round_past_its_budget_names_the_unanswered_pairs_and_is_not_asked_again():
    plan, _, _ = _lab([0, 0])
    hosts = {x.name: _Slow(x.name, i, 0) for i, x in enumerate(plan.nodes)}
    store = nodetools.Store(None)
    tools = {x.name: nodetools.NodeTools(hosts[x.name], x, store) for x in plan.nodes}
    with pytest.raises(AssertionError, match=r"unreachable device pairs: n0 device \d+ -> n1 device \d+") as exc:
        reachability(plan, hosts, tools, Path("/runs/r1"))
    assert "-hccs_ping" in str(exc.value)
    # round 1 only (its node pair failed), one exec per node, bounded by the budget of its 16 pings
    assert hosts["n0"].budgets == [hwstage.ping_budget_s(16)]


# A real -hccs_ping lasts at least a second: hccn_tool sleeps 1 s before each poll of its result
# (dsmi_get_hccs_ping_result in the hccn_tool source), and a node's pings run one after another.
HCCS_PING_MIN_S = 1.0


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_the_stage_and_ping_budgets_cover_real_ping_times_on_every_scenario(sid):
    counts = [n.device_count for n in faults.rendered(sid).plan.nodes]
    rest = max(sum(counts) - own for own in counts)  # round 2: at most every device of every other node
    assert hwstage.ping_budget_s(max(counts)) >= 2 * HCCS_PING_MIN_S * max(counts)
    assert hwstage.ping_budget_s(rest) >= 2 * HCCS_PING_MIN_S * rest
    assert hwstage.bound_s(counts) > hwstage.BATCH_TIMEOUT_S + hwstage.ping_budget_s(max(counts)) + hwstage.ping_budget_s(rest)


def test_the_stage_skips_the_pings_once_another_check_has_failed():
    plan, hosts, tools = _lab([0, 0])
    with pytest.raises(pytest.skip.Exception, match=r"hardware stage: not run, 2 check\(s\) failed already"):
        reachability(plan, hosts, tools, Path("/runs/r1"), hardware_stage=2)
    assert sum(h.execs for h in hosts.values()) == 0


def test_the_stage_stops_after_a_failed_round_1_and_the_suite_does_not():
    every = [_vnic(1, e) for e in range(16)]  # n0 reaches no device of n1: round 1 fails in any rotation
    pinged = {}
    for stage in (0, None):
        plan, hosts, tools = _recording_lab(4, down_from={"n0": every})
        with pytest.raises(AssertionError, match=r"unreachable device pairs: n0 device \d+ -> n1 device") as exc:
            reachability(plan, hosts, tools, Path("/runs/r1"), hardware_stage=stage)
        pinged[stage] = len(hosts["n0"].pinged)
        assert ("round 2 not run (hardware stage)" in str(exc.value)) == (stage == 0)
    assert pinged[0] == 16 < pinged[None]  # the stage: round 1 only (every device sends once)


def test_the_stage_puts_the_pings_last():
    conftest = suite.load("conftest")
    items = [SimpleNamespace(originalname=n, name=n) for n in
             ("test_npu_health", conftest.REACHABILITY, "test_links", "test_spod_info")]
    for stage, last in ((True, conftest.REACHABILITY), (False, "test_spod_info")):
        got = list(items)
        conftest.pytest_collection_modifyitems(SimpleNamespace(getoption=lambda _o, s=stage: s), got)
        assert got[-1].name == last and len(got) == 4
