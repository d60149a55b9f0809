"""Every reader the checks use, over every sample of tests/corpus (real output with its source, and
labelled constructed variants), against the result the sample's entry says a correct reader gives."""
from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from k3lab.conform import longparse, memcache, toolparse
from k3lab.launch import metrics, versions

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
SAMPLES = yaml.safe_load((CORPUS / "corpus.yaml").read_text())["samples"]


def _probe(section: str, text: str) -> dict:
    return versions.parse_probe(f"{versions.MARK}{section}\n{text}{versions.MARK}end\n")


def _npu_smi(text: str) -> dict:
    info = toolparse.npu_smi_info(text)
    head = "".join(text.splitlines(keepends=True)[:4])  # what the versions probe reads (head -n 4)
    assert _probe("npu-smi", head)["npu_smi"] == (info.version if "npu-smi" in head else None)
    assert longparse.hbm_usage(text) == [c.hbm for c in info.chips if c.hbm]
    return {"version": info.version, "healths": info.healths, "hbm": [list(c.hbm) for c in info.chips if c.hbm],
            "processes": len(info.processes), "unparsed": len(info.unparsed)}


def _address(a: toolparse.Address) -> dict:
    return {"address": a.address, "netmask": a.netmask, "link": a.link}


def _ping(text: str) -> dict:
    p = toolparse.ping(text)
    return {"transmitted": p.transmitted, "received": p.received, "loss": p.loss,
            "plane_errors": list(p.plane_errors), "ok": p.ok}


READERS = {
    "npu_smi_info": _npu_smi,
    "link": toolparse.link,
    "net_health": toolparse.net_health,
    "ip": lambda t: _address(toolparse.ip(t)),
    "vnic": lambda t: _address(toolparse.vnic(t)),
    "tls": lambda t: asdict(toolparse.tls(t)),
    "ping": _ping,
    "busy": toolparse.busy,
    "spod_info": toolparse.spod_info,
    "driver_version": lambda t: _probe("driver", t)["driver"],
    "cann_version": lambda t: _probe("cann", t)["cann"],
    "memcache_health": lambda t: memcache.health_ok(200, t),
    "lldp_ifname": toolparse.lldp_ifname,
    "netdetect": toolparse.netdetect,
    "gateway": toolparse.gateway,
}


def _logged_lines(text: str) -> str:
    """A tool's output as another program logged it: ``... label: ['line\\n', 'line\\n']`` (the repr of
    ``readlines()``). The sample keeps the log line verbatim; the reader gets the lines it held."""
    found = re.search(r": (\[.*\])$", text.strip())
    assert found, "a logged-lines sample ends with a Python list of lines"
    lines = ast.literal_eval(found.group(1))
    assert isinstance(lines, list) and all(isinstance(ln, str) for ln in lines)
    return "".join(lines)


DECODE = {"logged-lines": _logged_lines}


def _sample_text(sample: dict) -> str:
    text = (CORPUS / sample["file"]).read_text()
    return DECODE[sample["decode"]](text) if "decode" in sample else text


@pytest.mark.parametrize("sample", SAMPLES, ids=[s["file"] for s in SAMPLES])
def test_reader_reports_the_ground_truth(sample):
    text = _sample_text(sample)
    if sample["reader"] == "metrics":  # the Prometheus reader of gates and checks, per metric named
        assert {name: metrics.total(text, name) for name in sample["expect"]} == sample["expect"]
        return
    read = READERS[sample["reader"]]
    if sample["expect"] == {"unparsed": True}:
        with pytest.raises(toolparse.Unparsed):
            read(text)
    else:
        assert read(text) == sample["expect"]


def test_every_sample_is_sourced_and_every_file_listed():
    for s in SAMPLES:
        assert s["source"], s["file"]
        assert s["real"] is False or s["source"].startswith("https://"), s["file"]
        assert not s["real"] or not s["source"].startswith("constructed"), s["file"]
    listed = {s["file"] for s in SAMPLES}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.txt")}
    assert listed == on_disk


