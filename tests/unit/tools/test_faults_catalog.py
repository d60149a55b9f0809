"""The fault catalog's shape: what the live runner relies on, without Docker."""
from __future__ import annotations

import json

from k3lab.tools import faults


def test_every_live_fault_names_specific_checks():
    for f in faults.LIVE:
        # an empty expectation is a negative control (a healthy variant that must fail nothing): it
        # says so in its mode
        assert f.expect or "healthy" in f.mode.lower(), f"{f.id}: no expected check and not a healthy control"
        if any(e.startswith("gate:") for e in f.expect):
            assert len(f.message.strip()) >= 12 and f.message.lower() not in {"exited", "failed", "error", "timed out"}, \
                f"{f.id}: a gate fault needs the specific message the gate must show, not {f.message!r}"


def test_reverts_undo_on_the_injected_nodes():
    for f in faults.LIVE:
        if f.revert:
            assert f.running, f"{f.id}: revert without an injection"
            assert {n for n, _ in f.revert} <= {n for n, _ in f.running}, f"{f.id}: revert on another node"


def test_service_rows_have_off_sample_variants():
    ids = set(faults.CATALOG)
    assert {"L-KV-PULL-D2", "L-KV-PULL-D3", "L-HASH-SEED", "L-HASH-SEED-P6"} <= ids


def test_markdown_table_counts_rows():
    rows = [{"fault": "A", "kind": "live", "scenario": "s", "mode": "m", "expected": ["t"], "observed": ["t"],
             "verdict": "ok"},
            {"fault": "B", "kind": "live", "scenario": "s", "mode": "m", "expected": [], "observed": ["x"],
             "verdict": "MISMATCH"}]
    text = faults.markdown(rows, 12.3)
    assert text.startswith("# k3lab fault matrix: 1/2 rows as intended, wall 12 s")
    assert "| B | live | s | m | (none) | x | MISMATCH |" in text


# Checks no live fault row can fail, and why (kept short: each entry is a gap to close).
NO_LIVE_FAULT = {
    # compares the kit's own render with golden/, no node involved: the same drift fails
    # tests/unit/render/test_golden.py, and a wrong staged file fails golden.test_staged_artefacts_match_rendered
    "golden.test_rendered_equals_golden",
}


def test_every_live_check_has_a_fault():
    checks = set(faults.live_checks())
    assert "parsers.test_tool_call" in checks and "ranks-ports.test_startup_ports_closed" in checks
    covered = {e.split("[", 1)[0] for f in faults.LIVE for e in f.expect}
    assert checks - covered == NO_LIVE_FAULT, f"checks no live fault fails: {sorted(checks - covered - NO_LIVE_FAULT)}"


def test_coverage_table_splits_on_and_off_sample():
    rows = [{"fault": "BASELINE-s", "kind": "live", "scenario": "s", "mode": "healthy baseline", "expected": [],
             "observed": [], "verdict": "ok"},
            {"fault": "L-X", "kind": "live", "scenario": "s", "mode": "m", "expected": ["test_a[n1]"],
             "observed": ["test_a[n1]"], "verdict": "ok"},
            {"fault": "L-X-OFF", "kind": "live", "scenario": "s", "mode": "m", "expected": ["test_a[n2]"],
             "observed": ["test_a[n2]"], "verdict": "ok"}]
    text = faults.coverage_markdown(rows, ["test_a", "test_b"])
    assert "| test_a | L-X | L-X-OFF | 0 failures on the healthy baselines (s) |" in text
    assert "| test_b | (none) | (none) |" in text


def test_new_rows_of_issue_10_are_in_the_catalog():
    assert {"L-DP-RANKS-SWAPPED", "L-PP-RANKS-SWAPPED", "L-DP-RPC-HELD", "L-DEVICE-ADDR", "L-DEVICE-ADDR-OFF",
            "L-DEVICE-IP-A2", "L-API-KEY-MISSING"} <= set(faults.CATALOG)


def test_a_running_fault_whose_failures_lack_its_message_is_flagged():
    f = faults.Fault("X", "m", "s", frozenset({"t"}), running=[("n", ["true"])], message="specific text")
    assert faults._caught(f, {"t": "AssertionError: specific text here"}) == {"t"}
    assert faults._caught(f, {"t": "AssertionError: something else"}) == {"t", "(no failure says 'specific text')"}
    assert faults._caught(f, {}) == set()


