"""hccn_tool stand-in: real output strings, faults from the node file, and real ICMP pings.

Device addresses on 127.0.0.x are local on any Linux host, so pings between them are real. The vNICs
follow the driver's scheme (server 1: device 0 is 192.1.2.199, device 1 192.1.3.198) and ride on
carriers in 127.0.0.0/8 (127.0.102.10, .11), local as well.
"""
from __future__ import annotations

import re

import pytest

from tests.standins._standin import ROOTFS, base_env, run, write_node

HCCN_TOOL = str(ROOTFS / "usr/local/Ascend/driver/tools/hccn_tool")
DEVICES = [{"id": 0, "ip": "127.0.0.1", "netmask": "255.255.0.0", "gateway": "127.0.0.254"},
           {"id": 1, "ip": "127.0.0.3", "netmask": "255.255.0.0", "gateway": "127.0.0.254"},
           {"id": 2, "ip": "10.255.255.77", "netmask": "255.255.0.0"}]
VNIC0, VNIC1 = "192.1.2.199", "192.1.3.198"
HCCS_NET = "127.0.0.0/8"


def hccn(tmp_path, *args, platform="A3", faults=None):
    write_node(tmp_path, platform=platform, devices=DEVICES, server_index=1, hccs_net=HCCS_NET, faults=faults or {})
    return run([HCCN_TOOL, *args], base_env(tmp_path))


@pytest.mark.parametrize("command, expected", [
    ("-link", "link status: UP\n"),
    ("-net_health", "net health status: Success\n"),
    ("-ip", "ipaddr:127.0.0.1\nnetmask:255.255.0.0\n"),
    ("-vnic", "vnic link status: UP\nvnic ipaddr: 192.1.2.199\nvnic netmask: 255.255.255.0\n"),
    ("-netdetect", "netdetect address: 127.0.0.254\n"),
    ("-gateway", "default gateway:127.0.0.254, Iface:eth0\n"),
    ("-tls", "dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
             "tls alarm time threshold[60]days\n"),
])
def test_healthy_device_queries(tmp_path, command, expected):
    done = hccn(tmp_path, "-i", "0", command, "-g")
    assert (done.returncode, done.stdout) == (0, expected)


def test_lldp_names_the_switch_port(tmp_path):
    done = hccn(tmp_path, "-i", "1", "-lldp", "-g")
    assert [line for line in done.stdout.splitlines() if "Ifname" in line] == ["\tIfname: 400GE1/2/2:1"]


def test_link_down_shows_everywhere(tmp_path):
    faults = {"devices": {"0": {"link": "DOWN"}}}
    assert hccn(tmp_path, "-i", "0", "-link", "-g", faults=faults).stdout == "link status: DOWN\n"
    assert hccn(tmp_path, "-i", "0", "-net_health", "-g", faults=faults).stdout == "net health status: Fault\n"
    assert "Ifname" not in hccn(tmp_path, "-i", "0", "-lldp", "-g", faults=faults).stdout
    ping = hccn(tmp_path, "-i", "0", "-ping", "-g", "address", "127.0.0.3", faults=faults)
    assert ping.returncode != 0 and "3 packets transmitted, 0 received, 100.00% packet loss" in ping.stdout


def test_injected_net_health_tls_and_missing_ip(tmp_path):
    faults = {"devices": {"1": {"net_health": "Receive timeout", "tls_switch": 1, "no_ip": True}}}
    assert hccn(tmp_path, "-i", "1", "-net_health", "-g", faults=faults).stdout == "net health status: Receive timeout\n"
    assert "tls switch[1]" in hccn(tmp_path, "-i", "1", "-tls", "-g", faults=faults).stdout
    no_ip = hccn(tmp_path, "-i", "1", "-ip", "-g", faults=faults)
    assert no_ip.returncode != 0
    assert no_ip.stdout == "Get ipconf failed, because no ip was preset there!\n"
    assert hccn(tmp_path, "-i", "5", "-ip", "-g").stdout.startswith("Get ipconf failed")  # device without an ip


def test_missing_vnic_address_shows_in_query_and_hccs_ping(tmp_path):
    faults = {"devices": {"0": {"no_vnic": True}}}
    # inet_ntop of an unset address, as the real tool prints it (issue #24)
    assert "vnic ipaddr: 0.0.0.0\nvnic netmask: 0.0.0.0\n" in hccn(tmp_path, "-i", "0", "-vnic", "-g", faults=faults).stdout
    hccs = hccn(tmp_path, "-i", "0", "-hccs_ping", "-g", "address", VNIC1, "cnt", "1", faults=faults)
    assert hccs.returncode != 0 and "1 packets transmitted, 0 received" in hccs.stdout


