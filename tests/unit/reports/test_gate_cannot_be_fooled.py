"""A gate decides on what should have run, and counts only numbers that are measurements (issue #26
item 2); compare and baseline write only where they should (item 5). Offline, on a real sim run's
results (fixtures/release)."""
from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from k3lab.cli.main import main
from k3lab.conform import benchparse, kvvparse
from k3lab.model import numbers, policy
from k3lab.reports import gate
from k3lab.tools import compare

FIX = Path(__file__).resolve().parents[3] / "fixtures"
RUN = FIX / "release" / "run-k3_a3_mixed"
POLICY = policy.load()
EFF = POLICY.for_scenario("k3_a3_mixed")
PERF = "conformance/perf.py::test_bench_requests_succeed"


def _copy(tmp_path: Path, name: str = "run") -> Path:
    dst = tmp_path / name
    shutil.copytree(RUN, dst)
    return dst


def _results(run: Path) -> dict:
    return json.loads((run / "conformance-results.json").read_text())


def _write_results(run: Path, doc: dict) -> None:
    (run / "conformance-results.json").write_text(json.dumps(doc))


def _verdict(run: Path) -> gate.Verdict:
    return gate.evaluate_run(EFF, run)


def test_the_recorded_run_passes():  # the baseline of every case below
    assert _verdict(RUN).verdict == gate.PASS


def test_a_collected_check_without_a_result_is_never_pass(tmp_path):
    run = _copy(tmp_path)
    doc = _results(run)
    doc["collected"] = [t["nodeid"] for t in doc["tests"]]
    dropped = doc["tests"].pop(7)["nodeid"]
    _write_results(run, doc)
    v = _verdict(run)
    assert v.verdict == gate.INCOMPLETE and any("live.missing" in r and dropped in r for r in v.reasons), v.reasons


def test_a_deselected_run_is_never_pass(tmp_path):
    run = _copy(tmp_path)
    doc = _results(run)
    doc["deselected"] = 12
    _write_results(run, doc)
    assert _verdict(run).verdict == gate.INCOMPLETE


@pytest.mark.parametrize("damage", ["missing", "half-written", "not a plan", "another scenario"])
def test_a_missing_or_malformed_plan_is_never_pass(tmp_path, damage):
    run = _copy(tmp_path)
    plan = run / "plan.json"
    if damage == "missing":
        plan.unlink()
    elif damage == "half-written":
        plan.write_text(plan.read_text()[:200])
    elif damage == "not a plan":
        plan.write_text('{"scenario": "k3_a3_mixed"}')
    else:
        plan.write_text(json.dumps({**json.loads(plan.read_text()), "scenario": "a3_pd"}))
    v = _verdict(run)
    assert v.verdict == gate.INCOMPLETE and any("live.plan" in r for r in v.reasons), v.reasons


@pytest.mark.parametrize("damage", ["missing", "half-written"])
def test_a_missing_versions_file_is_never_pass(tmp_path, damage):
    run = _copy(tmp_path)
    if damage == "missing":
        (run / "versions.json").unlink()
    else:
        (run / "versions.json").write_text('{"summary": {"vllm_ascend": "0.2')
    v = _verdict(run)
    assert v.verdict == gate.INCOMPLETE and any("live.versions" in r for r in v.reasons), v.reasons


def test_a_candidate_with_one_of_the_baselines_checks_is_a_regression(tmp_path, capsys):
    good, thin = _copy(tmp_path, "good"), _copy(tmp_path, "thin")
    doc = _results(thin)
    doc["tests"] = doc["tests"][:1]
    _write_results(thin, doc)
    result = compare.compare(compare._side(good, POLICY), compare._side(thin, POLICY), POLICY)
    [row] = result["scenarios"]
    judged = [i for i in _verdict(good).items if i.status not in ("na", "ignored") and i.area not in ("versions", "deviations")]
    assert result["regression"] and len(row["new_failures"]) == len(judged) - 1  # all but the one that ran
    assert all(f["status"] == "incomplete" for f in row["new_failures"])
    assert main(["compare", str(good), str(thin)]) == 1
    assert "missing from B" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", "-3", "true", "1e999"])
