"""Readers of the rest of the guides' §3.2 procedure, on the outputs shared/reference/ascend-components.md
§3.2-3.3 quotes (hccn_tool -lldp/-netdetect/-gateway -g, /etc/hccn.conf)."""
from __future__ import annotations

import pytest

from k3lab.conform import toolparse


def test_lldp_reads_the_switch_port_or_none():
    assert toolparse.lldp_ifname("Port ID TLV\n\tIfname: 400GE1/1/5:1\n") == "400GE1/1/5:1"
    assert toolparse.lldp_ifname("") is None
    with pytest.raises(toolparse.Unparsed):
        toolparse.lldp_ifname("Chassis ID TLV\n\tMAC: 2c:52:af:00:00:01\n")


def test_netdetect_and_gateway():
    assert toolparse.netdetect("netdetect address: 11.12.165.1") == "11.12.165.1"
    assert toolparse.gateway("default gateway:11.12.165.1, Iface:eth0") == "11.12.165.1"
    assert toolparse.netdetect("netdetect address: 0.0.0.0") is None and toolparse.gateway("default gateway:, Iface:eth0") is None
    with pytest.raises(toolparse.Unparsed):
        toolparse.gateway("default gateway:eth0; rm -rf /, Iface:eth0")


def test_hccn_conf_per_device():
    conf = toolparse.hccn_conf("address_0=29.1.137.205\nnetmask_0=255.255.0.0\n# address_1=1.1.1.1\n"
                               "netdetect_15=29.1.0.1\narp_0=-i eth0 -s 29.1.137.206 aa:bb\n")
    assert conf == {0: {"address": "29.1.137.205", "netmask": "255.255.0.0", "arp": "-i eth0 -s 29.1.137.206 aa:bb"},
                    15: {"netdetect": "29.1.0.1"}}