def test_roce_ping_reaches_a_local_address(tmp_path):
    done = hccn(tmp_path, "-i", "1", "-ping", "-g", "address", "127.0.0.1", platform="A2")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout
    assert lines[0] == "device 1 PING 127.0.0.1"
    assert all(re.fullmatch(rf"recv seq={seq},time=\d+\.\d{{6}}ms", lines[1 + seq]) for seq in range(3))
    assert lines[4] == "3 packets transmitted, 3 received, 0.00% packet loss"


def test_hccs_ping_reaches_a_vnic_address(tmp_path):
    done = hccn(tmp_path, "-i", "1", "-hccs_ping", "-g", "address", VNIC0)
    assert done.returncode == 0, done.stdout
    assert done.stdout.count("This pkt ping success!") == 3
    assert re.search(r"recv seq 2, time = \d+\.\d{3}us, L1 plane check result = 0x0", done.stdout)
    assert "3 packets transmitted, 3 received, 0.00% packets loss" in done.stdout
    assert re.search(r"^TP95 time \d+\.\d{3}us$", done.stdout, re.M)


def test_unreachable_peer_loses_every_packet(tmp_path):
    faults = {"unreachable": ["127.0.0.1", VNIC0]}
    roce = hccn(tmp_path, "-i", "1", "-ping", "-g", "address", "127.0.0.1", faults=faults)
    assert roce.returncode != 0
    assert "recv time out seq=0" in roce.stdout and "100.00% packet loss" in roce.stdout
    hccs = hccn(tmp_path, "-i", "1", "-hccs_ping", "-g", "address", VNIC0, "cnt", "2", faults=faults)
    assert hccs.returncode != 0
    assert hccs.stdout.count("This pkt check recv msg fail!") == 2
    assert "2 packets transmitted, 0 received, 100.00% packets loss" in hccs.stdout


def test_ping_from_an_address_the_node_does_not_have_fails(tmp_path):
    done = hccn(tmp_path, "-i", "2", "-ping", "-g", "address", "127.0.0.1", "cnt", "1")
    assert done.returncode != 0 and "1 received" not in done.stdout


def test_a3_dies_of_one_card_cannot_roce_ping_each_other(tmp_path):
    done = hccn(tmp_path, "-i", "0", "-ping", "-g", "address", "127.0.0.3", "cnt", "1")
    assert done.returncode != 0 and "1 packets transmitted, 0 received" in done.stdout


@pytest.mark.parametrize("command", ["-hccs_ping", "-vnic"])
def test_a3_only_functions_are_unsupported_elsewhere(tmp_path, command):
    args = ["address", "127.0.0.1"] if command == "-hccs_ping" else []
    done = hccn(tmp_path, "-i", "0", command, "-g", *args, platform="A2")
    assert done.returncode != 0
    assert done.stdout == "This device does not support this function.\n"


@pytest.mark.parametrize("args", [
    ["-i", "16", "-link", "-g"],
    ["-i", "x", "-link", "-g"],
    ["-i", "0", "-link"],
    ["-i", "0", "-bogus", "-g"],
    ["-i", "0", "-ping", "-g"],
    ["-i", "0", "-ping", "-g", "address", "127.0.0.1", "cnt", "0"],
])
def test_bad_invocations_fail(tmp_path, args):
    done = hccn(tmp_path, *args)
    assert done.returncode != 0 and done.stdout.strip()


def test_concurrent_call_answers_busy(tmp_path):
    """hccn_tool is not re-entrant: while one call runs, another answers busy and does nothing."""
    import fcntl
    import os

    lock = tmp_path / "hccn.lock"
    write_node(tmp_path, platform="A3", devices=DEVICES, faults={})
    env = base_env(tmp_path, K3SIM_HCCN_LOCK=str(lock))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another hccn_tool call in progress
        busy = run([HCCN_TOOL, "-i", "0", "-link", "-g"], env)
    finally:
        os.close(fd)
    assert (busy.returncode, busy.stdout) == (1, "hccn_tool is busy, please try again.\n")
    assert run([HCCN_TOOL, "-i", "0", "-link", "-g"], env).stdout == "link status: UP\n"