def test_a_metric_that_is_no_measurement_never_passes(tmp_path, value, capsys):
    run = _copy(tmp_path)
    doc = _results(run)
    [t] = [t for t in doc["tests"] if t["nodeid"] == PERF]
    t.update(outcome="passed", message="", properties={"conformance.id": "perf.test_bench_requests_succeed",
                                                       "perf.output_throughput": value, "conformance.must": "MUST"})
    _write_results(run, doc)
    v = _verdict(run)
    [item] = [i for i in v.items if i.key == PERF]
    # never a pass and never a number: incomplete, blocking where the policy makes perf block
    assert item.status == "incomplete" and "not a measurement" in item.message and item.metrics == {}
    # the JSON stays JSON: no bare NaN or Infinity
    main(["compare", str(RUN), str(run), "--format", "json"])
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"bare {c} in compare --format json"))


def test_compare_of_releases_with_non_finite_metrics_is_valid_json(tmp_path, capsys):
    sides = []
    for name, value in (("a", 100.0), ("b", float("inf"))):
        v = gate.evaluate_run(EFF, RUN)
        v.items[0].metrics = {"perf.output_throughput": value}
        out = tmp_path / name
        out.mkdir()
        # what another kit or a hand could write (json.dumps writes Infinity unless told not to)
        (out / "release.json").write_text(json.dumps({"schema": 1, "kind": "k3lab-release", "target": "lab",
                                                      "overall": "PASS", "scenarios": [v.to_json()]}))
        sides.append(out)
    code = main(["compare", str(sides[0]), str(sides[1]), "--format", "json"])
    captured = capsys.readouterr()
    assert code == 2 and "Infinity" in captured.err and "Traceback" not in captured.err  # refused on read
    doc = compare.compare({"label": "a", "target": "lab", "scenarios": {"s": {"items": [
        {"key": "k", "id": "k", "level": "block", "status": "pass", "metrics": {"perf.output_throughput": 100.0}}]}}},
        {"label": "b", "target": "lab", "scenarios": {"s": {"items": [
            {"key": "k", "id": "k", "level": "block", "status": "pass",
             "metrics": {"perf.output_throughput": float("inf")}}]}}}, POLICY)
    [m] = doc["scenarios"][0]["metrics"]
    assert doc["regression"] and m["b"] is None and not m["within"]
    json.dumps(doc, allow_nan=False)
    assert "not a number" in compare.text(doc)


# ------------------------------------------------------------------------------ perf and kvv numbers


@pytest.mark.parametrize("metric, value", [("output_throughput", float("inf")), ("output_throughput", float("nan")),
                                           ("output_throughput", True), ("mean_ttft_ms", -5.0),
                                           ("mean_ttft_ms", float("-inf")), ("output_throughput", -1.0)])
def test_gate_perf_fails_numbers_that_are_no_measurement(metric, value):
    [g] = benchparse.gate_perf({metric: value}, {metric: 100.0})
    assert not g.ok


@pytest.mark.parametrize("completed, prompts", [(0, 0), (True, 1), (-1, -1), (16.0, 16)])
def test_a_perf_result_with_no_requests_is_no_pass(completed, prompts):
    gates = benchparse.requests_gates({"completed": completed, "failed": 0}, prompts)
    assert not all(g.ok for g in gates)


@pytest.mark.parametrize("metrics", ['{"output_throughput": NaN}', '{"output_throughput": Infinity}',
                                     '{"output_throughput": true}', '{"mean_ttft_ms": -1}',
                                     '{"output_throughput": 0}', '{"output_throughput": "120"}'])
def test_a_baseline_holds_measurements_only(metrics):
    with pytest.raises(ValueError):
        benchparse.parse_baseline(f'{{"metrics": {metrics}}}')
    with pytest.raises(ValueError):
        benchparse.parse_baseline('{"metrics": {"output_throughput": 1}, "threshold": NaN}')


def _inspect_log(total, completed) -> str:
    return json.dumps({"status": "success", "eval": {"task": "ocrbench", "model": "m"},
                       "results": {"total_samples": total, "completed_samples": completed,
                                   "scores": [{"name": "s", "metrics": {"accuracy": {"name": "accuracy", "value": 0.9}}}]}})


