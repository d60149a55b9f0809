"""The sim node's PID 1: bring up the simulated device network, then reap and wait for stop.

Every device address (and on A3 every vNIC's carrier address) becomes a secondary address on the node NIC,
so ``hccn_tool -ping`` between simulated devices is a real ICMP exchange over the container
network. ``/etc/hccn.conf`` is written in the driver's format for the guides' ``cat /etc/hccn.conf``.
"""
from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from pathlib import Path

from k3sim import hw, toolservice

HCCN_CONF = Path(os.environ.get("K3SIM_HCCN_CONF", "/etc/hccn.conf"))
READY_FILE = Path(os.environ.get("K3SIM_READY_FILE", "/run/k3lab-sim/ready"))
TOOL_PORT_FILE = Path(os.environ.get("K3SIM_TOOL_SERVICE", "/run/k3lab-sim/tool-service"))  # read by the tool shims
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
WATCHED = STOP_SIGNALS | {signal.SIGCHLD}


def prefix_len(netmask: str | None) -> int:
    return ipaddress.IPv4Network(f"0.0.0.0/{netmask}").prefixlen if netmask else 24


def device_addresses(node: hw.Node) -> list[tuple[str, int]]:
    """(address, prefix) pairs to add: device IPs, plus vNIC IPs on A3; no_ip devices get none."""
    addresses = []
    for dev in node.data.get("devices", []):
        if node.device_faults(int(dev["id"])).get("no_ip"):
            continue
        if dev.get("ip"):
            addresses.append((dev["ip"], prefix_len(dev.get("netmask"))))
        if node.platform == "A3":  # the carrier of the die's vNIC (hw.Node.carrier): HCCS over the sim's network
            addresses.append((node.carrier(node.vnic_address(int(dev["id"]))) or "", node.carrier_prefix()))
    return addresses


def add_address(address: str, prefix: int, nic: str) -> None:
    done = subprocess.run(["ip", "addr", "add", f"{address}/{prefix}", "dev", nic],
                          capture_output=True, text=True, check=False)
    # A restarted container keeps its addresses: "File exists" means already configured.
    if done.returncode and "File exists" not in done.stderr and "already assigned" not in done.stderr:
        raise RuntimeError(f"ip addr add {address}/{prefix} dev {nic}: {done.stderr.strip()}")


def hccn_conf(node: hw.Node) -> str:
    lines = []
    for dev in sorted(node.data.get("devices", []), key=lambda d: int(d["id"])):
        i = int(dev["id"])
        if dev.get("ip") and not node.device_faults(i).get("no_ip"):
            lines += [f"address_{i}={dev['ip']}", f"netmask_{i}={dev.get('netmask', '255.255.255.0')}"]
        if dev.get("gateway"):
            lines += [f"netdetect_{i}={dev.get('netdetect', dev['gateway'])}", f"gateway_{i}={dev['gateway']}"]
        lines += [f"send_arp_status_{i}=1", f"tls_enable_{i}={node.device_faults(i).get('tls_switch', 0)}"]
    return "\n".join(lines) + "\n"


def reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wait_for_stop() -> None:
    """Take the (blocked) signals synchronously: no race between a check and a sleep."""
    while True:
        info = signal.sigtimedwait(WATCHED, 1.0)
        reap_children()  # also on timeout: several SIGCHLDs may have merged into one
        if info is not None and info.si_signo in STOP_SIGNALS:
            return


def main() -> int:
    # Blocked from the start, a stop request during setup stays pending instead of being lost
    # (PID 1 ignores default-handled signals).
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    node = hw.node()
    for address, prefix in device_addresses(node):
        add_address(address, prefix, node.nic)
    HCCN_CONF.parent.mkdir(parents=True, exist_ok=True)
    HCCN_CONF.write_text(hccn_conf(node))
    try:
        toolservice.start(TOOL_PORT_FILE)
    except OSError as exc:  # the shims then run the tools in-process: slower, same answers
        print(f"k3lab-sim: tool service not started: {exc}", flush=True)
    READY_FILE.parent.mkdir(parents=True, exist_ok=True)
    READY_FILE.touch()
    print(f"k3lab-sim node {node.data.get('node', '?')} ready ({node.platform}, "
          f"{len(device_addresses(node))} device addresses on {node.nic})", flush=True)
    wait_for_stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
