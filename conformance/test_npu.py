"""NPU and HCCL health through npu-smi and hccn_tool, as the vllm-ascend guides check it."""
from __future__ import annotations

import re

import pytest

from k3lab.conformance import nodetools

HCCN = nodetools.HCCN


KIND = "environment"  # default class of a failure here


@pytest.mark.conformance(area="npu", must="npu-smi info MUST print one health row per device (A3: per die, 16 on a 16-device "
             "node; A2 and 950DT: per NPU) with every Health OK.")
def test_npu_smi_devices_healthy(node, tools):
    out = tools[node.name].check_output("npu-smi info")
    # "| 0     Ascend910  | OK |" (A3, one row per die), "| 0     910B3  | OK |" (A2), "| 0 | Ascend950DT | OK |"
    healths = re.findall(r"^\|\s*\d+\s*\|?\s*\S+\s*\|\s*(OK|Warning|Alarm|Critical|UNKNOWN)\s*\|", out, re.M)
    assert len(healths) == node.device_count, (
        f"{node.name}: npu-smi info prints {len(healths)} health rows, expected {node.device_count} for "
        f"{node.platform} (one per {'die' if node.platform == 'A3' else 'NPU'}); check the driver "
        f"(npu-smi info on the host) and the --device /dev/davinciN mounts of the container:\n{out}")
    bad = [i for i, h in enumerate(healths) if h != "OK"]
    assert not bad, (f"{node.name}: device(s) {bad} report health {[healths[i] for i in bad]}, expected OK; "
                     f"see npu-smi info -t health -i <card> for the error code, then reset or replace the NPU")


def _per_device(tools, node, option: str) -> dict[int, str]:
    """The guides' loop (``for i in {0..15}; do hccn_tool -i $i OPTION; done``): device -> output.

    Read from the node's batch (k3lab.conformance.nodetools): one exec per node for the whole suite."""
    answers = tools.many([nodetools.hccn(i, option) for i in range(node.device_count)])
    result: dict[int, str] = {}
    for i in range(node.device_count):
        text = answers[nodetools.hccn(i, option)].stdout.strip()
        if text:
            result[i] = text
    return result


def _unhealthy(node, tools, option: str, healthy) -> tuple[int, dict[int, str]]:
    """How many devices answered ``option``, and the answers that are not healthy."""
    out = _per_device(tools[node.name], node, option)
    return len(out), {d: t for d, t in out.items() if not healthy(t)}


@pytest.mark.conformance(area="hccl", must="Every device link MUST be UP (hccn_tool -link -g).")
def test_hccn_links_up(node, tools):
    answered, down = _unhealthy(node, tools, "-link -g", lambda t: "link status: UP" in t)
    assert answered == node.device_count and not down, \
        (f"{node.name}: {answered}/{node.device_count} devices answered; expected 'link status: UP', seen "
         f"{down} (device -> output); check the cable and switch port of those devices")


@pytest.mark.conformance(area="hccl", must="Every device MUST report net health Success (hccn_tool -net_health -g).")
def test_hccn_net_health(node, tools):
    answered, bad = _unhealthy(node, tools, "-net_health -g", lambda t: "net health status: Success" in t)
    assert answered == node.device_count and not bad, \
        (f"{node.name}: {answered}/{node.device_count} devices answered; expected 'net health status: Success', "
         f"seen {bad} (device -> output); check the -netdetect address and the RoCE network")


@pytest.mark.conformance(area="hccl", must="Every device MUST have an address (-vnic on A3, -ip elsewhere).")
def test_hccn_device_addresses(node, tools):
    option = "-vnic -g" if node.platform == "A3" else "-ip -g"
    answered, bad = _unhealthy(node, tools, option, lambda t: re.search(r"ipaddr:[ \t]*\d", t))
    assert answered == node.device_count and not bad, \
        (f"{node.name}: {answered}/{node.device_count} devices answered {option}; expected an ipaddr, seen {bad} "
         f"(device -> output); set it in /etc/hccn.conf with hccn_tool -i <device> -ip -s")


