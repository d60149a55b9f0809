"""NPU and HCCL health through npu-smi and hccn_tool, as the vllm-ascend guides check it."""
from __future__ import annotations

from typing import Callable, TypeVar

import pytest

from k3lab.conform import nodetools, toolparse
from k3lab.conform.plugin import skip
from k3lab.launch import hwstage
from k3lab.launch.endpoints import TIMED_OUT

T = TypeVar("T")

HCCN = nodetools.HCCN


KIND = "environment"  # default class of a failure here


@pytest.mark.conformance(
    id="npu.test_npu_smi_devices_healthy", area="npu",
    must="npu-smi info MUST print one health row per device (A3: per die, 16 on a 16-device node; A2 and 950DT: per NPU) with every Health OK.",
    remedy="on the named node, read npu-smi info -t health -i N for the device; reset it (npu-smi set -t reset) or replace it, and reinstall the driver if rows are missing.")
def test_npu_smi_devices_healthy(node, tools):
    out = tools[node.name].check_output("npu-smi info")
    # every layout of tests/corpus (98/116 columns, Bus-Id NA, 950): k3lab.conform.toolparse
    try:
        info = toolparse.npu_smi_info(out)
    except toolparse.Unparsed as exc:
        raise AssertionError(f"{node.name}: unparsed output of npu-smi info ({exc}); check the driver and "
                             "the npu-smi mount of the container") from None
    assert not info.unparsed, (
        f"{node.name}: unparsed output of npu-smi info: {len(info.unparsed)} table row(s) not read, e.g. "
        f"{info.unparsed[0].strip()!r}; check the driver (npu-smi info on the host):\n{out}")
    healths = info.healths
    assert len(healths) == node.device_count, (
        f"{node.name}: npu-smi info prints {len(healths)} health rows, expected {node.device_count} for "
        f"{node.platform} (one per {'die' if node.platform == 'A3' else 'NPU'}); check the driver "
        f"(npu-smi info on the host) and the --device /dev/davinciN mounts of the container:\n{out}")
    bad = [i for i, h in enumerate(healths) if h != "OK"]
    assert not bad, (f"{node.name}: device(s) {bad} report health {[healths[i] for i in bad]}, expected OK "
                     f"(NPU, chip: {[(info.chips[i].npu, info.chips[i].chip) for i in bad]}); see npu-smi info -t "
                     "health -i <card> for the error code, then reset or replace the NPU")


def _per_device(tools, node, option: str) -> dict[int, str]:
    """The guides' loop (``for i in {0..15}; do hccn_tool -i $i OPTION; done``): device -> output.

    Read from the node's batch (k3lab.conform.nodetools): one exec per node for the whole suite."""
    answers = tools.many([nodetools.hccn(i, option) for i in range(node.device_count)])
    result: dict[int, str] = {}
    for i in range(node.device_count):
        text = answers[nodetools.hccn(i, option)].stdout.strip()
        if text:
            result[i] = text
    return result


def _read(tools, node, option: str, reader: Callable[[str], T]) -> tuple[dict[int, T], dict[int, str]]:
    """Each device's answer to ``option`` through ``reader``: device -> value, and device -> why it
    was not read (no answer, still busy after the retries, or the reader's 'unparsed output')."""
    answers = _per_device(tools, node, option)
    values: dict[int, T] = {}
    unread: dict[int, str] = {}
    for dev in range(node.device_count):
        text = answers.get(dev)
        if text is None:
            unread[dev] = "no answer"
        elif toolparse.busy(text):
            unread[dev] = f"still busy after the retries: {text[:120]!r}"
        else:
            try:
                values[dev] = reader(text)
            except toolparse.Unparsed as exc:
                unread[dev] = f"unparsed output: {exc}"
    return values, unread


def _unread(node, option: str, unread: dict[int, str]) -> str:
    return "; ".join(f"{node.name} device {d}: hccn_tool -i {d} {option}: {why}" for d, why in sorted(unread.items()))


@pytest.mark.conformance(
    id="hccl.test_hccn_links_up", area="hccl",
    must="Every device link MUST be UP (hccn_tool -link -g).",
    remedy="check the named device's cable and switch port (hccn_tool -i N -link -g); bring the port up on the switch.")
