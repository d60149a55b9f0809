"""The per-node NPU checks (conformance/test_npu.py) on answers from the corpus: every variant is
read, every bad one fails naming node and device, and an answer the readers cannot read fails as
"unparsed output", never as healthy."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3lab.conform import nodetools
from k3lab.launch.endpoints import CommandResult
from tests import suite

npu = suite.load("test_npu")
CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def sample(name: str) -> str:
    return (CORPUS / name).read_text()


class _Tools:
    """A node's tool answers: ``answers(device, option) -> text`` and an npu-smi table."""

    def __init__(self, name, answer, table=""):
        self.name, self.answer, self.table = name, answer, table

    def many(self, commands):
        out = {}
        for c in commands:
            m = re.search(r"hccn_tool -i (\d+) (-\w+ -g)", c)
            out[c] = CommandResult(c, 0, self.answer(int(m.group(1)), m.group(2)), "", self.name)
        return out

    def check_output(self, command):
        assert command == "npu-smi info"
        return self.table


def _node(count=2, platform="A2", name="n0"):
    return SimpleNamespace(name=name, platform=platform, device_count=count)


def _check(check, answer, node=None, table=""):
    node = node or _node()
    check(node, {node.name: _Tools(node.name, answer, table)})


def test_links_read_and_a_down_link_names_node_and_device():
    _check(npu.test_hccn_links_up, lambda d, o: sample("hccn_tool/link_up_mindcluster_doc.txt"))
    with pytest.raises(AssertionError, match=r"n0: link DOWN on device\(s\) \[1\]"):
        _check(npu.test_hccn_links_up, lambda d, o: "link status: DOWN\n" if d == 1 else "link status: UP\n")


def test_an_unreadable_answer_fails_as_unparsed_never_as_healthy():
    with pytest.raises(AssertionError, match=r"n0 device 0: hccn_tool -i 0 -link -g: unparsed output"):
        _check(npu.test_hccn_links_up, lambda d, o: "Segmentation fault\n" if d == 0 else "link status: UP\n")


@pytest.mark.parametrize("busy", ["constructed/hccn_busy.txt", "constructed/hccn_hccs_ping_busy.txt"])
def test_an_answer_still_busy_after_the_retries_fails_naming_it(busy):
    with pytest.raises(AssertionError, match=r"n0 device 1: .*still busy after the retries"):
        _check(npu.test_hccn_net_health, lambda d, o: sample(busy) if d == 1 else "net health status: Success\n")


@pytest.mark.parametrize("name", ["hccn_tool/net_health_init_mindcluster_doc.txt",
                                  "hccn_tool/net_health_fault_mindcluster_doc.txt",
                                  "hccn_tool/net_health_socket_failed_mindcluster_fixture.txt"])
def test_every_net_health_state_but_success_fails_with_the_state(name):
    state = sample(name).split(":", 1)[1].strip()
    with pytest.raises(AssertionError, match=rf"n0: net health not Success on device -> state \{{1: '{state}'\}}"):
        _check(npu.test_hccn_net_health, lambda d, o: sample(name) if d == 1 else "net health status: Success\n")


def test_vnic_unset_or_link_down_fails_naming_node_and_device():
    a3 = _node(3, "A3", "d1")
    answers = {0: "constructed/hccn_vnic_up.txt", 1: "constructed/hccn_vnic_unset.txt",
               2: "constructed/hccn_vnic_down_with_address.txt"}
    with pytest.raises(AssertionError) as err:
        _check(npu.test_hccn_device_addresses, lambda d, o: sample(answers[d]), a3)
    assert "d1 device 1: no address (vnic ipaddr 0.0.0.0)" in str(err.value)
    assert "d1 device 2: vnic link DOWN (address 192.1.3.198)" in str(err.value)
    assert "device 0" not in str(err.value)


def test_device_ips_of_the_corpus_pass_and_an_unset_one_fails():
    ips = ["hccn_tool/ip_mindcluster_kgparse_fixture.txt", "hccn_tool/ip_blog_910b_readitlater11547.txt"]
    _check(npu.test_hccn_device_addresses, lambda d, o: sample(ips[d]))
    with pytest.raises(AssertionError, match=r"n0 device 1: no address \(none preset\)"):
        _check(npu.test_hccn_device_addresses,
               lambda d, o: sample(ips[0] if d == 0 else "constructed/hccn_ip_not_preset.txt"))