@pytest.mark.conformance(area="hccl", must="The TLS switch MUST be identical on every device of every node.")
def test_hccn_tls_consistent(plan, tools):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:  # nodes are independent (their batches run in parallel)
        per_node = dict(zip([n.name for n in plan.nodes],
                            pool.map(lambda n: _per_device(tools[n.name], n, "-tls -g"), plan.nodes)))
    silent = [n.name for n in plan.nodes if len(per_node[n.name]) != n.device_count]
    assert not silent, f"hccn_tool -tls -g did not answer for every device on {silent}"
    switches = {}
    for node, devices in per_node.items():
        for dev, out in devices.items():
            m = re.search(r"tls switch\[(\d)\]", out)
            switches[(node, dev)] = m.group(1) if m else None
    unparsed = sorted(k for k, v in switches.items() if v is None)
    assert not unparsed, (f"hccn_tool -tls -g gave no 'tls switch[N]' on {unparsed[:8]}"
                          f"{'...' if len(unparsed) > 8 else ''} (e.g. {per_node[unparsed[0][0]][unparsed[0][1]]!r}); "
                          "check the driver version and the hccn_tool mount")
    values = set(switches.values())
    if len(values) > 1:
        common = max(values, key=list(switches.values()).count)
        odd = sorted(k for k, v in switches.items() if v != common)
        raise AssertionError(f"TLS switch differs: {common} on most devices, other on (node, device) {odd}; "
                             f"set the same everywhere with hccn_tool -i <device> -tls -s enable {common}")


def _blocks(out: str, marker: str) -> dict[str, str]:
    result = {}
    for block in out.split(marker)[1:]:
        key, _, text = block.partition("\n")
        result[key.strip()] = text.strip()
    return result


def _addresses(tools, node, kinds: tuple[str, ...]) -> dict[int, dict[str, str]]:
    """Device addresses of the given kinds ('ip', 'vnic'): device -> kind -> address."""
    devices: dict[int, dict[str, str]] = {}
    for kind in kinds:
        for dev, text in _per_device(tools, node, f"-{kind} -g").items():
            # [ \t]*, not \s*: an unset address ("vnic ipaddr: " then a newline) must not match the next line
            m = re.search(r"vnic ipaddr:[ \t]*(\d\S*)" if kind == "vnic" else r"^ipaddr:[ \t]*(\d\S*)", text, re.M)
            if m:
                devices.setdefault(dev, {})[kind] = m.group(1)
    return devices


def _super_pod(tools) -> str | None:
    res = tools.run(nodetools.SPOD)
    m = re.search(r"Super Pod ID\s*:\s*(\d+)", res.stdout + res.stderr)
    return m.group(1) if m else None


def _sample_seed(run_dir) -> int:
    """The rotation of the reachability sample: K3LAB_SAMPLE_SEED, else derived from the run id."""
    import os
    import zlib

    raw = os.environ.get("K3LAB_SAMPLE_SEED")
    return int(raw) if raw and raw.isdigit() else zlib.crc32(run_dir.name.encode())


@pytest.mark.conformance(area="hccl", must="Every device MUST reach a peer device on another node, and every device MUST be "
             "reached (-hccs_ping to the vNIC within a super pod, -ping to the device IP across super pods).")
