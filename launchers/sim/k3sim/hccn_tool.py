"""``hccn_tool`` stand-in: the ``-g`` (get) queries of the multi-node verification steps.

Output strings are the real ones (ascend-components.md §3.2, tests/corpus). State comes from the
node file on every call; ``-ping`` and ``-hccs_ping`` send real ICMP echoes from the device (or vNIC)
address, which node-init added to the node NIC, so they fail exactly when the peer address is
unreachable.

Real variants the stand-in prints: an unset vNIC is ``0.0.0.0`` (``inet_ntop`` of 0), the vNIC link
can be DOWN beside an address, ``-hccs_ping`` answers a busy device with its own wording, a
received hccs packet carries an L1 plane check result, ``-net_health`` prints any of the tool's ten
states (device fault ``net_health``), and 26.x drivers print ``device N, tls switch[...]``
(INFERRED from the version the 116-column npu-smi came with; older ones ``dev_id:N, ...``).
Device faults for them: ``no_vnic``, ``vnic_link``, ``hccs_busy`` (answers busy that many times, or
``"always"``), ``hccs_plane`` (e.g. ``"0x2"``); and for the rest of the §3.2 procedure ``no_lldp``
(no neighbour learnt on an UP link), ``no_netdetect`` and ``no_gateway`` (printed ``0.0.0.0``, unset).

vNIC addresses follow the driver's scheme ``192.<server>.<2+die>.<199-device>`` (``hw.vnic_address``,
server = the node's ``server_index``). The tool cannot set one: hccn_tool's source registers ``-vnic``
for ``-g`` only (``tool_vnic_print_help``: MODE_GET), so ``-vnic -s ...`` is refused as any option the
tool does not know, whatever the address. ``-hccs_ping`` reaches dies by the scheme: a target outside it
is no die of the fabric and loses every packet.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time

from k3sim import hw, run_tool

PING_TIMEOUT_S = 1.0
PING_COUNT = 3
BUSY = "hccn_tool is busy, please try again."
HCCS_BUSY = "The device is occupied. Please try again later."  # UDA_TOOL_HCCS_PING_RESOURCE_BUSY
UNSET = "0.0.0.0"
LOCK_FILE = os.environ.get("K3SIM_HCCN_LOCK", "/tmp/.k3sim-hccn_tool.lock")
NO_IP = "Get ipconf failed, because no ip was preset there!"
UNSUPPORTED = "This device does not support this function."
USAGE = "Usage: hccn_tool -i <device_id> <-link|-net_health|-ip|-vnic|-netdetect|-gateway|-lldp|-tls|-ping|-hccs_ping> -g [options]"
# Exit statuses: parameter errors, failed operations, and "no ip preset" (its real code).
EXIT_PARAM, EXIT_FAIL, EXIT_NO_IP = 255, 1, 13


class Fail(Exception):
    def __init__(self, message: str, status: int = EXIT_FAIL):
        super().__init__(message)
        self.status = status


def main(argv: list[str] | None = None) -> int:
    return run_tool(answer, argv)


def answer(args: list[str]) -> tuple[str, int]:
    """What the tool prints (all on stdout, as the real one) and its exit status."""
    try:
        node, device_id, command, rest = parse(args)
        fd = exclusive()
        try:
            lines, status = COMMANDS[command](node, device_id, rest)
        finally:
            os.close(fd)
        return "".join(f"{line}\n" for line in lines), status
    except Fail as exc:
        return f"{exc}\n", exc.status


def exclusive() -> int:
    """The real tool is not re-entrant: a second call while one runs answers busy and does nothing.

    Returns the locked descriptor (closing it unlocks). A plain function, not a contextmanager:
    contextlib's imports cost more than this whole call, and the tool runs thousands of times."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Fail(BUSY, EXIT_FAIL) from None
    return fd


def parse(args: list[str]) -> tuple[hw.Node, int, str, list[str]]:
    # only -g is known here; -vnic has no -s in the real tool either (its help registers MODE_GET only)
    if len(args) < 4 or args[0] != "-i" or args[2] not in COMMANDS or args[3] != "-g":
        raise Fail(USAGE, EXIT_PARAM)
    node = hw.node()
    if not args[1].isdigit() or int(args[1]) >= node.device_count:
        raise Fail(f"device id [{args[1]}] is invalid.", EXIT_PARAM)
    return node, int(args[1]), args[2], args[4:]


def state(node: hw.Node, device_id: int) -> tuple[dict, dict]:
    return node.device(device_id) or {}, node.device_faults(device_id)


