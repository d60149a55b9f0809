"""#37 item 2: a failed run's report fills every failure cell and marks every node a failure or the diagnosis
names; ``k3lab report`` prints the verdict and exits by it.

The failed run is the healthy fixture run (fixtures/release/run-k3_a3_mixed) with two checks failed as a real
run fails them: the cross-node pings by a plain assert naming node0 and node1 devices (no node of its own, no
evidence fields), and a product check by a plain assert naming node1; and an HCCL link timeout in node2's log,
which the diagnosis names. node3 is named by nothing and stays unmarked.
"""
from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from k3lab.reports import failures, report, runreports

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"
LOG = Path(__file__).resolve().parents[2] / "fixtures" / "failure_logs" / "hccl-link-timeout" / "1.log"
PING = ("unreachable device pairs: node0 device 3 -> node1 device 5 (-hccs_ping 192.168.1.5): expected 0.00% loss "
        "and L1 plane check result 0x0, seen 100.00% loss [rotation r=3]. Check the device links and switch ports "
        "of both ends, /etc/hccn.conf, and the super pod ids (npu-smi info -t spod-info)")
SERVE = "assert 503 == 200: node1:8000 answered 503 to /v1/completions"


def make_failed_run(dest: Path, ping_only: bool = False) -> Path:
    run = dest / "run-failed"
    shutil.copytree(FIXTURE, run)
    doc = json.loads((run / "conformance-results.json").read_text())
    for t in doc["tests"]:
        if t["id"] == "hccl.test_cross_node_reachability":
            t.update(outcome="failed", message=PING, properties={**t["properties"], "kind": "environment"})
        elif t["id"] == "request-paths.test_every_api_engine_serves" and not ping_only:
            t.update(outcome="failed", message=SERVE, properties={**t["properties"], "kind": "product"})
    doc["exitstatus"] = 1
    (run / "conformance-results.json").write_text(json.dumps(doc))
    (run / "evidence" / "node2").mkdir(parents=True)
    shutil.copy(LOG, run / "evidence" / "node2" / "vllm.log")
    return run


class _Dom(HTMLParser):
    """What the assertions read from report.html: the failures table's cells and the picture's node boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[tuple[str, str]] = []  # (column class, text) of the failures table
        self.boxes: dict[str, str] = {}  # node -> class of its group
        self._cell: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td" and (a.get("class") or "").startswith("f-"):
            self._cell, self._text = a["class"][2:], []
        if tag == "g" and "node" in (a.get("class") or "").split():
            self.boxes[a["data-node"]] = a["class"]

    def handle_data(self, data):
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell, "".join(self._text).strip()))
            self._cell = None


def _dom(run: Path) -> _Dom:
    dom = _Dom()
    dom.feed((run / "report.html").read_text())
    return dom


def test_a_failed_runs_report_has_no_empty_failure_cell_and_marks_the_named_nodes(tmp_path):
    run = make_failed_run(tmp_path)
    runreports.rebuild(run)
    dom = _dom(run)
    assert len(dom.cells) == 2 * len(failures.COLUMNS)
    assert all(text for _, text in dom.cells), dom.cells
    cells = dict(dom.cells[:len(failures.COLUMNS)])  # the pings: their facts, from the run, not invented
    assert cells["expected"].startswith("Every device MUST reach a peer device")  # the MUST the run recorded
    assert cells["actual"].startswith("unreachable device pairs: node0 device 3")
    assert cells["where"] == "node0 (address 172.28.0.11): device 3; node1 (address 172.28.0.12): device 5"
    assert "diagnosis: hccl-link-timeout on node2" in cells["cause"] and "not on this failure's nodes" in cells["cause"]
    assert cells["remedy"].startswith("check the named pair's path")  # the check registry's remedy
    assert {n: c.split()[-1] for n, c in dom.boxes.items()} == {"node0": "fail", "node1": "fail", "node2": "fail",
                                                               "node3": "pass"}
    md = (run / "summary.md").read_text()
    assert "- where: node0 (address 172.28.0.11): device 3" in md and "- remedy: check the named pair" in md


def test_a_value_the_run_lacks_says_not_recorded():
    t = {"nodeid": "conformance/x.py::test_y", "outcome": "error", "node": None, "message": "", "properties": {}}
    row = failures.row(t, {"node0": {"name": "node0"}}, None)
    assert all(row.values()) and row.actual.startswith("not recorded") and row.where.startswith("deployment-wide")
    assert row.cause.startswith("not recorded: no diagnosis") and row.remedy.startswith("not recorded")


def test_evidence_fields_win_over_what_the_report_derives():
    props = {"what": "NPUs", "expected": ">= 16", "actual": "15", "where": "node1: npu-smi info", "cause": "a die is gone",
             "remedy": "reseat it", "kind": "environment"}
    t = {"nodeid": "conformance/test_npu.py::test_npu_smi_devices_healthy[node1]", "outcome": "failed", "node": "node1",
         "message": "NPUs: expected ...", "properties": props, "id": "npu.test_npu_smi_devices_healthy"}
    row = failures.row(t, {"node1": {"name": "node1"}}, None)
    assert row.values() == [props[c] for c in failures.COLUMNS] and row.nodes == ["node1"]


def test_node_names_match_whole_names_only():
    assert failures.named_nodes("p10 device 2 -> p1 device 4; d0", ["p1", "p10", "d0", "d"]) == \
        {"p1": ["4"], "p10": ["2"], "d0": []}


@pytest.mark.parametrize("make, code, word", [
    (lambda tmp: make_failed_run(tmp), 1, "FAIL"),
    (lambda tmp: make_failed_run(tmp, ping_only=True), 3, "INCOMPLETE"),  # an environment failure: not judged
    (lambda tmp: shutil.copytree(FIXTURE, tmp / "ok"), 0, "PASS"),
])
def test_report_prints_the_verdict_and_exits_by_it(tmp_path, capsys, make, code, word):
    from k3lab.cli.main import main

    run = Path(make(tmp_path))
    assert main(["report", str(run)]) == code
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"{word} k3_a3_mixed"), out
    assert [line.split(":")[0] for line in out[:3]] == ["summary", "html", "gate"]


def test_the_report_html_of_a_failed_run_is_readable_by_report_load(tmp_path):
    # the failed run stays a valid run directory for every other reader
    run = make_failed_run(tmp_path)
    assert report.load(run).count("failed") == 2
