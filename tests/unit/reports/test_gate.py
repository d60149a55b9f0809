"""Verdicts under the gate policy, on a real sim run's results (fixtures/release/run-k3_a3_mixed)."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from k3lab.model import policy
from k3lab.reports import gate, releasereport

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"
EFF = policy.load().for_scenario("k3_a3_mixed")
NPU = "conformance/test_npu.py::test_npu_smi_devices_healthy[node1]"


@pytest.fixture
def run(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(FIX, dst)
    return dst


def _edit(run: Path, nodeid: str, **row) -> None:
    path = run / "conformance-results.json"
    doc = json.loads(path.read_text())
    hit = [t for t in doc["tests"] if t["nodeid"] == nodeid]
    assert hit, nodeid
    hit[0].update(row)
    path.write_text(json.dumps(doc))


def test_healthy_run_passes_with_versions_and_deviations():
    v = gate.evaluate_run(EFF, FIX)
    assert v.verdict == "PASS", v.reasons
    areas = v.areas()
    assert areas["versions"] == "pass" and areas["deviations"] == "pass" and areas["npu"] == "pass"
    assert areas["perf"] == "warn"  # opt-in, not requested: non-blocking
    assert v.versions["vllm_ascend"] == "0.23.0"


def test_a_failed_blocking_check_fails_and_names_scenario_and_check(run):
    _edit(run, NPU, outcome="failed", message="node1: device 3 health Alarm")
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "FAIL"
    assert v.reasons == [f"k3_a3_mixed: {NPU}: node1: device 3 health Alarm"]


def test_a_skipped_blocking_check_is_incomplete_not_pass(run):
    _edit(run, NPU, outcome="skipped", message="npu-smi timed out")
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE"
    assert "skipped, not a listed not-applicable reason: npu-smi timed out" in v.reasons[0]


def test_a_not_applicable_skip_still_passes(run):
    _edit(run, "conformance/test_service.py::test_api_key_enforced[node0:8000]",
          outcome="skipped", message="no API key configured (K3LAB_API_KEY): every API is open, as the guides warn")
    assert gate.evaluate_run(EFF, run).verdict == "PASS"


def test_an_errored_blocking_check_is_never_a_pass(run):
    _edit(run, NPU, outcome="error", message="fixture 'hosts' failed: docker exec timed out",
          properties={"kind": "kit", "conformance.id": "npu.test_npu_smi_devices_healthy",
                      "conformance.must": "npu-smi info MUST list ..."})
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and "errored" in v.reasons[0]


def test_an_environment_failure_is_incomplete(run):
    _edit(run, NPU, outcome="failed", message="no npu-smi",
          properties={"kind": "environment", "conformance.id": "npu.test_npu_smi_devices_healthy",
                      "conformance.must": "MUST"})
    assert gate.evaluate_run(EFF, run).verdict == "INCOMPLETE"


def test_a_warning_check_failing_does_not_fail(run):
    waive = [policy.MustWaiver(check="npu.test_npu_smi_devices_healthy", reason="lab without health alarms wired")]
    eff = policy.Effective.merge("k3_a3_mixed", policy.load().defaults,
                                 policy.ScenarioPolicy(checks={"npu.*": "warn"}, waive_must=waive))
    _edit(run, NPU, outcome="failed", message="Alarm")
    v = gate.evaluate_run(eff, run)
    assert v.verdict == "PASS" and v.areas()["npu"] == "warn"


def test_wrong_guide_version_fails_and_missing_versions_are_incomplete(run):
    doc = json.loads((run / "versions.json").read_text())
    doc["summary"]["vllm_ascend"] = "0.30.0"
    (run / "versions.json").write_text(json.dumps(doc))
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "FAIL" and "vllm_ascend is 0.30.0, the policy expects 0.23.0" in v.reasons[0]
    (run / "versions.json").unlink()
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and "no versions.json" in v.reasons[0]


def _versions(run: Path, edit) -> None:
    doc = json.loads((run / "versions.json").read_text())
    edit(doc)
    (run / "versions.json").write_text(json.dumps(doc))


def test_nodes_that_did_not_answer_make_versions_incomplete(run):
    """#35: three of four nodes unanswered still read PASS (the summary is of the one that answered)."""
    def edit(doc):
        for n in ("node1", "node2", "node3"):
            del doc["nodes"][n]
        doc["unanswered"] = {n: f"{n} (unix:///var/run/docker.sock): no answer within 60 s" for n in ("node1", "node2", "node3")}
    _versions(run, edit)
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE", v.reasons
    assert any("versions.vllm_ascend" in r and "3 of 4 node(s)" in r and "node1" in r for r in v.reasons), v.reasons


