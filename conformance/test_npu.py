"""NPU and HCCL health through npu-smi and hccn_tool, as the vllm-ascend guides check it."""
from __future__ import annotations

import re

import pytest

from conformance.plugin import conformance

HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


KIND = "environment"  # default class of a failure here


@conformance(area="npu", must="npu-smi info MUST list the platform's device count with every NPU Health OK.")
def test_npu_smi_devices_healthy(node, hosts):
    out = hosts[node.name].check_output("npu-smi info")
    # "| 0     910B4   | OK |" (A2/A3) and "| 0 | Ascend950DT | OK |" (950DT): NPU id, name, health
    healths = re.findall(r"^\|\s*\d+\s*\|?\s*\S+\s*\|\s*(OK|Warning|Alarm|Critical|UNKNOWN)\s*\|", out, re.M)
    chips = node.device_count if node.platform != "A3" else node.device_count // 2
    assert len(healths) >= chips, f"{node.name}: npu-smi lists {len(healths)} NPUs, expected {chips}:\n{out}"
    bad = [i for i, h in enumerate(healths) if h != "OK"]
    assert not bad, f"{node.name}: NPU(s) {bad} report health {[healths[i] for i in bad]}; replace or reset them"


def _per_device(host, node, option: str) -> dict[int, str]:
    """The guides' loop (``for i in {0..15}; do hccn_tool -i $i OPTION; done``), one exec per node."""
    out = host.run(f"for i in $(seq 0 {node.device_count - 1}); do echo \"@@dev $i\"; {HCCN} -i $i {option} 2>&1; done").stdout
    result: dict[int, str] = {}
    for block in out.split("@@dev ")[1:]:
        dev, _, text = block.partition("\n")
        result[int(dev)] = text.strip()
    return result


def _unhealthy(node, hosts, option: str, healthy) -> tuple[int, dict[int, str]]:
    """How many devices answered ``option``, and the answers that are not healthy."""
    out = _per_device(hosts[node.name], node, option)
    return len(out), {d: t for d, t in out.items() if not healthy(t)}


@conformance(area="hccl", must="Every device link MUST be UP (hccn_tool -link -g).")
def test_hccn_links_up(node, hosts):
    answered, down = _unhealthy(node, hosts, "-link -g", lambda t: "link status: UP" in t)
    assert answered == node.device_count and not down, \
        f"{node.name}: device link not UP: {down} (check the cable and switch port of those devices)"


@conformance(area="hccl", must="Every device MUST report net health Success (hccn_tool -net_health -g).")
def test_hccn_net_health(node, hosts):
    answered, bad = _unhealthy(node, hosts, "-net_health -g", lambda t: "net health status: Success" in t)
    assert answered == node.device_count and not bad, \
        f"{node.name}: net health not Success: {bad} (check -netdetect address and the RoCE network)"


@conformance(area="hccl", must="Every device MUST have an address (-vnic on A3, -ip elsewhere).")
def test_hccn_device_addresses(node, hosts):
    option = "-vnic -g" if node.platform == "A3" else "-ip -g"
    answered, bad = _unhealthy(node, hosts, option, lambda t: re.search(r"ipaddr:\s*\d", t))
    assert answered == node.device_count and not bad, \
        f"{node.name}: devices {list(bad)} have no address ({option}); set it in /etc/hccn.conf with hccn_tool -ip -s"


@conformance(area="hccl", must="The TLS switch MUST be identical on every device of every node.")
def test_hccn_tls_consistent(plan, hosts):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:  # nodes are independent; one exec each
        per_node = dict(zip([n.name for n in plan.nodes],
                            pool.map(lambda n: _per_device(hosts[n.name], n, "-tls -g"), plan.nodes)))
    silent = [n.name for n in plan.nodes if len(per_node[n.name]) != n.device_count]
    assert not silent, f"hccn_tool -tls -g did not answer for every device on {silent}"
    switches = {}
    for node, devices in per_node.items():
        for dev, out in devices.items():
            m = re.search(r"tls switch\[(\d)\]", out)
            switches[(node, dev)] = m.group(1) if m else None
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


@conformance(area="hccl", must="Device 0 of each node MUST reach device 0 of the next node (-hccs_ping on A3, -ping elsewhere).")
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