def test_cross_node_reachability(plan, hosts, tools, run_dir):
    """Each device of each node pings one device of another node, in one exec per node (after its batch).

    Source device d of node i targets node i+1+(d mod (n-1)) and its device (d+r) mod N, r the run's
    rotation: every device sends once, every device is targeted once, every node pair is covered
    (N >= n-1), and which device meets which rotates from run to run (the sample is reported).
    """
    from concurrent.futures import ThreadPoolExecutor

    nodes = plan.nodes
    if len(nodes) < 2:
        pytest.skip("single node")
    r = _sample_seed(run_dir)
    with ThreadPoolExecutor(max_workers=8) as pool:  # the nodes' batches, in parallel
        pods = dict(zip([n.name for n in nodes], pool.map(lambda n: _super_pod(tools[n.name]), nodes)))
    # A3 peers in one super pod meet over HCCS (vNIC); any other pair over RoCE (device IP), which
    # an A3 node answers only when asked (one more exec on that node)
    a3_pod = {n.name: pods[n.name] for n in nodes if n.platform == "A3"}

    def kinds(b) -> tuple[str, ...]:
        if b.platform != "A3":
            return ("ip",)
        roce = any(a is not b and (a.name not in a3_pod or a3_pod[a.name] != a3_pod[b.name]) for a in nodes)
        return ("vnic", "ip") if roce else ("vnic",)

    with ThreadPoolExecutor(max_workers=8) as pool:
        addrs = dict(zip([n.name for n in nodes], pool.map(lambda n: _addresses(tools[n.name], n, kinds(n)), nodes)))
    facts = {name: (addrs[name], pods[name]) for name in addrs}
    pairs, failures = _ping_pairs(nodes, facts, r)

    def ping_all(name):
        todo = dict(enumerate(pairs.get(name, [])))

        def once(keys):
            # a leading marker line: the first pair's answer never depends on the start of the stream
            script = "echo '@@ start'; " + "; ".join(
                f"echo '@@ {k}'; " + nodetools.hccn(todo[k][0], f"{todo[k][3]} -g address {todo[k][4]}") for k in keys)
            return _blocks(hosts[name].run(script).stdout, "@@ ")

        got = once(list(todo)) if todo else {}
        # a block missing from the output (seen under load: 'no answer' on a healthy run) is asked
        # again once, so a lost block is never reported as an unreachable pair
        missing = [k for k in todo if str(k) not in got]
        if missing:
            got.update(once(missing))
        return got

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = dict(zip(pairs, pool.map(ping_all, pairs)))
    failures += _lossy_pairs(pairs, answers)
    sample = f"rotation r={r} (K3LAB_SAMPLE_SEED to repeat), {sum(map(len, pairs.values()))} device pairs"
    print(sample)
    assert not failures, ("unreachable device pairs: " + "; ".join(failures) + f" [{sample}]. Check the device "
                          "links and switch ports of both ends, /etc/hccn.conf, and the super pod ids "
                          "(npu-smi info -t spod-info)")


def _ping_pairs(nodes, facts, r: int) -> tuple[dict[str, list[tuple]], list[str]]:
    """Per source node, (device, peer node, peer device, verb, target address); and the peers
    that have no address to ping."""
    failures: list[str] = []
    pairs: dict[str, list[tuple]] = {}
    for i, a in enumerate(nodes):
        for d in range(a.device_count):
            b = nodes[(i + 1 + d % (len(nodes) - 1)) % len(nodes)]
            e = (d + r) % b.device_count
            same_pod = a.platform == "A3" and b.platform == "A3" and facts[a.name][1] == facts[b.name][1]
            verb, kind = ("-hccs_ping", "vnic") if same_pod else ("-ping", "ip")
            target = facts[b.name][0].get(e, {}).get(kind)
            if target is None:
                failures.append(f"{b.name} device {e}: no {kind} address (hccn_tool -i {e} -{kind} -g); "
                                f"set it in /etc/hccn.conf")
                continue
            pairs.setdefault(a.name, []).append((d, b.name, e, verb, target))
    return pairs, failures


def _lossy_pairs(pairs: dict[str, list[tuple]], answers: dict[str, dict[str, str]]) -> list[str]:
    failures = []
    for name, todo in pairs.items():
        for k, (d, peer, e, verb, target) in enumerate(todo):
            text = answers[name].get(str(k), "")
            if not re.search(r"\b0\.00% packets? loss", text):
                seen = (text.splitlines() or ["no answer"])[-1] if verb == "-ping" else next(
                    (ln for ln in text.splitlines() if "packets transmitted" in ln), text[-120:] or "no answer")
                failures.append(f"{name} device {d} -> {peer} device {e} ({verb} {target}): expected 0.00% loss, "
                                f"seen '{seen}'")
    return failures
