"""Node tool batches: one exec per node for the whole suite, shared by threads and xdist workers,
and every check still gets its own command's answer (or a failure naming the host)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from k3lab.conform import nodetools
from k3lab.launch.endpoints import CommandResult


class _Host:
    def __init__(self, name="p0 (10.0.0.1)", fail=None):
        self.name, self.fail, self.batches, self.live = name, fail, 0, []

    def batch(self, commands, timeout=None):
        self.batches += 1
        if self.fail:
            raise AssertionError(self.fail)
        return {c: CommandResult(c, 0, f"answer to {c}\n", "", self.name) for c in commands}

    def run(self, command):
        self.live.append(command)
        return CommandResult(command, 0, "live\n", "", self.name)


def _node(platform="A3", devices=16):
    art = SimpleNamespace(path="/root/run.sh")
    return SimpleNamespace(name="p0", platform=platform, device_count=devices, artefacts=[art])


def test_every_per_node_query_is_in_the_batch():
    cmds = nodetools.commands(_node())
    # link, net_health, tls, lldp, netdetect, gateway, vnic
    assert len([c for c in cmds if nodetools.HCCN in c]) == 16 * 7
    assert nodetools.hccn(5, "-vnic -g") in cmds and nodetools.hccn(5, "-ip -g") not in cmds
    assert "npu-smi info" in cmds and nodetools.cat("/root/run.sh") in cmds
    a2 = nodetools.commands(_node("A2", 8))
    assert len([c for c in a2 if nodetools.HCCN in c]) == 8 * 7 and nodetools.hccn(7, "-ip -g") in a2  # no vNIC on A2


def test_the_hardware_stage_batch_holds_the_npu_and_hccn_reads_only():
    node = _node()
    hw = nodetools.commands(node, hardware_only=True)
    assert set(hw) < set(nodetools.commands(node))
    assert len([c for c in hw if nodetools.HCCN in c]) == 16 * 7
    assert {"npu-smi info", nodetools.SPOD, nodetools.cat("/etc/hccn.conf")} <= set(hw)
    assert not [c for c in hw if "/proc" in c] and nodetools.cat("/root/run.sh") not in hw
    host = _Host()
    tools = nodetools.NodeTools(host, node, nodetools.Store(None, hardware_only=True))
    assert tools.run("cat /proc/net/tcp").stdout == "live\n"  # a suite read outside the stage's batch runs live


def test_one_batch_per_node_for_every_thread_and_worker(tmp_path):
    host, node = _Host(), _node()
    first = nodetools.NodeTools(host, node, nodetools.Store(str(tmp_path)))
    with ThreadPoolExecutor(max_workers=8) as pool:
        outs = list(pool.map(lambda _: first.check_output("npu-smi info"), range(16)))
    assert outs == ["answer to npu-smi info"] * 16 and host.batches == 1
    # another worker (another Store on the same directory) reads the stored answers
    other_host = _Host()
    other = nodetools.NodeTools(other_host, node, nodetools.Store(str(tmp_path)))
    assert other.run(nodetools.hccn(3, "-link -g")).stdout == f"answer to {nodetools.hccn(3, '-link -g')}\n"
    assert other.file("/root/run.sh").content_string == f"answer to {nodetools.cat('/root/run.sh')}\n"
    assert other_host.batches == 0


def test_a_command_outside_the_batch_runs_live():
    host = _Host()
    tools = nodetools.NodeTools(host, _node(), nodetools.Store(None))
    assert tools.run("uname -a").stdout == "live\n" and host.live == ["uname -a"]


def test_commands_outside_the_batch_go_together_in_one_more_exec():
    host = _Host()
    tools = nodetools.NodeTools(host, _node(), nodetools.Store(None))
    ip = [nodetools.hccn(i, "-ip -g") for i in range(16)]
    got = tools.many(["npu-smi info", *ip])
    assert host.batches == 2 and host.live == []
    assert got[ip[3]].stdout == f"answer to {ip[3]}\n"


def test_a_failed_batch_fails_every_check_naming_the_host_once():
    host = _Host(fail="d3 (10.0.0.9): container vllm does not exist on ssh://root@10.0.0.9")
    tools = nodetools.NodeTools(host, _node(), nodetools.Store(None))
    for _ in range(3):
        with pytest.raises(AssertionError, match=r"d3 \(10.0.0.9\): container vllm does not exist"):
            tools.run("npu-smi info")
    assert host.batches == 1
