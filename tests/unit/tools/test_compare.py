"""k3lab compare and k3lab baseline record, offline on a real sim run's results (fixtures/release)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k3lab.cli.main import main
from k3lab.conform import benchparse
from k3lab.model import policy
from k3lab.reports import gate
from k3lab.tools import baseline, compare

FIX = Path(__file__).resolve().parents[3] / "fixtures"
RUN = FIX / "release" / "run-k3_a3_mixed"
NPU = "conformance/test_npu.py::test_npu_smi_devices_healthy[node1]"
POLICY = policy.load()


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(RUN, dst)
    return dst


def _edit_test(run: Path, nodeid: str, **row) -> None:
    path = run / "conformance-results.json"
    doc = json.loads(path.read_text())
    [t] = [t for t in doc["tests"] if t["nodeid"] == nodeid]
    t.update(row)
    path.write_text(json.dumps(doc))


def _release(tmp_path: Path, name: str, run: Path, target: str = "sim") -> Path:
    """A release directory holding one scenario's verdict, as k3lab release writes it."""
    v = gate.evaluate_run(POLICY.for_scenario("k3_a3_mixed"), run)
    out = tmp_path / name
    out.mkdir()
    (out / "release.json").write_text(json.dumps({"schema": 1, "kind": "k3lab-release", "target": target,
                                                  "overall": v.verdict, "scenarios": [v.to_json()]}))
    return out


