"""Not-applicable skips by reason id (#31): the gate reads a row's na_reason, never its message, and
results recorded before ids keep their verdicts (fixtures/release/run-k3_a3_mixed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k3lab.model import policy
from k3lab.reports import gate

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"
EFF = policy.load().for_scenario("k3_a3_mixed")
PROXY = "conformance/test_service.py::test_proxy_answers"
NPU = "conformance/test_npu.py::test_npu_smi_devices_healthy[node1]"


@pytest.fixture
def run(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(FIX, dst)
    return dst


def _edit(run: Path, nodeid: str, **row) -> None:
    """A row as the plugin now writes it: the reason id as na_reason and as the conformance.na property."""
    path = run / "conformance-results.json"
    doc = json.loads(path.read_text())
    hit = [t for t in doc["tests"] if t["nodeid"] == nodeid]
    assert hit, nodeid
    hit[0].update(row)
    if "na_reason" in row:
        hit[0]["properties"] = {**hit[0]["properties"], "conformance.na": row["na_reason"]}
    path.write_text(json.dumps(doc))


def _item(v: gate.Verdict, key: str) -> gate.Item:
    return next(i for i in v.items if i.key == key)


def test_the_fixture_run_keeps_its_verdict_and_its_not_applicable_items():
    """Recorded before reasons had ids (no na_reason): the messages give them, as the old regexes did."""
    v = gate.evaluate_run(EFF, FIX)
    assert v.verdict == "PASS", v.reasons
    na = sorted({i.id for i in v.items if i.status == "na"})
    assert na == ["external-cache.test_external_cache_hits_on_repeated_prefix", "external-cache.test_pool_hits_across_engines",
                  "external-cache.test_pool_stores_blocks", "metaservice.test_metaservice_capacity",
                  "models.test_proxy_answers", "ranks-ports.test_planned_ports_listen",
                  "request-paths.test_decode_pulls_kv_from_every_prefill", "request-paths.test_proxy_reaches_every_engine",
                  "security.test_api_key_enforced"]
    # the opt-in modules not requested are not "not applicable": non-blocking warnings, as before
    assert {i.status for i in v.items if i.area in ("perf", "accuracy")} == {"incomplete"}


def test_the_reason_id_decides_not_the_message(run):
    _edit(run, PROXY, na_reason="no-proxy", message="this scenario was rendered without a PD proxy")
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "PASS" and _item(v, PROXY).status == "na"


def test_a_message_that_reads_like_a_reason_is_not_one_when_the_id_differs(run):
    _edit(run, PROXY, na_reason="no-pool")  # message still "no proxy in this scenario"
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and _item(v, PROXY).status == "incomplete"


def test_a_could_not_check_reason_stays_incomplete(run):
    _edit(run, PROXY, na_reason="pool-unproven", message="no dev mode, and the pool cannot hold the fill")
    assert gate.evaluate_run(EFF, run).verdict == "INCOMPLETE"


def test_a_reason_of_another_check_does_not_apply(run):
    _edit(run, NPU, outcome="skipped", na_reason="no-proxy", message="no proxy in this scenario")
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and "not a listed not-applicable reason" in _item(v, NPU).message


def test_junit_rows_carry_the_reason_as_a_property(run):
    doc = json.loads((run / "conformance-results.json").read_text())
    row = next(t for t in doc["tests"] if t["nodeid"] == PROXY)
    row["properties"]["conformance.na"] = "no-proxy"
    row["message"] = "reworded"
    (run / "conformance-results.json").write_text(json.dumps(doc))
    assert _item(gate.evaluate_run(EFF, run), PROXY).status == "na"


def test_a_deprecated_regex_policy_still_judges_old_and_new_rows(run):
    old = policy.parse("defaults: {not_applicable: [{check: 'models.*', reason: '^no proxy in this scenario$'}]}\n")
    eff = old.for_scenario("k3_a3_mixed")
    assert _item(gate.evaluate_run(eff, FIX), PROXY).status == "na"
    _edit(run, PROXY, na_reason="no-proxy")
    assert _item(gate.evaluate_run(eff, run), PROXY).status == "na"