def test_a_plan_node_missing_from_versions_json_is_unanswered(run):
    _versions(run, lambda doc: doc["nodes"].pop("node3"))
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and any("node3" in r for r in v.reasons), v.reasons


def test_a_node_that_answered_without_the_component_is_not_read(run):
    _versions(run, lambda doc: doc["nodes"]["node2"].update(vllm_ascend=None))
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "INCOMPLETE" and any("node2" in r and "vllm_ascend" in r for r in v.reasons), v.reasons


@pytest.mark.parametrize("found", ["0.23.0.post1", "0.23.0+fork", "1!0.23.0"])
def test_a_version_that_only_starts_like_the_pin_fails(run, found):
    def edit(doc):
        doc["summary"]["vllm_ascend"] = found
        for n in doc["nodes"].values():
            n["vllm_ascend"] = found
    _versions(run, edit)
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "FAIL" and f"vllm_ascend is {found}, the policy expects 0.23.0" in v.reasons[0]


def test_a_declared_range_accepts_a_patch_build(run):
    def edit(doc):
        doc["summary"]["vllm_ascend"] = "0.23.0.post1"
        for n in doc["nodes"].values():
            n["vllm_ascend"] = "0.23.0.post1"
    _versions(run, edit)
    pol = policy.parse("defaults:\n  versions:\n    - {component: vllm_ascend, expect: '>=0.23.0,<0.23.1', "
                       "reason: the fix releases of 0.23.0}\n").over(policy.load())
    assert gate.evaluate_run(pol.for_scenario("k3_a3_mixed"), run).verdict == "PASS"


def test_an_unaccepted_deviation_fails(run):
    plan = json.loads((run / "plan.json").read_text())
    plan["deviations"].append({"id": "new-thing", "scope": "seed", "what": "a new flag", "why": "?"})
    (run / "plan.json").write_text(json.dumps(plan))
    v = gate.evaluate_run(EFF, run)
    assert v.verdict == "FAIL" and "deviation new-thing is not accepted" in v.reasons[0]


@pytest.mark.parametrize("status, verdict", [("failed", "FAIL"), ("up", "INCOMPLETE")])
def test_no_results(run, status, verdict):
    (run / "conformance-results.json").unlink()
    (run / "run-state.json").write_text(json.dumps({"run": "x", "status": status}))
    v = gate.evaluate_run(EFF, run, cycle_note="stage workers: p0 exited")
    assert v.verdict == verdict and "stage workers: p0 exited" in v.reasons[0]


def test_overall():
    v = lambda x: gate.Verdict("s", x, [], [])  # noqa: E731
    assert gate.overall([v("PASS"), v("INCOMPLETE"), v("FAIL")]) == "FAIL"
    assert gate.overall([v("PASS"), v("INCOMPLETE")]) == "INCOMPLETE"
    assert gate.overall([v("PASS")]) == "PASS" and gate.overall([]) == "INCOMPLETE"


HOSTILE = "<script>alert(1)</script>|*x*"


