"""node-init: device addresses on the NIC, /etc/hccn.conf, readiness, reaping and a prompt stop.

A fake ``ip`` first on PATH records what node-init asks for, so the host's network is untouched.
"""
from __future__ import annotations

import os
import signal
import sys

from tests.standins._standin import ROOTFS, SIM_PATH, SITE, base_env, procs, wait_until, write_node  # noqa: F401 (procs: fixture)

NODE_INIT = str(ROOTFS / "opt/k3lab-sim/bin/node-init")
DEVICES = [{"id": 0, "ip": "10.88.1.11", "netmask": "255.255.0.0", "gateway": "10.88.0.1"},
           {"id": 1, "ip": "10.88.1.12", "gateway": "10.88.0.1"},
           {"id": 2, "ip": "10.88.1.13", "netmask": "255.255.0.0", "gateway": "10.88.0.1"}]


def fake_ip(tmp_path, stderr_text="", status=0):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ip"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/ip.log\n'
                      f'[ -n "{stderr_text}" ] && echo "{stderr_text}" >&2\nexit {status}\n')
    script.chmod(0o755)
    return bin_dir


def node_env(tmp_path, bin_dir):
    return base_env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}", K3SIM_HCCN_CONF=str(tmp_path / "hccn.conf"),
                    K3SIM_READY_FILE=str(tmp_path / "run" / "ready"))


def test_adds_addresses_writes_hccn_conf_and_stops_on_sigterm(tmp_path, procs):
    # server 3's vNICs 192.3.2.199 and 192.3.3.198 ride on their carriers 10.89.104.10 and .11 (hccs_net)
    write_node(tmp_path, platform="A3", nic="eth7", devices=DEVICES, server_index=3, hccs_net="10.89.0.0/16",
               faults={"devices": {"2": {"no_ip": True, "tls_switch": 1}}})
    proc = procs([NODE_INIT], node_env(tmp_path, fake_ip(tmp_path)))
    wait_until(lambda: (tmp_path / "run" / "ready").exists() or proc.popen.poll() is not None)
    assert (tmp_path / "run" / "ready").exists(), proc.err
    assert (tmp_path / "ip.log").read_text().splitlines() == [
        "addr add 10.88.1.11/16 dev eth7", "addr add 10.89.104.10/16 dev eth7",
        "addr add 10.88.1.12/24 dev eth7", "addr add 10.89.104.11/16 dev eth7"]
    conf = (tmp_path / "hccn.conf").read_text().splitlines()
    assert conf[:6] == ["address_0=10.88.1.11", "netmask_0=255.255.0.0", "netdetect_0=10.88.0.1", "gateway_0=10.88.0.1",
                        "send_arp_status_0=1", "tls_enable_0=0"]
    assert "address_2=10.88.1.13" not in conf and "tls_enable_2=1" in conf
    assert proc.stop(signal.SIGTERM, timeout=2) == 0


def test_vnic_addresses_only_on_a3_and_sigint_stops(tmp_path, procs):
    write_node(tmp_path, platform="A2", devices=DEVICES[:1])
    proc = procs([NODE_INIT], node_env(tmp_path, fake_ip(tmp_path)))
    wait_until(lambda: (tmp_path / "run" / "ready").exists())
    assert (tmp_path / "ip.log").read_text().splitlines() == ["addr add 10.88.1.11/16 dev eth0"]
    assert proc.stop(signal.SIGINT, timeout=2) == 0


def test_existing_addresses_are_tolerated(tmp_path, procs):
    write_node(tmp_path, platform="A2", devices=DEVICES[:1])
    proc = procs([NODE_INIT], node_env(tmp_path, fake_ip(tmp_path, "RTNETLINK answers: File exists", 2)))
    wait_until(lambda: (tmp_path / "run" / "ready").exists() or proc.popen.poll() is not None)
    assert proc.popen.poll() is None, proc.err


def test_other_ip_failures_stop_the_node(tmp_path, procs):
    write_node(tmp_path, platform="A2", devices=DEVICES[:1])
    proc = procs([NODE_INIT], node_env(tmp_path, fake_ip(tmp_path, "Cannot find device eth0", 1)))
    assert proc.popen.wait(5) != 0
    assert "Cannot find device" in proc.err and not (tmp_path / "run" / "ready").exists()


def test_reaps_exited_children():
    sys.path[:0] = SIM_PATH  # k3sim's parent, as the image's PYTHONPATH has it
    try:
        from k3sim.node_init import reap_children
    finally:
        del sys.path[:len(SIM_PATH)]
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    wait_until(lambda: _state(pid) == "Z")
    reap_children()
    assert not os.path.exists(f"/proc/{pid}")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split()[2]
