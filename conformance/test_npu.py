"""NPU and HCCL health through npu-smi and hccn_tool, as the vllm-ascend guides check it."""
from __future__ import annotations

import re

import pytest

HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


def test_npu_smi_devices_healthy(node, hosts):
    out = hosts[node.name].check_output("npu-smi info")
    healths = re.findall(r"^\|\s*\d+\s+\S+\s*\|\s*(OK|Warning|Alarm|Critical|UNKNOWN)\s*\|", out, re.M)
    chips = node.device_count if node.platform != "A3" else node.device_count // 2
    assert len(healths) >= chips, f"{node.name}: npu-smi lists {len(healths)} NPUs, expected {chips}:\n{out}"
    bad = [i for i, h in enumerate(healths) if h != "OK"]
    assert not bad, f"{node.name}: NPU(s) {bad} report health {[healths[i] for i in bad]}; replace or reset them"


def test_hccn_links_up_and_healthy(node, hosts):
    host = hosts[node.name]
    problems = []
    for dev in range(node.device_count):
        link = host.run(f"{HCCN} -i {dev} -link -g").stdout
        if "link status: UP" not in link:
            problems.append(f"device {dev}: {link.strip() or 'no link output'}")
        health = host.run(f"{HCCN} -i {dev} -net_health -g").stdout
        if "net health status: Success" not in health:
            problems.append(f"device {dev}: {health.strip()}")
    assert not problems, f"{node.name}: " + "; ".join(problems) + " (check cabling and the switch port)"


def test_hccn_tls_consistent(plan, hosts):
    switches = {}
    for node in plan.nodes:
        for dev in range(node.device_count):
            out = hosts[node.name].run(f"{HCCN} -i {dev} -tls -g").stdout
            m = re.search(r"tls switch\[(\d)\]", out)
            switches[(node.name, dev)] = m.group(1) if m else None
    values = set(switches.values())
    odd = sorted(k for k, v in switches.items() if v != "0")
    assert len(values) == 1, f"TLS switch differs across devices: non-zero on {odd}; set the same with hccn_tool -tls -s"


def _device_ip(host, platform, dev):
    if platform == "A3":
        out = host.run(f"{HCCN} -i {dev} -vnic -g").stdout
        m = re.search(r"vnic ipaddr:\s*(\S+)", out)
    else:
        out = host.run(f"{HCCN} -i {dev} -ip -g").stdout
        m = re.search(r"ipaddr:(\S+)", out)
    return m.group(1) if m else None


def test_cross_node_reachability(plan, hosts):
    """A ring over all nodes: device 0 of each node pings device 0 of the next."""
    nodes = plan.nodes
    if len(nodes) < 2:
        pytest.skip("single node")
    failures = []
    for a, b in zip(nodes, nodes[1:] + nodes[:1]):
        target = _device_ip(hosts[b.name], b.platform, 0)
        if target is None:
            failures.append(f"{b.name} device 0 has no address")
            continue
        verb = "-hccs_ping" if a.platform == "A3" else "-ping"
        res = hosts[a.name].run(f"{HCCN} -i 0 {verb} -g address {target}")
        if res.rc != 0 or not re.search(r" 0\.00% packets? loss", res.stdout):
            failures.append(f"{a.name} -> {b.name} ({target}): {res.stdout.strip().splitlines()[-1:] or res.stderr}")
    assert not failures, "unreachable device pairs: " + "; ".join(failures)