def test_release_report_escapes_and_junit_parses(run, tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_API_KEY", "sk-SECRET")
    _edit(run, NPU, outcome="failed", message=f"{HOSTILE} token sk-SECRET")
    v = gate.evaluate_run(EFF, run)
    doc = {"schema": 1, "kind": "k3lab-release", "k3lab": "0", "target": "sim", "policy": "default",
           "started": "t", "finished": "t", "host": {"load": "1 1 1", "cpus": 2}, "jobs": 2, "live": True,
           "injected": {}, "timings": {"total_s": 1, "static_s": 0.1, "live_s": 1, "sum_of_cycles_s": 2},
           "cycles": {}, "overall": gate.overall([v]), "scenarios": [v.to_json()]}
    paths = releasereport.write_all(tmp_path, doc)
    html = paths["html"].read_text()
    assert "<script>alert" not in html and "&lt;script&gt;" in html and "sk-SECRET" not in html
    assert "FAIL" in html and "k3_a3_mixed" in html
    text = paths["md"].read_text()
    assert "<script>" not in text and "sk-SECRET" not in text and "**FAIL**" in text
    root = ET.parse(paths["junit"]).getroot()
    failures = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failures == [NPU] and root.get("failures") == "1"


def _fail_every_check(run: Path) -> None:
    path = run / "conformance-results.json"
    doc = json.loads(path.read_text())
    for t in doc["tests"]:
        t.update(outcome="failed", message="broken")
    path.write_text(json.dumps(doc))


def test_a_policy_that_ignores_every_must_never_turns_failures_into_pass(run):
    """#35: must: ignore, other: ignore (not refused when built in code) judged a run whose every check failed PASS."""
    _fail_every_check(run)
    pol = policy.parse("defaults: {must: ignore, other: ignore, checks: {'*': ignore}}\n").over(policy.load())
    v = gate.evaluate_run(pol.for_scenario("k3_a3_mixed"), run)
    assert v.verdict == "FAIL" and "waive_must does not name it" in next(i.why_level for i in v.items if i.area == "npu")


def test_a_pass_with_waived_must_checks_says_so(run):
    _edit(run, NPU, outcome="failed", message="Alarm")
    pol = policy.parse("defaults:\n  checks: {'npu.*': warn}\n  waive_must:\n    - {check: npu.test_npu_smi_devices_healthy, "
                       "reason: no health alarms wired on this rack}\n").over(policy.load())
    v = gate.evaluate_run(pol.for_scenario("k3_a3_mixed"), run)
    assert (v.verdict, v.label) == ("PASS", "PASS with 1 waived MUST checks")
    assert v.waived_must() == ["npu.test_npu_smi_devices_healthy: no health alarms wired on this rack"]
    assert v.to_json()["label"] == "PASS with 1 waived MUST checks"
    assert gate.evaluate_run(EFF, FIX).label == "PASS"  # the default waives nothing


WAIVER = ("schema: 1\ndefaults:\n  checks: {'npu.*': warn}\n  waive_must:\n"
          "    - {check: npu.test_npu_smi_devices_healthy, reason: no health alarms wired on this rack}\n")
LABEL = "PASS with 1 waived MUST checks"


def test_every_report_says_pass_with_waived_must_checks(run, tmp_path, capsys):
    """#35: the waived PASS reads the same in summary.md, report.html, gate.json, k3lab report's line,
    release.json/release.md/release.html and the release's verdict line."""
    from k3lab.cli.main import main
    from k3lab.tools import release

    _edit(run, NPU, outcome="failed", message="Alarm")
    pol_file = tmp_path / "lab.yaml"
    pol_file.write_text(WAIVER)
    assert main(["report", str(run), "--policy", str(pol_file)]) == 0
    out = capsys.readouterr().out
    assert f"{LABEL} k3_a3_mixed" in out and "waived MUST check npu.test_npu_smi_devices_healthy" in out, out
    assert f"k3_a3_mixed: {LABEL}" in (run / "summary.md").read_text()
    assert f"**{LABEL}**" in (run / "summary.md").read_text()
    assert LABEL in (run / "report.html").read_text()
    assert json.loads((run / "gate.json").read_text())["label"] == LABEL
    v = gate.evaluate_run(policy.load(pol_file).for_scenario("k3_a3_mixed"), run)
    doc = {"schema": 1, "kind": "k3lab-release", "k3lab": "0", "target": "sim", "policy": str(pol_file),
           "started": "t", "finished": "t", "host": {"load": "1 1 1", "cpus": 2}, "jobs": 2, "live": True,
           "injected": {}, "timings": {"total_s": 1, "static_s": 0.1, "live_s": 1, "sum_of_cycles_s": 2},
           "cycles": {}, "overall": gate.overall([v]), "overall_label": gate.overall_label([v]),
           "scenarios": [v.to_json()]}
    assert doc["overall_label"] == LABEL
    out_dir = tmp_path / "rel"
    out_dir.mkdir()
    paths = releasereport.write_all(out_dir, doc)
    md_text, html = paths["md"].read_text(), paths["html"].read_text()
    assert md_text.startswith(f"# k3lab release: {LABEL}") and f"**{LABEL}**" in md_text
    assert "no health alarms wired on this rack" in md_text and html.count(LABEL) >= 2
    release._print_summary(doc, out_dir)
    assert f"release {LABEL}" in capsys.readouterr().out