def test_hccs_ping_stays_within_the_super_pod(tmp_path):
    """HCCS joins one super pod: a vNIC in another pod gets no answer, -ping still reaches its device IP."""
    write_node(tmp_path, platform="A3", devices=DEVICES, super_pod_id=0, faults={}, server_index=1,
               hccs_net=HCCS_NET, super_pods={VNIC0: 0, VNIC1: 1})
    env = base_env(tmp_path)
    same = run([HCCN_TOOL, "-i", "1", "-hccs_ping", "-g", "address", VNIC0, "cnt", "1"], env)
    assert same.returncode == 0 and "0.00% packets loss" in same.stdout
    other = run([HCCN_TOOL, "-i", "0", "-hccs_ping", "-g", "address", VNIC1, "cnt", "1"], env)
    assert other.returncode != 0 and "1 packets transmitted, 0 received, 100.00% packets loss" in other.stdout


@pytest.mark.parametrize("server, device, address", [
    (0, 0, "192.0.2.199"), (1, 1, "192.1.3.198"), (5, 14, "192.5.2.185"), (15, 15, "192.15.3.184")])
def test_vnic_addresses_follow_the_driver_scheme(tmp_path, server, device, address):
    """192.<server>.<2+die>.<199-device>, die = device % 2 (issue #24; the manual's device 0: 192.168.2.199)."""
    write_node(tmp_path, platform="A3", devices=DEVICES, server_index=server, faults={})
    done = run([HCCN_TOOL, "-i", str(device), "-vnic", "-g"], base_env(tmp_path))
    assert (done.returncode, done.stdout) == (0, f"vnic link status: UP\nvnic ipaddr: {address}\n"
                                                 "vnic netmask: 255.255.255.0\n")


@pytest.mark.parametrize("address", [VNIC0, "10.0.0.5", "192.1.2.198"])
def test_the_tool_sets_no_vnic_address(tmp_path, address):
    """The real tool registers -vnic for -g only: a set is refused as a parameter error, in or out of
    the scheme, and the address stays the driver's."""
    done = hccn(tmp_path, "-i", "0", "-vnic", "-s", "address", address)
    assert done.returncode == 255 and done.stdout.startswith("Usage: hccn_tool")
    assert f"vnic ipaddr: {VNIC0}\n" in hccn(tmp_path, "-i", "0", "-vnic", "-g").stdout


@pytest.mark.parametrize("target", ["127.0.102.10", "192.1.2.198", "192.1.4.199", "192.1.2.250"])
def test_hccs_ping_outside_the_vnic_scheme_reaches_no_die(tmp_path, target):
    """A carrier, a wrong die/device pairing or an impossible device is no vNIC: every packet is lost."""
    done = hccn(tmp_path, "-i", "1", "-hccs_ping", "-g", "address", target, "cnt", "1")
    assert done.returncode != 0 and "1 packets transmitted, 0 received, 100.00% packets loss" in done.stdout


def test_hccs_ping_waits_for_its_result_like_the_real_tool_when_asked(tmp_path):
    """K3SIM_HCCS_PING_S: the real tool's one-second sleep before each poll of the result."""
    import time

    write_node(tmp_path, platform="A3", devices=DEVICES, server_index=1, hccs_net=HCCS_NET, faults={})
    t = time.monotonic()
    done = run([HCCN_TOOL, "-i", "1", "-hccs_ping", "-g", "address", VNIC0, "cnt", "1"],
               {**base_env(tmp_path), "K3SIM_HCCS_PING_S": "0.4"})
    assert done.returncode == 0 and "0.00% packets loss" in done.stdout
    assert time.monotonic() - t >= 0.4


@pytest.mark.parametrize("wait, seconds", [("1", 1.0), ("0", 0.0), ("nan", 0.0), ("inf", 0.0), ("-1", 0.0),
                                           ("11", 0.0), ("soon", 0.0)])
def test_only_a_wait_of_0_to_10_seconds_counts(monkeypatch, wait, seconds):
    import sys

    from tests.standins._standin import SIM_PATH

    monkeypatch.syspath_prepend(SIM_PATH[0])
    monkeypatch.setenv("K3SIM_HCCS_PING_S", wait)
    from k3sim import hccn_tool

    assert hccn_tool.hccs_result_wait_s() == seconds and "k3sim.hccn_tool" in sys.modules
