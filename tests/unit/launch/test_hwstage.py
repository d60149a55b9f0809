"""The hardware stage's verdict: the suite's NPU/HCCN checks, read from their result rows, name node and device."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from k3lab.launch import hwstage, suite

# what the stage's pytest writes (k3lab.conform.plugin); its junit.xml is output only
RESULTS = {"schema": 1, "exitstatus": 1, "tests": [
    {"nodeid": "conformance/test_npu.py::test_npu_smi_devices_healthy[p1]", "outcome": "passed"},
    {"nodeid": "conformance/test_npu.py::test_hccn_links_up[d3]@hw", "outcome": "failed",
     "message": "d3 (10.213.0.18): 15/16 devices answered; expected 'link status: UP', seen {15: 'link status: DOWN'} "
                "(device -> output)\nassert False"},
    {"nodeid": "conformance/test_npu.py::test_hccs_pings[d0]", "outcome": "skipped",
     "message": "hardware stage: held back until the per-node checks pass"}]}


def _write(run_dir: Path, doc: dict | None) -> None:
    if doc is not None:
        (run_dir / "conformance-results.json").write_text(json.dumps(doc))


def test_failures_name_the_check_node_and_device(tmp_path):
    _write(tmp_path, RESULTS)
    assert hwstage.failures(tmp_path) == [
        ("test_hccn_links_up[d3]", "d3 (10.213.0.18): 15/16 devices answered; expected 'link status: UP', seen "
                                   "{15: 'link status: DOWN'} (device -> output)")]
    assert hwstage.held_back(tmp_path) == [
        "test_hccs_pings[d0]: hardware stage: held back until the per-node checks pass"]


def test_unreadable_results_are_no_failures_and_no_pass(tmp_path):
    (tmp_path / "conformance-results.json").write_text("{half")
    assert hwstage.failures(tmp_path) == [] and hwstage.held_back(tmp_path) == []


def _fake_run(doc: dict | None, rc: int):
    def run(argv, **kw):
        assert argv[3].endswith("test_npu.py") and "-n" in argv
        run_dir = Path(next(a for a in argv if a.startswith("--run-dir=")).split("=", 1)[1])
        _write(run_dir, doc)
        return subprocess.CompletedProcess(argv, rc, "out", "err")
    return run


def test_an_older_results_file_never_stands_for_the_stage(tmp_path, monkeypatch):
    _write(tmp_path, RESULTS)  # left by an earlier suite; this stage's pytest died before writing its own
    monkeypatch.setattr(hwstage.subprocess, "run", _fake_run(None, 4))
    with pytest.raises(hwstage.HardwareStageFailed, match="did not run"):
        hwstage.gate(tmp_path, {})


def test_a_failed_check_stops_the_run_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(hwstage.subprocess, "run", _fake_run(RESULTS, 1))
    with pytest.raises(hwstage.HardwareStageFailed) as err:
        hwstage.gate(tmp_path, {})
    assert err.value.exit_code == 1 and "test_hccn_links_up[d3]" in str(err.value) and "nothing was launched" in str(err.value)


def test_checks_that_did_not_run_never_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(hwstage.subprocess, "run", _fake_run(None, 4))
    with pytest.raises(hwstage.HardwareStageFailed, match="did not run"):
        hwstage.gate(tmp_path, {})


def test_passing_checks_let_the_run_proceed(tmp_path, monkeypatch):
    monkeypatch.setattr(hwstage.subprocess, "run", _fake_run({**RESULTS, "exitstatus": 0, "tests": RESULTS["tests"][:1]}, 0))
    timings: dict[str, float] = {}
    hwstage.gate(tmp_path, timings)
    assert "hardware_stage_s" in timings


def test_the_stage_runs_the_suites_own_file():
    argv = suite.hardware_command("/runs/r", "/runs/r/j.xml")
    assert argv[3].endswith("conformance/test_npu.py") and "--run-dir=/runs/r" in argv


def test_what_the_stage_held_back_is_named_beside_the_failures(tmp_path, monkeypatch):
    skipped = [{"nodeid": "conformance/test_npu.py::test_cross_node_reachability", "outcome": "skipped",
                "message": "hardware stage: not run, 1 check(s) failed already and stop the run (the pings take "
                           "minutes on hardware); the suite runs them"},
               {"nodeid": "conformance/test_npu.py::test_spod_info[p1]", "outcome": "skipped",
                "message": "spod-info exists on A3 only"}]
    monkeypatch.setattr(hwstage.subprocess, "run", _fake_run({**RESULTS, "tests": RESULTS["tests"][:2] + skipped}, 1))
    with pytest.raises(hwstage.HardwareStageFailed) as err:
        hwstage.gate(tmp_path, {})
    lines = str(err.value).splitlines()
    assert lines[-1] == ("  (test_cross_node_reachability: hardware stage: not run, 1 check(s) failed already and "
                         "stop the run (the pings take minutes on hardware); the suite runs them)")
    assert "spod-info exists" not in str(err.value) and err.value.failures == [
        ("test_hccn_links_up[d3]", lines[1].split(": ", 1)[1])]


def test_the_stage_is_a_gate_that_stops_at_its_first_verdict():
    assert "--hardware-stage" in suite.hardware_command("/runs/r", "/runs/r/j.xml")


def test_the_stage_names_failed_checks_by_their_id_from_its_results(tmp_path, monkeypatch):
    """The stage's pytest writes conformance-results.json into the run directory: the fault matrix reads
    the failed checks' ids (id[param]) from it, not the JUnit function names."""
    import json

    def run(argv, **kw):
        (tmp_path / "conformance-results.json").write_text(json.dumps({"tests": [
            {"nodeid": "conformance/test_npu.py::test_hccn_links_up[d3]", "id": "hccl.test_hccn_links_up", "param": "d3",
             "outcome": "failed", "message": "d3 (10.213.0.18): 15/16 devices answered", "properties": {}},
            {"nodeid": "conformance/test_npu.py::test_npu_smi_devices_healthy[p1]", "id": "npu.test_npu_smi_devices_healthy",
             "param": "p1", "outcome": "passed", "message": "", "properties": {}}]}))
        return subprocess.CompletedProcess(argv, 1, "out", "err")

    monkeypatch.setattr(hwstage.subprocess, "run", run)
    with pytest.raises(hwstage.HardwareStageFailed) as err:
        hwstage.gate(tmp_path, {})
    assert err.value.checks == [("hccl.test_hccn_links_up[d3]", "d3 (10.213.0.18): 15/16 devices answered")]
    assert [name for name, _ in err.value.failures] == ["test_hccn_links_up[d3]"]  # the message is unchanged
