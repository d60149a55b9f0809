"""Contract: the kit's readers (k3lab.conform.toolparse) give the same result shape on the
npu-smi and hccn_tool stand-ins as on the matching real samples of tests/corpus (same platform,
same driver generation). No Docker: the stand-ins run on the host with a private node file."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from k3lab.conform import toolparse
from tests.standins._standin import ROOTFS, base_env, run, write_node

NPU_SMI = str(ROOTFS / "usr/local/bin/npu-smi")
HCCN_TOOL = str(ROOTFS / "usr/local/Ascend/driver/tools/hccn_tool")
CORPUS = Path(__file__).resolve().parents[1] / "corpus"
DEVICES = [{"id": d, "ip": f"127.0.0.{10 + d}", "netmask": "255.255.0.0"} for d in range(16)]
# server 1's vNICs (192.1.<2+die>.<199-device>) ride on local carriers in 127.0.0.0/8
SCHEME = {"server_index": 1, "hccs_net": "127.0.0.0/8"}


def tool(tmp_path, exe, *args, **node):
    write_node(tmp_path, devices=DEVICES, **{**SCHEME, **node})
    return run([exe, *args], base_env(tmp_path))


def table_shape(text: str) -> dict:
    """What a check relies on: the table width, a version, which chip fields are read, HBM totals."""
    info = toolparse.npu_smi_info(text)
    rows = [ln for ln in text.splitlines() if ln.startswith(("|", "+"))]
    return {"width": {len(ln) for ln in rows}, "version": info.version is not None, "unparsed": info.unparsed,
            "chip_fields": {f.name for c in info.chips for f in fields(c) if getattr(c, f.name) is not None},
            "hbm_total": {c.hbm[1] for c in info.chips if c.hbm}}


@pytest.mark.parametrize("platform, driver, real", [
    ("A3", "24.1.rc3.3", "npu_smi/a3_24.1.rc3.3_processes_yuanrong.txt"),
    ("A3", "25.3.rc1", "npu_smi/a3_25.3.rc1_issue5588.txt"),
    ("A3", "26.0.rc2", "npu_smi/a3_26.0.rc2_116col_issue12980.txt"),
    ("A2", "24.1.rc3", "npu_smi/a2_910b4_24.1.rc3_processes_yuanrong.txt"),
    ("A2", "24.1.1", "npu_smi/a2_910b4_24.1.1_1panel9472.txt"),
])
def test_npu_smi_table_reads_like_the_real_one(tmp_path, platform, driver, real):
    done = tool(tmp_path, NPU_SMI, "info", platform=platform, driver_version=driver)
    assert done.returncode == 0
    sim, ref = table_shape(done.stdout), table_shape((CORPUS / real).read_text())
    assert sim == ref
    info = toolparse.npu_smi_info(done.stdout)
    assert info.version == driver and len(info.chips) == {"A3": 16, "A2": 8}[platform]


def test_the_950_table_is_read_with_hbm_per_chip(tmp_path):
    info = toolparse.npu_smi_info(tool(tmp_path, NPU_SMI, "info", platform="950DT").stdout)
    assert len(info.chips) == 8 and not info.unparsed and all(c.hbm for c in info.chips)


def test_a_garbled_table_fails_as_unparsed(tmp_path):
    info = toolparse.npu_smi_info(tool(tmp_path, NPU_SMI, "info", platform="A3",
                                       faults={"npu_smi": {"table": "garbled"}}).stdout)
    assert info.unparsed and len(info.chips) == 15


@pytest.mark.parametrize("option, reader, real", [
    ("-link", toolparse.link, "hccn_tool/link_up_mindcluster_doc.txt"),
    ("-net_health", toolparse.net_health, "hccn_tool/net_health_success_mindcluster_doc.txt"),
    ("-ip", toolparse.ip, "hccn_tool/ip_mindcluster_kgparse_fixture.txt"),
    ("-vnic", toolparse.vnic, "constructed/hccn_vnic_up.txt"),
    ("-tls", toolparse.tls, "constructed/hccn_tls_dev_id.txt"),
])
def test_hccn_tool_answers_read_like_the_real_ones(tmp_path, option, reader, real):
    done = tool(tmp_path, HCCN_TOOL, "-i", "3", option, "-g", platform="A3")
    sim, ref = reader(done.stdout), reader((CORPUS / real).read_text())
    assert type(sim) is type(ref)
    if hasattr(ref, "__dataclass_fields__"):
        assert {f.name: getattr(sim, f.name) is None for f in fields(sim)} == \
               {f.name: getattr(ref, f.name) is None for f in fields(ref)}


def test_newer_drivers_print_the_device_form_of_tls(tmp_path):
    done = tool(tmp_path, HCCN_TOOL, "-i", "3", "-tls", "-g", platform="A3", driver_version="26.0.rc2")
    assert done.stdout.startswith("device 3, tls switch[0]")
    assert toolparse.tls(done.stdout) == toolparse.Tls(3, 0)


@pytest.mark.parametrize("state", toolparse.NET_HEALTH)
def test_every_net_health_state_is_printed_and_read(tmp_path, state):
    done = tool(tmp_path, HCCN_TOOL, "-i", "1", "-net_health", "-g", platform="A3",
                faults={"devices": {"1": {"net_health": state}}})
    assert toolparse.net_health(done.stdout) == state


def test_an_unset_or_down_vnic_reads_as_the_real_tool_prints_it(tmp_path):
    unset = tool(tmp_path, HCCN_TOOL, "-i", "0", "-vnic", "-g", platform="A3",
                 faults={"devices": {"0": {"no_vnic": True}}})
    assert toolparse.vnic(unset.stdout) == toolparse.vnic((CORPUS / "constructed/hccn_vnic_unset.txt").read_text())
    down = toolparse.vnic(tool(tmp_path, HCCN_TOOL, "-i", "0", "-vnic", "-g", platform="A3",
                               faults={"devices": {"0": {"vnic_link": "DOWN"}}}).stdout)
    assert down.link == "DOWN" and down.address == "192.1.2.199" and not down.usable


def test_a_busy_hccs_ping_uses_the_real_wording_and_clears(tmp_path):
    write_node(tmp_path, devices=DEVICES, platform="A3", faults={"devices": {"0": {"hccs_busy": 1}}}, **SCHEME)
    args = [HCCN_TOOL, "-i", "0", "-hccs_ping", "-g", "address", "192.1.3.198", "cnt", "1"]
    first = run(args, base_env(tmp_path))
    assert first.stdout == (CORPUS / "constructed/hccn_hccs_ping_busy.txt").read_text() and toolparse.busy(first.stdout)
    second = run(args, base_env(tmp_path))  # the same fault: the count goes on
    assert not toolparse.busy(second.stdout)
    toolparse.ping(second.stdout)  # a summary the reader can read, whatever the loss on this host


def test_a_plane_check_error_fails_the_ping_reader(tmp_path):
    done = tool(tmp_path, HCCN_TOOL, "-i", "0", "-hccs_ping", "-g", "address", "192.1.3.198", "cnt", "1",
                platform="A3", faults={"devices": {"0": {"hccs_plane": "0x2"}}})
    assert toolparse.ping(done.stdout).plane_errors == ("0x2",)


# The CANN hccn_tool manual's -vnic example ("hccn_tool -g -vnic -i 0", cann/driver docs), verbatim
MANUAL_VNIC = "vnic link status: UP\nvnic ipaddr: 192.168.2.199\nvnic netmask: 255.255.255.0\n"


def test_the_vnic_answer_reads_like_the_manual_and_keeps_its_device_octets(tmp_path):
    """Same fields as the manual's real answer; device 0 ends in .2.199 there and on the stand-in (the
    second octet is the server in its super pod: 1 here, a value the manual's example does not show)."""
    sim = toolparse.vnic(tool(tmp_path, HCCN_TOOL, "-i", "0", "-vnic", "-g", platform="A3").stdout)
    ref = toolparse.vnic(MANUAL_VNIC)
    assert (sim.link, sim.netmask, sim.usable) == (ref.link, ref.netmask, ref.usable)
    assert sim.address.split(".")[2:] == ref.address.split(".")[2:] == ["2", "199"]
