"""The fault catalog's shape: what the live runner relies on, without Docker."""
from __future__ import annotations

from launchers import faults


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