def test_hccn_links_up(node, tools):
    links, unread = _read(tools[node.name], node, "-link -g", toolparse.link)
    assert not unread, _unread(node, "-link -g", unread)
    down = sorted(d for d, state in links.items() if state != "UP")
    assert not down, (f"{node.name}: link DOWN on device(s) {down} (hccn_tool -i <device> -link -g), expected UP; "
                      "check the cable and switch port of those devices")


@pytest.mark.conformance(
    id="hccl.test_hccn_net_health", area="hccl",
    must="Every device MUST report net health Success (hccn_tool -net_health -g).",
    remedy="fix the device's link, address and gateway (hccn_tool -i N -net_health -g names the state); Init usually means no address or no reachable netdetect address.")
def test_hccn_net_health(node, tools):
    states, unread = _read(tools[node.name], node, "-net_health -g", toolparse.net_health)
    assert not unread, _unread(node, "-net_health -g", unread)
    bad = {d: state for d, state in sorted(states.items()) if state != "Success"}
    assert not bad, (f"{node.name}: net health not Success on device -> state {bad}; check the -netdetect address "
                     "(hccn_tool -i <device> -netdetect -g), the link and the RoCE network")


@pytest.mark.conformance(
    id="hccl.test_hccn_device_addresses", area="hccl",
    must="Every device MUST have an address (-vnic on A3, -ip elsewhere).",
    remedy="set the device's address with hccn_tool -i N -ip -s address A netmask M (A3: the vNIC, -vnic), as /etc/hccn.conf lists it.")
def test_hccn_device_addresses(node, tools):
    vnic = node.platform == "A3"
    option = "-vnic -g" if vnic else "-ip -g"
    addrs, unread = _read(tools[node.name], node, option, toolparse.vnic if vnic else toolparse.ip)
    assert not unread, _unread(node, option, unread)
    bad = [f"{node.name} device {d}: " + (f"vnic link {a.link} (address {a.address or 'unset'})" if a.link not in (None, "UP")
                                          else f"no address ({'vnic ipaddr 0.0.0.0' if vnic else 'none preset'})")
           for d, a in sorted(addrs.items()) if not a.usable]
    assert not bad, ("; ".join(bad) + f" (hccn_tool -i <device> {option}); "
                     + ("the driver assigns the vNIC (192.<server>.<2+die>.<199-device>; hccn_tool cannot set it): "
                        "check the die's HCCS link and the node's super pod membership (npu-smi info -t spod-info), "
                        "then reset the device" if vnic
                        else "set it in /etc/hccn.conf with hccn_tool -i <device> -ip -s"))


@pytest.mark.conformance(
    id="hccl.test_hccn_tls_consistent", area="hccl",
    must="The TLS switch MUST be identical on every device of every node.",
    remedy="set one TLS switch on every device of every node (hccn_tool -i N -tls -s enable 0|1) and restart the devices' network.")