def test_an_injected_failure_is_exactly_the_regression(tmp_path, capsys):
    good, bad = _copy(tmp_path, "good"), _copy(tmp_path, "bad")
    _edit_test(bad, NPU, outcome="failed", message="node1: Device 3 Health Status: Alarm")
    doc = compare.compare(compare._side(good, POLICY), compare._side(bad, POLICY), POLICY)
    [row] = doc["scenarios"]
    assert doc["regression"] and (row["verdict_a"], row["verdict_b"]) == ("PASS", "FAIL")
    assert [f["key"] for f in row["new_failures"]] == [NPU] and row["new_failures"][0]["level"] == "block"
    assert not row["fixed"] and not row["versions_changed"] and not row["expected_changed"]
    # the reverse comparison is the fix, and no regression
    back = compare.compare(compare._side(bad, POLICY), compare._side(good, POLICY), POLICY)
    assert not back["regression"] and [f["key"] for f in back["scenarios"][0]["fixed"]] == [NPU]
    # the command: text, Markdown and JSON, exit 1 on a regression, 0 without
    assert main(["compare", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and f"new fail [block] {NPU}" in out and "Device 3 Health Status: Alarm" in out
    assert main(["compare", str(good), str(bad), "--format", "markdown"]) == 1
    assert "**Regression**" in capsys.readouterr().out
    assert main(["compare", str(good), str(bad), "--format", "json", "--out", str(tmp_path / "c.json")]) == 1
    assert json.loads((tmp_path / "c.json").read_text())["scenarios"][0]["new_failures"][0]["key"] == NPU
    assert main(["compare", str(good), str(good)]) == 0
    assert "no regression" in capsys.readouterr().out


SEC = "conformance/test_service.py::test_api_key_enforced[node0:8000]"


def _add_row(run: Path, nodeid: str, first: bool = True, **row) -> None:
    """A second row for ``nodeid`` (before its first when ``first``), as a hand-merged results file has."""
    path = run / "conformance-results.json"
    doc = json.loads(path.read_text())
    [t] = [t for t in doc["tests"] if t["nodeid"] == nodeid]
    doc["tests"].insert(doc["tests"].index(t) + (0 if first else 1), {**t, **row})
    path.write_text(json.dumps(doc))


def test_a_results_file_with_two_rows_for_one_check_is_refused(tmp_path, capsys):
    """#35: A already fails on one check; B adds a failed row before the passed one of another: compare
    kept the passed row and said no regression. Such a file is refused (exit 2, one line)."""
    good, bad = _copy(tmp_path, "good"), _copy(tmp_path, "bad")
    for run in (good, bad):
        _edit_test(run, SEC, outcome="failed", message="401 not enforced")
    _add_row(bad, NPU, outcome="failed", message="node1: Device 3 Health Status: Alarm")
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert NPU in err and "2 rows" in err and "Traceback" not in err, err


def test_duplicate_items_in_a_release_count_as_the_worst(tmp_path):
    good, bad = _copy(tmp_path, "good"), _copy(tmp_path, "bad")
    for run in (good, bad):
        _edit_test(run, SEC, outcome="failed", message="401 not enforced")
    a, b = _release(tmp_path, "a", good), _release(tmp_path, "b", bad)
    doc = json.loads((b / "release.json").read_text())
    items = doc["scenarios"][0]["items"]
    [npu] = [i for i in items if i["key"] == NPU]
    items.insert(items.index(npu), {**npu, "status": "fail", "message": "Alarm"})  # before the passed one
    (b / "release.json").write_text(json.dumps(doc))
    got = compare.compare(compare._side(a, POLICY), compare._side(b, POLICY), POLICY)
    assert got["regression"] and [f["key"] for f in got["scenarios"][0]["new_failures"]] == [NPU]


def test_releases_versions_and_expected_values(tmp_path, capsys):
    good, cand = _copy(tmp_path, "good"), _copy(tmp_path, "cand")
    vers = json.loads((cand / "versions.json").read_text())
    vers["summary"]["vllm_ascend"] = "0.23.1"
    (cand / "versions.json").write_text(json.dumps(vers))
    _edit_test(cand, NPU, properties={"conformance.id": "npu.test_npu_smi_devices_healthy", "expected": "16 OK",
                                      "conformance.must": "MUST"})
    _edit_test(good, NPU, properties={"conformance.id": "npu.test_npu_smi_devices_healthy", "expected": "8 OK",
                                      "conformance.must": "MUST"})
    a, b = _release(tmp_path, "rel-a", good), _release(tmp_path, "rel-b", cand)
    doc = compare.compare(compare._side(a, POLICY), compare._side(b, POLICY), POLICY)
    [row] = doc["scenarios"]
    assert {"component": "vllm_ascend", "a": "0.23.0", "b": "0.23.1"} in row["versions_changed"]
    assert row["expected_changed"] == [{"key": NPU, "a": "8 OK", "b": "16 OK"}]
    assert main(["compare", str(a), str(b)]) == 1  # the guide's 0.23.0 is required: the version item fails
    assert "version vllm_ascend: 0.23.0 -> 0.23.1" in capsys.readouterr().out


def _with_metric(run: Path, value: float) -> None:
    _edit_test(run, "conformance/perf.py::test_bench_requests_succeed", outcome="passed", message="",
               properties={"conformance.id": "perf.test_bench_requests_succeed", "perf.output_throughput": str(value),
                           "conformance.must": "MUST"})


@pytest.mark.parametrize("target, value, regression", [("lab", 90.0, True), ("lab", 99.0, False),
                                                       ("sim", 10.0, False)])
def test_perf_deltas_with_threshold_and_sim_never_gates(tmp_path, target, value, regression):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    _with_metric(a, 100.0)
    _with_metric(b, value)
    ra, rb = _release(tmp_path, "ra", a, target), _release(tmp_path, "rb", b, target)
    doc = compare.compare(compare._side(ra, POLICY), compare._side(rb, POLICY), POLICY)
    [m] = doc["scenarios"][0]["metrics"]
    assert (m["a"], m["b"], m["rule"]) == (100.0, value, ">= 0.97 x A")
    assert m["comparable"] == (target == "lab") and doc["regression"] is regression
    if target == "sim":
        assert "not comparable (simulator)" in compare.text(doc)


def test_a_scenario_missing_from_the_candidate_is_a_regression(tmp_path):
    a = _release(tmp_path, "a", _copy(tmp_path, "r"))
    b = tmp_path / "b"
    b.mkdir()
    (b / "release.json").write_text(json.dumps({"kind": "k3lab-release", "target": "sim", "scenarios": []}))
    doc = compare.compare(compare._side(a, POLICY), compare._side(b, POLICY), POLICY)
    assert doc["regression"] and doc["scenarios"][0]["note"] == "only in A"


@pytest.mark.parametrize("setup, hint", [
    (lambda p: p / "missing", "not a directory"),
    (lambda p: p, "neither a release"),
    (lambda p: [(p / "release.json").write_text('{"kind": "other"}'), p][1], "not a k3lab release document"),
    (lambda p: [(p / "release.json").write_text("{nope"), p][1], "unreadable release.json"),
])
def test_bad_inputs_exit_2(tmp_path, capsys, setup, hint):
    bad = setup(_mk(tmp_path / "x"))
    assert main(["compare", str(RUN), str(bad)]) == 2
    err = capsys.readouterr().err
    assert hint in err and "Traceback" not in err, err


def _mk(p: Path) -> Path:
    p.mkdir()
    return p


# ------------------------------------------------------------------------------------ baseline


def _lab_perf_run(tmp_path: Path) -> Path:
    run = _copy(tmp_path, "labrun")
    state = json.loads((run / "run-state.json").read_text())
    state["target"] = "lab"
    (run / "run-state.json").write_text(json.dumps(state))
    bench = run / "evidence" / "bench"
    bench.mkdir(parents=True)
    shutil.copy(FIX / "bench" / "openai-infqps-concurrency1-kimi-k3.1-pro-20260112-101530.json", bench / "perf-result.json")
    (bench / "perf-argv.txt").write_text("# on kit host\nvllm bench serve --base-url http://10.0.0.1:8080 "
                                         "--random-input-len 1024 --random-output-len 128 --num-prompts 16\n")
    return run


def test_baseline_record_writes_provenance_that_perf_reads(tmp_path, capsys):
    run = _lab_perf_run(tmp_path)
    out = tmp_path / "b.json"
    assert main(["baseline", "record", str(run), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    parsed = benchparse.parse_baseline(out.read_text())
    assert parsed.metrics["output_throughput"] == 48.96 and parsed.threshold == 0.97
    assert parsed.workload == {"num_prompts": 16, "max_concurrency": 1, "request_rate": "inf",
                               "random_input_len": 1024, "random_output_len": 128}
    prov = doc["provenance"]
    assert prov["scenario"] == "k3_a3_mixed" and prov["versions"]["vllm_ascend"] == "0.23.0"
    assert prov["measured"] == "20260112-101530" and prov["command"].startswith("vllm bench serve")
    assert prov["hardware"]["nodes"] == 4 and prov["hardware"]["driver"]
    assert main(["baseline", "record", str(run), "--out", str(out)]) == 2  # exists: needs --force
    assert "--force" in capsys.readouterr().err
    assert main(["baseline", "record", str(run), "--out", str(out), "--force", "--threshold", "0.9"]) == 0
    assert json.loads(out.read_text())["threshold"] == 0.9


def test_baseline_refuses_sim_runs_and_runs_without_perf(tmp_path, capsys):
    with pytest.raises(Exception, match="simulator run"):
        baseline.build(RUN)
    run = _lab_perf_run(tmp_path)
    (run / "evidence" / "bench" / "perf-result.json").unlink()
    assert main(["baseline", "record", str(run), "--out", str(tmp_path / "x.json")]) == 2
    assert "-- --perf" in capsys.readouterr().err
    (run / "evidence" / "bench" / "perf-result.json").write_text("{}")
    assert main(["baseline", "record", str(run), "--out", str(tmp_path / "x.json")]) == 2
    assert "not a vllm bench serve result" in capsys.readouterr().err
    assert main(["baseline", "record", str(run), "--threshold", "2"]) == 2


def test_two_static_only_releases_say_what_was_compared(tmp_path, capsys):
    """#36: 'no regression' between two static-only releases names the stage compared and each side's scope."""
    for side in ("a", "b"):
        assert main(["release", "--static-only", "-s", "a3_pd", "--out", str(tmp_path / side), "-q"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    head, scope_a, scope_b = capsys.readouterr().out.splitlines()[:3]
    assert head.endswith("no regression in the static stage (render, preflight and golden) of 1 scenario(s) on both "
                         "sides; neither side checked a deployment")
    assert scope_a.startswith("A (last good): release ") and ", static-only, target sim: " in scope_a
    assert scope_a.endswith("no deployment was checked; a3_pd") and scope_b.startswith("B (candidate): release ")
    assert main(["compare", str(tmp_path / "a"), str(RUN), "--format", "json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["scope_a"] == {"kind": "release", "live": False, "target": "sim", "scenarios": ["a3_pd"],
                              "checks": "render, preflight and golden only; no deployment was checked"}
    assert doc["scope_b"]["kind"] == "run" and doc["scope_b"]["live"] is True
    assert doc["compared"].startswith("0 scenario(s); A is static-only")