def link(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    _, fault = state(node, device_id)
    return [f"link status: {fault.get('link', 'UP')}"], 0


def net_health(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    dev, fault = state(node, device_id)
    if "net_health" in fault:
        status = fault["net_health"]
    elif fault.get("link", "UP") != "UP":
        status = "Fault"  # the device cannot reach its netdetect address over a down link
    elif fault.get("no_ip") or not dev.get("ip"):
        status = "Init"
    else:
        status = "Success"
    return [f"net health status: {status}"], 0


def ip(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    dev, fault = state(node, device_id)
    if fault.get("no_ip") or not dev.get("ip"):
        return [NO_IP], EXIT_NO_IP
    return [f"ipaddr:{dev['ip']}", f"netmask:{dev.get('netmask', '255.255.255.0')}"], 0


def vnic(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    if node.platform != "A3":
        return [UNSUPPORTED], EXIT_FAIL
    _, fault = state(node, device_id)
    address = vnic_ip(node, device_id, fault)
    netmask = hw.VNIC_NETMASK if address else UNSET
    return [f"vnic link status: {fault.get('vnic_link', 'UP')}", f"vnic ipaddr: {address or UNSET}",
            f"vnic netmask: {netmask}"], 0


def vnic_ip(node: hw.Node, device_id: int, fault: dict) -> str:
    """The die's vNIC address by the driver's scheme; empty when none is configured (fault
    ``no_vnic``: as if never set, printed as ``0.0.0.0``)."""
    return "" if fault.get("no_vnic") else node.vnic_address(device_id)


def netdetect(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    dev, fault = state(node, device_id)  # fault no_netdetect: never set (inet_ntop of 0, as -vnic)
    return [f"netdetect address: {UNSET if fault.get('no_netdetect') else dev.get('netdetect', dev.get('gateway', ''))}"], 0


def gateway(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    dev, fault = state(node, device_id)  # fault no_gateway: never set
    return [f"default gateway:{UNSET if fault.get('no_gateway') else dev.get('gateway', '')}, Iface:eth0"], 0


def lldp(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    _, fault = state(node, device_id)
    if fault.get("link", "UP") != "UP" or fault.get("no_lldp"):
        return [], 0  # no neighbour is learnt over a down link, nor from a switch port without LLDP
    server = int(node.data.get("server_index", 0))
    return ["Chassis ID TLV", f"\tMAC: 2c:52:af:{server:02x}:00:01", "Port ID TLV",
            f"\tIfname: 400GE1/{server + 1}/{device_id + 1}:1", "Time to Live TLV", "\t121",
            "System Name TLV", "\tk3lab-leaf-1", "End of LLDPDU TLV"], 0


def tls(node: hw.Node, device_id: int, _rest: list[str]) -> tuple[list[str], int]:
    _, fault = state(node, device_id)
    if "tls_error" in fault:  # the query fails on this device (driver error text from the fault)
        return [str(fault["tls_error"])], EXIT_FAIL
    label = f"device {device_id}" if newer_driver(node) else f"dev_id:{device_id}"
    return [f"{label}, tls switch[{fault.get('tls_switch', 0)}](0:disable, 1:enable), "
            "tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days"], 0


def newer_driver(node: hw.Node) -> bool:
    major = str(node.data.get("driver_version") or "").split(".")[0]
    return major.isdigit() and int(major) >= 26


def still_busy(node: hw.Node, device_id: int, fault: dict) -> bool:
    """Fault ``hccs_busy``: answer busy that many times, or always. Counted per device and per
    version of the node file, so setting the fault again starts a new count."""
    times = fault.get("hccs_busy")
    if not times:
        return False
    if times == "always":
        return True
    try:
        st = os.stat(hw.node_file())
        version = f"{st.st_ino}-{st.st_mtime_ns}"
    except OSError:
        version = "none"
    path = f"{LOCK_FILE}.hccs-busy-{device_id}-{version}"
    try:
        with open(path) as fh:
            seen = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        seen = 0
    if seen >= int(times):
        return False
    with open(path, "w") as fh:
        fh.write(str(seen + 1))
    return True


def ping_options(rest: list[str]) -> tuple[str, int]:
    opts = dict(zip(rest[::2], rest[1::2]))
    if len(rest) % 2 or "address" not in opts or set(opts) - {"address", "cnt"}:
        raise Fail(USAGE, EXIT_PARAM)
    count = opts.get("cnt", str(PING_COUNT))
    if not count.isdigit() or not 1 <= int(count) <= 100:
        raise Fail(USAGE, EXIT_PARAM)
    return opts["address"], int(count)


def echoes(node: hw.Node, source: str, target: str, count: int, blocked: bool,
           named: str = "") -> list[float | None]:
    """Round trip per packet (None = lost); a blocked path loses every packet without sending.
    ``named``: the address the caller asked for when ``target`` is its carrier (hccs)."""
    if blocked or target in node.unreachable() or named in node.unreachable():
        return [None] * count
    from k3sim.icmp import Pinger  # raw sockets only for the ping commands

    try:
        pinger = Pinger(source)
    except OSError:
        return [None] * count  # the device address is not up on the NIC: nothing leaves the device
    try:
        rtts = [pinger.echo(target, seq, PING_TIMEOUT_S) for seq in range(count)]
        # like ping(8), a reply that comes while a later packet is awaited still counts as received
        return [rtt if rtt is not None else pinger.late.get(seq) for seq, rtt in enumerate(rtts)]
    except OSError:
        return [None] * count
    finally:
        pinger.close()


def ping(node: hw.Node, device_id: int, rest: list[str]) -> tuple[list[str], int]:
    target, count = ping_options(rest)
    dev, fault = state(node, device_id)
    if fault.get("no_ip") or not dev.get("ip"):
        return [NO_IP], EXIT_NO_IP
    sibling = node.device(device_id ^ 1) if node.platform == "A3" else None
    # The two dies of one A3 card cannot RoCE-ping each other.
    blocked = fault.get("link", "UP") != "UP" or bool(sibling and sibling.get("ip") == target)
    rtts = echoes(node, dev["ip"], target, count, blocked)
    lines = [f"device {device_id} PING {target}"]
    lines += [f"recv seq={seq},time={rtt * 1000:.6f}ms" if rtt is not None else f"recv time out seq={seq}"
              for seq, rtt in enumerate(rtts)]
    received = sum(rtt is not None for rtt in rtts)
    lines.append(f"{count} packets transmitted, {received} received, {(count - received) * 100 / count:.2f}% packet loss")
    return lines, 0 if received == count else EXIT_FAIL


def hccs_result_wait_s() -> float:
    """The real tool sleeps 1 s before each poll of an -hccs_ping's result (dsmi_get_hccs_ping_result
    in the hccn_tool source), so every call lasts a second or more. The stand-in answers at once unless
    K3SIM_HCCS_PING_S asks for that floor (the fail-fast bench does; 0..10 s, anything else is 0)."""
    try:
        wait = float(os.environ.get("K3SIM_HCCS_PING_S", "0"))
    except ValueError:
        return 0.0
    return wait if 0 <= wait <= 10 else 0.0  # also rejects nan and inf


def hccs_ping(node: hw.Node, device_id: int, rest: list[str]) -> tuple[list[str], int]:
    if node.platform != "A3":
        return [UNSUPPORTED], EXIT_FAIL
    target, count = ping_options(rest)
    time.sleep(hccs_result_wait_s())
    _, fault = state(node, device_id)
    if still_busy(node, device_id, fault):
        return [HCCS_BUSY], EXIT_FAIL
    # HCCS joins the dies of one super pod only: a vNIC address in another super pod gets no answer,
    # nor does an address outside the vNIC scheme (no die has it)
    other_pod = node.super_pod_of(target) not in (None, node.super_pod)
    source = vnic_ip(node, device_id, fault)
    peer = node.carrier(target)
    blocked = fault.get("vnic_link", "UP") != "UP" or not source or other_pod or peer is None
    rtts = echoes(node, node.carrier(source) or "", peer or target, count, blocked, named=target)
    return hccs_report(device_id, target, rtts, str(fault.get("hccs_plane", "0x0")))


def hccs_report(device_id: int, target: str, rtts: list[float | None], plane: str) -> tuple[list[str], int]:
    """tool_hccs_ping_print's lines; ``plane`` is the first packet's L1 plane check result."""
    count = len(rtts)
    lines = [f"device {device_id} PING {target}"]
    for seq, rtt in enumerate(rtts):
        lines.append("This pkt ping success!" if rtt is not None else "This pkt check recv msg fail!")
        lines.append(f"recv seq {seq}, time = {us(rtt or 0.0)}, L1 plane check result = {plane if seq == 0 else '0x0'}")
    ok = sorted(rtt for rtt in rtts if rtt is not None)
    lines += [f"{count} packets transmitted, {len(ok)} received, {(count - len(ok)) * 100 / count:.2f}% packets loss",
              f"max time {us(ok[-1] if ok else 0.0)}", f"min time {us(ok[0] if ok else 0.0)}",
              f"average time {us(sum(ok) / len(ok) if ok else 0.0)}",
              f"TP95 time {us(ok[int(0.95 * len(ok))] if ok else 0.0)}"]
    return lines, 0 if len(ok) == count else EXIT_FAIL


def us(seconds: float) -> str:
    nanos = int(seconds * 1e9)
    return f"{nanos // 1000}.{nanos % 1000:03d}us"


COMMANDS = {"-link": link, "-net_health": net_health, "-ip": ip, "-vnic": vnic, "-netdetect": netdetect,
            "-gateway": gateway, "-lldp": lldp, "-tls": tls, "-ping": ping, "-hccs_ping": hccs_ping}

if __name__ == "__main__":
    sys.exit(main())