def test_hccn_tls_consistent(plan, tools):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:  # nodes are independent (their batches run in parallel)
        per_node = dict(zip([n.name for n in plan.nodes],
                            pool.map(lambda n: _per_device(tools[n.name], n, "-tls -g"), plan.nodes)))
    silent = [n.name for n in plan.nodes if len(per_node[n.name]) != n.device_count]
    assert not silent, f"hccn_tool -tls -g did not answer for every device on {silent}"
    switches: dict[tuple[str, int], int | None] = {}
    why: dict[tuple[str, int], str] = {}
    for node, devices in per_node.items():
        for dev, out in devices.items():
            try:  # "dev_id:N, tls switch[S]..." or (newer builds) "device N, tls switch[S]..."
                switches[(node, dev)] = toolparse.tls(out).switch
            except toolparse.Unparsed as exc:
                switches[(node, dev)], why[(node, dev)] = None, str(exc)
    unparsed = sorted(why)
    assert not unparsed, (f"unparsed output of hccn_tool -tls -g on (node, device) {unparsed[:8]}"
                          f"{'...' if len(unparsed) > 8 else ''} ({why[unparsed[0]]}); "
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
    """Usable device addresses of the given kinds ('ip', 'vnic'): device -> kind -> address.

    Only what the reader validated as IPv4 (an unset ``0.0.0.0``, a vNIC whose link is down and
    anything unreadable are left out: the peer is then reported as having no address)."""
    devices: dict[int, dict[str, str]] = {}
    for kind in kinds:
        addrs, _ = _read(tools, node, f"-{kind} -g", toolparse.vnic if kind == "vnic" else toolparse.ip)
        for dev, a in addrs.items():
            if a.usable and a.address:
                devices.setdefault(dev, {})[kind] = a.address
    return devices


def _super_pod(tools) -> str | None:
    res = tools.run(nodetools.SPOD)
    try:
        return str(toolparse.spod_info(res.stdout + res.stderr)["Super Pod ID"])
    except toolparse.Unparsed:
        return None


def _sample_seed(run_dir) -> int:
    """The rotation of the reachability sample: K3LAB_SAMPLE_SEED, else derived from the run id."""
    import zlib

    from k3lab import settings

    seed = settings.current().sample_seed
    return seed if seed is not None else zlib.crc32(run_dir.name.encode())


@pytest.mark.conformance(
    id="hccl.test_cross_node_reachability", area="hccl",
    must="Every device MUST be reached from every other node (-hccs_ping to the vNIC within a super pod, -ping to the device IP across super pods), and every device MUST send.",
    remedy="check the named pair's path: both devices' addresses, links and the switch between them (hccn_tool -i N -ping -g address A from the sender).")
def test_cross_node_reachability(plan, hosts, tools, run_dir, hardware_stage):
    """Every device of every node is pinged from one device of every other node, in two rounds of one
    exec per node, the nodes in parallel.

    Round 1 (the sample): source device d of node i targets node i+1+(d mod (n-1)), device (d+r) mod N,
    r the run's rotation: every device sends once and every node pair is covered (N >= n-1), so a
    broken node pair is named after n-1..N pings per node. Round 2 (the rest): every other device of
    every node pair round 1 found working, from device (e+r) mod N of the source. A node pair that
    failed in round 1 is not pinged again: its failure is named already.

    Time budget: hccn_tool is not re-entrant, so a node's pings run one after another; a node sends
    sum(N of the other nodes) pings in all (8 A3 nodes: 7 x 16 = 112; 16: 240), each three echoes.
    On the simulator that is well under 1 s per node; on hardware a -hccs_ping lasts a second or
    more, so each node's exec gets hwstage.ping_budget_s(its pings), after which the pairs without
    an answer fail as unparsed.

    In the hardware stage (a gate: its first failure stops the run) the pings are skipped once another
    check has failed, and round 2 once round 1 has; the suite and ``k3lab check`` run both rounds.
    """
    from concurrent.futures import ThreadPoolExecutor

    nodes = plan.nodes
    if len(nodes) < 2:
        skip("single-node", "single node")
    if hardware_stage:
        skip("held-back", f"hardware stage: not run, {hardware_stage} check(s) failed already and stop the run "
                    "(the pings take minutes on hardware); the suite runs them")
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
    sample, failures = _ping_pairs(nodes, facts, r)
    lossy = _ping_round(hosts, sample)
    stop = hardware_stage is not None and bool(lossy or failures)  # the gate has its verdict
    rest = {} if stop else _rest_pairs(nodes, facts, r, sample, broken={(source, peer) for source, peer, _ in lossy})
    lossy += _ping_round(hosts, rest)
    failures += [why for _, _, why in lossy]
    told = f"rotation r={r} (K3LAB_SAMPLE_SEED to repeat), {sum(map(len, sample.values()))} sampled + " + \
        ("round 2 not run (hardware stage)" if stop else f"{sum(map(len, rest.values()))} further device pairs")
    print(told)
    assert not failures, ("unreachable device pairs: " + "; ".join(failures[:24])
                          + (f"; ... {len(failures) - 24} more" if len(failures) > 24 else "")
                          + f" [{told}]. Check the device links and switch ports of both ends, /etc/hccn.conf, and "
                          "the super pod ids (npu-smi info -t spod-info)")


def _ping_round(hosts, pairs: dict[str, list[tuple]]) -> list[tuple[str, str, str]]:
    """Ping ``pairs`` (per source node, one exec each, nodes in parallel); (source, peer, failure) per lossy pair."""
    from concurrent.futures import ThreadPoolExecutor

    def ping_all(name):
        todo = dict(enumerate(pairs.get(name, [])))

        def once(keys) -> tuple[dict[str, str], bool]:
            """The answers, and whether the exec ended within its budget."""
            # a leading marker line: the first pair's answer never depends on the start of the stream
            script = "echo '@@ start'; " + "; ".join(
                f"echo '@@ {k}'; " + nodetools.ping(todo[k][0], todo[k][3], todo[k][4]) for k in keys)
            try:
                res = hosts[name].exec(["/bin/sh", "-c", script], timeout=hwstage.ping_budget_s(len(keys)))
            except AssertionError:  # the endpoint is gone: the pairs are reported without an answer
                return {}, False
            return _blocks(res.stdout, "@@ "), res.rc != TIMED_OUT

        got, in_time = once(list(todo)) if todo else ({}, True)
        # a block missing from the output (seen under load: 'no answer' on a healthy run) is asked
        # again once, so a lost block is never reported as an unreachable pair; pairs left when the
        # budget ran out are not (they would take as long again)
        missing = [k for k in todo if str(k) not in got]
        if missing and in_time:
            got.update(once(missing)[0])
        return got

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = dict(zip(pairs, pool.map(ping_all, pairs)))
    return _lossy(pairs, answers)


def _pair(a, d: int, b, e: int, facts, failures: list[str]) -> tuple | None:
    """(device, peer node, peer device, verb, target address) for a ping from ``a``'s device d to ``b``'s
    device e, or None (the failure noted) when e has no usable address of the kind the pair needs."""
    same_pod = a.platform == "A3" and b.platform == "A3" and facts[a.name][1] == facts[b.name][1]
    verb, kind = ("-hccs_ping", "vnic") if same_pod else ("-ping", "ip")
    target = facts[b.name][0].get(e, {}).get(kind)
    if target is None:
        remedy = "set it in /etc/hccn.conf" if kind == "ip" else "the driver assigns it: check the die's HCCS link"
        failures.append(f"{b.name} device {e}: no usable {kind} address (hccn_tool -i {e} -{kind} -g: "
                        f"unset, link down or unreadable); {remedy}")
        return None
    return (d, b.name, e, verb, target)


def _ping_pairs(nodes, facts, r: int) -> tuple[dict[str, list[tuple]], list[str]]:
    """Round 1, the sample: per source node, (device, peer node, peer device, verb, target address); and
    the peers that have no address to ping."""
    failures: list[str] = []
    pairs: dict[str, list[tuple]] = {}
    for i, a in enumerate(nodes):
        for d in range(a.device_count):
            b = nodes[(i + 1 + d % (len(nodes) - 1)) % len(nodes)]
            if (pair := _pair(a, d, b, (d + r) % b.device_count, facts, failures)) is not None:
                pairs.setdefault(a.name, []).append(pair)
    return pairs, failures


def _rest_pairs(nodes, facts, r: int, sample: dict[str, list[tuple]], broken: set[tuple[str, str]]) -> dict[str, list[tuple]]:
    """Round 2: every (source node, peer device) the sample did not ping, for the node pairs it found
    working; the source device is (e+r) mod N. Peers without an address were named by round 1."""
    done = {(a, b, e) for a, todo in sample.items() for _, b, e, _, _ in todo}
    pairs: dict[str, list[tuple]] = {}
    unused: list[str] = []
    for a in nodes:
        for b in nodes:
            if b is a or (a.name, b.name) in broken:
                continue
            for e in range(b.device_count):
                if (a.name, b.name, e) in done:
                    continue
                if (pair := _pair(a, (e + r) % a.device_count, b, e, facts, unused)) is not None:
                    pairs.setdefault(a.name, []).append(pair)
    return pairs


def _lossy_pairs(pairs: dict[str, list[tuple]], answers: dict[str, dict[str, str]]) -> list[str]:
    """Pairs whose ping lost packets, carried a non-zero L1 plane check result, stayed busy after
    the retries, or printed no summary the reader can read."""
    return [why for _, _, why in _lossy(pairs, answers)]


def _lossy(pairs: dict[str, list[tuple]], answers: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(source node, peer node, failure) per lossy pair (see _lossy_pairs)."""
    failures = []
    for name, todo in pairs.items():
        for k, (d, peer, e, verb, target) in enumerate(todo):
            if (why := _judge(answers[name].get(str(k), ""))) is not None:
                failures.append((name, peer, f"{name} device {d} -> {peer} device {e} ({verb} {target}): {why}"))
    return failures


def _judge(text: str) -> str | None:
    """What is wrong with one ping's answer, or None when every echo came back clean."""
    if toolparse.busy(text):
        return f"still busy after the retries: {text.strip()[:120]!r}"
    try:
        result = toolparse.ping(text)
    except toolparse.Unparsed as exc:
        return f"unparsed output: {exc}"
    return None if result.ok else f"expected 0.00% loss and L1 plane check result 0x0, seen {result.describe()}"


# The rest of vllm-ascend's "verify multi-node communication environment" procedure (guides §3.2):
# switch ports over LLDP, the netdetect address and gateway, /etc/hccn.conf and, on A3, spod-info.
# The lab's hardware stage runs this file before any engine starts (k3lab.launch.hwstage).


@pytest.mark.conformance(
    id="hccl.test_hccn_lldp", area="hccl",
    must="Every device MUST see its switch port over LLDP (hccn_tool -i N -lldp -g prints an Ifname).",
    remedy="enable LLDP on the switch port of the named device and check its cable (hccn_tool -i N -lldp -g must print an Ifname).")
def test_hccn_lldp(node, tools):
    ports, unread = _read(tools[node.name], node, "-lldp -g", toolparse.lldp_ifname)
    silent = {d: "no answer (no LLDP neighbour learnt)" for d in unread if unread[d] == "no answer"}
    unread = {d: why for d, why in unread.items() if d not in silent}
    assert not unread, _unread(node, "-lldp -g", unread)
    missing = sorted(set(silent) | {d for d, port in ports.items() if not port})
    assert not missing, (f"{node.name}: device(s) {missing} learn no switch port over LLDP (no 'Ifname:' in "
                         "hccn_tool -i <device> -lldp -g); check the cable and the switch port of those devices")


@pytest.mark.conformance(
    id="hccl.test_hccn_netdetect_gateway", area="hccl",
    must="Every device MUST have a netdetect address and a default gateway (hccn_tool -i N -netdetect -g, -gateway -g).",
    remedy="set the netdetect address and gateway: hccn_tool -i N -netdetect -s address A, hccn_tool -i N -gateway -s gateway G.")
def test_hccn_netdetect_gateway(node, tools):
    detect, unread = _read(tools[node.name], node, "-netdetect -g", toolparse.netdetect)
    assert not unread, _unread(node, "-netdetect -g", unread)
    gateways, unread = _read(tools[node.name], node, "-gateway -g", toolparse.gateway)
    assert not unread, _unread(node, "-gateway -g", unread)
    no_detect = sorted(d for d, a in detect.items() if a is None)
    no_gateway = sorted(d for d, a in gateways.items() if a is None)
    assert not no_detect and not no_gateway, \
        (f"{node.name}: netdetect address unset on device(s) {no_detect}, default gateway unset on {no_gateway}; "
         "set them with hccn_tool -i <device> -netdetect -s address A and -gateway -s gateway G")


@pytest.mark.conformance(
    id="hccl.test_hccn_conf_names_every_device", area="hccl",
    must="/etc/hccn.conf in the node's container MUST name every device (address_N), as the guides' docker run mounts it from the host.",
    remedy="write address_N for every device into the host's /etc/hccn.conf (hccn_tool -ip -s does) and mount it into the container as the guides do.")
def test_hccn_conf_names_every_device(node, tools):
    f = tools[node.name].file("/etc/hccn.conf")
    assert f.exists, f"{node.name}: /etc/hccn.conf is missing in the container; mount it from the host (-v /etc/hccn.conf)"
    conf = toolparse.hccn_conf(f.content_string)
    missing = [d for d in range(node.device_count) if not conf.get(d, {}).get("address")]
    assert not missing, (f"{node.name}: /etc/hccn.conf names no address for device(s) {missing}; configure them with "
                         "hccn_tool -i <device> -ip -s address A netmask M on the host")


@pytest.mark.conformance(
    id="hccl.test_spod_info", area="hccl",
    must="On A3, npu-smi info -t spod-info MUST report the node's Super Pod ID.",
    remedy="update the A3 node's driver and firmware to a version whose npu-smi answers -t spod-info, and check the super pod configuration.")
def test_spod_info(node, tools):
    if node.platform != "A3":
        skip("not-a3", "spod-info exists on A3 only")
    assert _super_pod(tools[node.name]) is not None, \
        (f"{node.name}: npu-smi info -t spod-info -i 0 -c 0 gave no 'Super Pod ID'; check the driver version "
         "(A3 super pod support)")