@pytest.mark.parametrize("name", ["npu_smi/a3_26.0.rc2_116col_issue12980.txt", "npu_smi/a2_910b4_24.1.1_1panel9472.txt",
                                  "npu_smi/a2_910b4-1_25.2.0_masked_busid_hami47.txt"])
def test_npu_smi_tables_of_every_width_are_read(name):
    npu.test_npu_smi_devices_healthy(_node(2), {"n0": _Tools("n0", None, sample(name))})


def test_a_device_in_warning_is_named():
    with pytest.raises(AssertionError, match=r"device\(s\) \[0\] report health \['Warning'\], expected OK \(NPU, chip: \[\(0, 0\)\]\)"):
        npu.test_npu_smi_devices_healthy(_node(2), {"n0": _Tools("n0", None,
                                                                 sample("npu_smi/a2_23.0.5_warning_mindcluster_doc.txt"))})


@pytest.mark.parametrize("name", ["constructed/npu_smi_garbled.txt", "constructed/npu_smi_dcmi_error.txt"])
def test_an_unreadable_npu_smi_table_fails_as_unparsed(name):
    with pytest.raises(AssertionError, match="n0: unparsed output of npu-smi info"):
        npu.test_npu_smi_devices_healthy(_node(2), {"n0": _Tools("n0", None, sample(name))})


def test_tls_in_both_forms_and_the_odd_devices_are_named():
    plan = SimpleNamespace(nodes=[_node(2, name="n0"), _node(2, name="n1")])
    dev_id = sample("constructed/hccn_tls_dev_id.txt")  # switch 0
    device = sample("constructed/hccn_tls_device.txt")  # switch 1, newer wording
    tools = {"n0": _Tools("n0", lambda d, o: dev_id), "n1": _Tools("n1", lambda d, o: device if d == 1 else dev_id)}
    with pytest.raises(AssertionError, match=r"TLS switch differs: 0 on most devices, other on \(node, device\) \[\('n1', 1\)\]"):
        npu.test_hccn_tls_consistent(plan, tools)


def test_the_busy_retry_knows_both_wordings():
    script = nodetools.retrying("hccn_tool -i 0 -hccs_ping -g address 192.1.2.198")
    assert "*'hccn_tool is busy'*" in script
    assert "*'The device is occupied. Please try again later.'*" in script


@pytest.mark.parametrize("name, ok", [("constructed/hccn_hccs_ping_ok.txt", True),
                                      ("constructed/hccn_hccs_ping_plane_error.txt", False),
                                      ("constructed/hccn_ping_loss.txt", False),
                                      ("constructed/hccn_hccs_ping_busy.txt", False),
                                      ("hccn_tool/link_up_mindcluster_doc.txt", False)])
def test_pairs_are_judged_on_loss_plane_check_and_readability(name, ok):
    pairs = {"n0": [(0, "n1", 3, "-hccs_ping", "192.1.2.198")]}
    failures = npu._lossy_pairs(pairs, {"n0": {"0": sample(name)}})
    assert (failures == []) is ok
    if not ok:
        assert failures[0].startswith("n0 device 0 -> n1 device 3 (-hccs_ping 192.1.2.198): ")


class _Npu:
    def __init__(self, table, rc=0):
        self.table, self.rc = table, rc

    def run(self, command):
        assert command == "npu-smi info"
        return CommandResult(command, self.rc, self.table, "", "n")


def test_long_request_evidence_reports_hbm_per_chip_on_every_layout():
    longreq = suite.load("longreq")
    plan = SimpleNamespace(nodes=[_node(name="a5"), _node(name="a3"), _node(name="bad")])
    hosts = {"a5": _Npu(sample("constructed/npu_smi_950_na_busid.txt")),
             "a3": _Npu(sample("npu_smi/a3_116col_processes_nyaterm268.txt")),
             "bad": _Npu("dcmi module initialize failed. ret is -8005\n")}
    hbm = longreq._hbm(hosts, plan)
    assert hbm["a5"] == {"chips": 2, "used_mb": 65705, "total_mb": 131072,
                         "per_chip": [[61609, 65536], [4096, 65536]]}
    assert hbm["a3"]["per_chip"] == [[15503, 65536], [15242, 65536]]
    assert hbm["bad"]["chips"] == 0 and hbm["bad"]["error"].startswith("unparsed output")
