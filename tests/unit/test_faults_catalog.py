"""The fault catalog's shape: what the live runner relies on, without Docker."""
from __future__ import annotations

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
    # tests/unit/test_golden.py, and a wrong staged file fails test_staged_artefacts_match_rendered
    "test_rendered_equals_golden",
}


def test_every_live_check_has_a_fault():
    checks = set(faults.live_checks())
    assert "test_tool_call" in checks and "test_startup_ports_closed" in checks
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