def test_a_suite_that_cannot_start_is_an_environment_error_not_a_traceback(tmp_path, monkeypatch):
    """A conformance run that writes no report (pytest could not start) names the reason."""
    import subprocess

    import pytest

    from k3lab.errors import EnvError
    from k3lab.tools import faults

    def fake_run(cmd, capture_output, timeout):
        return subprocess.CompletedProcess(cmd, 4, b"", b"ImportError while loading conftest\nImportPathMismatchError\n")

    monkeypatch.setattr(faults.subprocess, "run", fake_run)
    with pytest.raises(EnvError, match="did not run .*pytest exit 4.*ImportPathMismatchError"):
        faults.conformance(tmp_path, tmp_path / "none.xml")


def test_every_row_names_check_ids():
    """Fault rows name checks by their registry id (#31), never by a pytest function name: each expected
    entry is a check id (with its [param]), a readiness gate, or a lab row's promise."""
    from k3lab.preflight import registry

    known = registry.by_id()
    loose = [f"{f.id}: {e}" for f in faults.CATALOG.values() for e in f.expect
             if e.split("[", 1)[0] not in known and not e.startswith("gate:") and f.kind != "lab"]
    assert loose == []
    assert not [f.id for f in faults.CATALOG.values() if any(e.startswith("test_") for e in f.expect)]


def test_the_live_comparison_reads_check_ids_from_the_results_file(tmp_path):
    """conformance-results.json rows carry the check id: a failing row's key is id[param], also under
    --dist loadgroup (node ids ending in @group) and for a row without a param."""
    from k3lab.model import checks

    rows = [
        {"nodeid": "conformance/test_npu.py::test_npu_smi_devices_healthy[d1]@d1", "id": "npu.test_npu_smi_devices_healthy",
         "param": None, "outcome": "failed", "message": "d1: device(s) [10] report health ['Alarm']",
         "properties": {"conformance.id": "npu.test_npu_smi_devices_healthy", "actual": "Alarm"}},
        {"nodeid": "conformance/test_npu.py::test_hccn_tls_consistent", "id": "hccl.test_hccn_tls_consistent",
         "param": None, "outcome": "error", "message": "fixture failed", "properties": {}},
        {"nodeid": "conformance/test_service.py::test_health[d0:8000]", "id": "models.test_health", "param": "d0:8000",
         "outcome": "passed", "message": "", "properties": {}},
        {"nodeid": "conformance/test_service.py::test_proxy_answers", "id": "models.test_proxy_answers",
         "outcome": "skipped", "na_reason": "no-proxy", "message": "no proxy in this scenario", "properties": {}},
        {"nodeid": "<collection>", "outcome": "error", "message": "ImportError", "properties": {"kind": "kit"}},
    ]
    path = tmp_path / "conformance-results.json"
    path.write_text(json.dumps({"schema": 1, "tests": rows}))
    failed = checks.failed_checks(path)
    assert set(failed) == {"npu.test_npu_smi_devices_healthy[d1]", "hccl.test_hccn_tls_consistent", "<collection>"}
    assert "report health ['Alarm']" in failed["npu.test_npu_smi_devices_healthy[d1]"]
    assert failed["npu.test_npu_smi_devices_healthy[d1]"].splitlines()[1] == "Alarm"  # evidence properties too
    f = faults.CATALOG["H-NPU-ALARM-OFF"]
    assert faults._row(f, faults._caught(f, {k: v for k, v in failed.items() if k.startswith("npu.")}))["verdict"] == "ok"


def test_the_live_runner_reads_this_runs_results_not_an_older_file(tmp_path, monkeypatch):
    """conformance() removes a previous suite run's results first, then reads what this run wrote."""
    import subprocess

    (tmp_path / "conformance-results.json").write_text(json.dumps({"tests": [
        {"nodeid": "x::test_old", "id": "old.test_old", "outcome": "failed", "message": "stale"}]}))
    row = {"nodeid": "conformance/test_npu.py::test_hccn_links_up[p1]@p1", "id": "hccl.test_hccn_links_up",
           "outcome": "failed", "message": "p1: link DOWN on device(s) [2]", "properties": {}}

    def fake_run(cmd, capture_output, timeout):
        assert not (tmp_path / "conformance-results.json").exists()
        (tmp_path / "conformance-results.json").write_text(json.dumps({"tests": [row]}))
        return subprocess.CompletedProcess(cmd, 1, b"", b"")

    monkeypatch.setattr(faults.subprocess, "run", fake_run)
    assert faults.conformance(tmp_path, tmp_path / "x.xml") == {"hccl.test_hccn_links_up[p1]": "p1: link DOWN on device(s) [2]"}


def test_host_rows_pick_their_stage_by_the_checks_they_expect():
    assert {f.id for f in faults.CATALOG.values() if f.kind == "host" and f.hardware} == {f.id for f in faults.HARDWARE}
    assert {f.id for f in faults.CATALOG.values() if f.kind == "host" and f.lab_preflight} == {"H-SSH-SHELL", "H-SSH-SHELL-OFF"}