def test_an_inspect_log_with_zero_samples_is_not_a_complete_run():
    assert kvvparse.completion_problems(kvvparse.parse_log(_inspect_log(0, 0))) == ["0 samples: nothing was evaluated"]
    assert kvvparse.completion_problems(kvvparse.parse_log(_inspect_log(10, 10))) == []
    for bad in (True, -1, "10", 1.5):
        with pytest.raises(ValueError, match="not an Inspect log"):
            kvvparse.parse_log(_inspect_log(bad, 0))


def test_non_finite_inspect_scores_do_not_count():
    doc = json.loads(_inspect_log(10, 10))
    doc["results"]["scores"][0]["metrics"]["accuracy"]["value"] = float("nan")
    run = kvvparse.parse_log(json.dumps(doc))
    assert run.metrics == {} and "no metric in the results" in kvvparse.completion_problems(run)
    assert not kvvparse.gate_score("ocrbench", float("nan"), 0.9).ok


def test_eval_header_unpacks_under_a_cap(monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", _inspect_log(1, 1) + " " * 5000)
    monkeypatch.setattr(kvvparse, "HEADER_CAP", 1000)
    with pytest.raises(ValueError, match="1000"):
        kvvparse.header_from_eval_zip(buf.getvalue())


def test_numbers_refuse_what_is_no_number():
    for bad in (float("nan"), float("inf"), True, None, "1", -0.5):
        assert numbers.finite_or_none(bad) is None
    assert numbers.finite_or_none(0) == 0.0 and numbers.count(3, "n") == 3
    with pytest.raises(ValueError):
        numbers.count(True, "n")


# ------------------------------------------------------------------------------------ outputs


def _lab_perf_run(tmp_path: Path, scenario: str | None = None, result: dict | None = None) -> Path:
    run = _copy(tmp_path, "labrun")
    state = json.loads((run / "run-state.json").read_text())
    (run / "run-state.json").write_text(json.dumps({**state, "target": "lab", "scenario": scenario or state["scenario"]}))
    if scenario:
        plan = json.loads((run / "plan.json").read_text())
        (run / "plan.json").write_text(json.dumps({**plan, "scenario": scenario}))
    bench = run / "evidence" / "bench"
    bench.mkdir(parents=True)
    src = FIX / "bench" / "openai-infqps-concurrency1-kimi-k3.1-pro-20260112-101530.json"
    doc = {**json.loads(src.read_text()), **(result or {})}
    (bench / "perf-result.json").write_text(json.dumps(doc))
    return run


def test_baseline_record_never_writes_where_a_crafted_plan_points(tmp_path, capsys, monkeypatch):
    from k3lab import paths

    monkeypatch.setattr(paths, "FIXTURES", tmp_path / "fixtures")
    run = _lab_perf_run(tmp_path, scenario="../../escaped")
    assert main(["baseline", "record", str(run)]) == 2
    assert "not in the catalog" in capsys.readouterr().err
    assert not list(tmp_path.rglob("escaped*"))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0])
def test_baseline_record_refuses_a_result_that_is_no_measurement(tmp_path, capsys, value):
    run = _lab_perf_run(tmp_path, result={"output_throughput": value})
    assert main(["baseline", "record", str(run), "--out", str(tmp_path / "b.json")]) == 2
    assert "output_throughput" in capsys.readouterr().err and not (tmp_path / "b.json").exists()


def test_compare_refuses_a_run_of_a_scenario_not_in_the_catalog(tmp_path, capsys):
    run = _copy(tmp_path)
    plan = json.loads((run / "plan.json").read_text())
    (run / "plan.json").write_text(json.dumps({**plan, "scenario": "../../x"}))
    assert main(["compare", str(RUN), str(run)]) == 2
    assert "not in the catalog" in capsys.readouterr().err


def test_compare_out_never_writes_through_a_symlink(tmp_path, capsys):
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    link = tmp_path / "out.txt"
    link.symlink_to(target)
    assert main(["compare", str(RUN), str(RUN), "--out", str(link)]) == 2
    assert "--force" in capsys.readouterr().err and target.read_text() == "precious\n"
    assert main(["compare", str(RUN), str(RUN), "--out", str(link), "--force"]) == 0
    assert target.read_text() == "precious\n" and not link.is_symlink() and "no regression" in link.read_text()