def test_real_samples_cover_the_tools_and_platforms():
    # issue #24's bar: at least 40 real, sourced samples, 10 of npu-smi and 15 of hccn_tool
    real = [s for s in SAMPLES if s["real"]]
    by_tool = Counter(s["file"].split("/", 1)[0] for s in real)
    counts = f"real {len(real)}, npu-smi {by_tool['npu_smi']}, hccn_tool {by_tool['hccn_tool']} ({dict(by_tool)})"
    assert len(real) >= 40, counts
    assert by_tool["npu_smi"] >= 10, counts
    assert by_tool["hccn_tool"] >= 15, counts
    platforms = {s.get("platform") for s in real if s["reader"] == "npu_smi_info"}
    assert {"A2", "A3", "310P", "310B"} <= platforms
    drivers = {s["driver"][:2] for s in real if s["reader"] == "npu_smi_info" and s["driver"][:2].isdigit()}
    assert {"23", "24", "25", "26"} <= drivers


@pytest.mark.parametrize("state", toolparse.NET_HEALTH)
def test_all_ten_net_health_states_are_read_and_only_success_is_healthy(state):
    # constructed from hccn_tool's g_net_health_status[] table (ascend-components.md 3.2)
    assert toolparse.net_health(f"net health status: {state}\n") == state


@pytest.mark.parametrize("text", ["", "link status:", "link status: UP\nlink status: DOWN", "Segmentation fault"])
def test_a_link_answer_the_reader_cannot_read_is_unparsed(text):
    with pytest.raises(toolparse.Unparsed):
        toolparse.link(text)


@pytest.mark.parametrize("value", ["192.168.1.1; reboot", "$(id)", "256.1.1.1", "1.2.3", "", "192.168.1.1 x"])
def test_an_address_that_is_not_ipv4_never_leaves_the_reader(value):
    with pytest.raises(toolparse.Unparsed):
        toolparse.vnic(f"vnic link status: UP\nvnic ipaddr: {value}\nvnic netmask: 255.255.255.0\n")
    with pytest.raises(toolparse.Unparsed):
        toolparse.ip(f"ipaddr:{value}\nnetmask:255.255.255.0\n")


@pytest.mark.parametrize("summary", [
    "3 packets transmitted, 4 received, 0.00% packet loss",   # more received than sent
    "3 packets transmitted, 3 received, 150.00% packet loss",  # loss outside 0-100 %
    "3 packets transmitted, 3 received, .% packet loss",       # no number
    "3 packets transmitted, 3 received, 0.0.0% packet loss",   # not one number
])
def test_a_ping_summary_out_of_its_domain_is_unparsed_never_a_result(summary):
    # variants of the real summary lines in tests/corpus/hccn_tool/ping_*.txt, garbled
    with pytest.raises(toolparse.Unparsed):
        toolparse.ping(f"device 0 PING 10.10.100.10\n{summary}\n")


def test_a_ping_loop_over_several_devices_is_unparsed_not_the_first_answer():
    # the guides' loop (for i in {0..7}; do hccn_tool -i $i -ping -g address A; done) prints one
    # summary per device, as in the real examples; a reader of one device's answer refuses it
    text = (CORPUS / "hccn_tool/ping_ok_a2_mindie_doc.txt").read_text()
    with pytest.raises(toolparse.Unparsed, match="several ping summaries"):
        toolparse.ping(text + text.replace("device 0", "device 1"))


def test_an_hbm_usage_above_its_total_leaves_the_row_unread():
    # the real A2 row of tests/corpus/npu_smi/a2_910b2_25.0.rc1.1_underload_issue1715.txt, with the
    # used HBM pushed above the total: read as unparsed output, never as a usage to report
    text = (CORPUS / "npu_smi/a2_910b2_25.0.rc1.1_underload_issue1715.txt").read_text()
    info = toolparse.npu_smi_info(text.replace("45756/ 65536", "75756/ 65536"))
    assert len(info.unparsed) == 1 and "75756/ 65536" in info.unparsed[0]
    assert [c.hbm for c in info.chips] == [None, (45753, 65536)]
