"""Run artefacts are read through their models: a corrupted file is exit 2 naming the file and the field."""
from __future__ import annotations

import json

import pytest

from k3lab.cli import main
from k3lab.errors import InputError
from k3lab.model import runs

STATE = {"version": 1, "run": "r1", "status": "up", "scenario": "a3_pd", "target": "lab", "plan": "p",
         "run_dir": "d", "containers": {"p0": "vllm-k3"}, "endpoints": {"p0": "ssh://root@10.0.0.1"},
         "ssh": {"known_hosts": None, "identity_file": None}, "timings": {"stage": 1.5}}


def _write(tmp_path, doc, name=runs.RUN_STATE):
    (tmp_path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return tmp_path


def test_a_healthy_state_reads_back_typed(tmp_path):
    state = runs.run_state(_write(tmp_path, STATE))
    assert state.containers == {"p0": "vllm-k3"} and state.endpoint_of("p0", "x") == "ssh://root@10.0.0.1"
    assert state.timings == {"stage": 1.5} and state.version == runs.VERSION


@pytest.mark.parametrize("doc, says", [
    ({**STATE, "containers": 5}, "field containers"),
    ({**STATE, "containers": {"p0": ["a"]}}, "field containers.p0"),
    ({**STATE, "target": "cloud"}, "field target"),
    ({**STATE, "version": 99}, "field version"),
    ({**STATE, "timings": {"stage": -1}}, "field timings"),
    ('{"run": "r1", "timings": {"stage": NaN}}', "not valid JSON"),
    ('{"run": "r1", "status"', "not valid JSON"),
    ("[" * 100_000, "nested too deeply"),
])
def test_a_corrupted_state_names_file_and_field(tmp_path, doc, says):
    with pytest.raises(InputError, match=says) as exc:
        runs.run_state(_write(tmp_path, doc))
    assert str(tmp_path / runs.RUN_STATE) in str(exc.value) and exc.value.exit_code == 2


@pytest.mark.parametrize("command", ["down", "status"])
def test_down_and_status_on_a_corrupted_state_exit_2(tmp_path, monkeypatch, capsys, command):
    (tmp_path / "r1").mkdir()
    _write(tmp_path / "r1", {**STATE, "endpoints": {"p0": 7}})
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path))
    assert main.main([command, "r1"]) == 2
    err = capsys.readouterr().err
    assert "run-state.json: field endpoints.p0" in err and "Traceback" not in err


def test_results_rows_are_checked(tmp_path):
    row = {"nodeid": "t.py::x", "outcome": "passed", "duration": 0.1}
    assert runs.results(_write(tmp_path, {"schema": 1, "tests": [row]}, runs.RESULTS)).tests[0].outcome == "passed"
    with pytest.raises(InputError, match="field tests.0.outcome"):
        runs.results(_write(tmp_path, {"schema": 1, "tests": [{**row, "outcome": "great"}]}, runs.RESULTS))
    with pytest.raises(InputError, match="field tests.0.duration"):
        runs.results(_write(tmp_path, {"schema": 1, "tests": [{**row, "duration": -0.5}]}, runs.RESULTS))


def test_two_rows_for_one_check_are_refused(tmp_path):
    """#35: a failed and a passed row for the same check; the plugin writes one row per node id."""
    row = {"nodeid": "t.py::x[node1]", "outcome": "passed", "duration": 0.1}
    doc = {"schema": 1, "tests": [{**row, "outcome": "failed"}, {"nodeid": "t.py::y", "outcome": "passed"}, row]}
    with pytest.raises(InputError, match=r"field tests: .*t.py::x\[node1\].* 2 rows \(failed, passed\)"):
        runs.results(_write(tmp_path, doc, runs.RESULTS))


def test_a_release_is_checked(tmp_path):
    doc = {"schema": 1, "kind": "k3lab-release", "overall": "PASS", "scenarios": [
        {"scenario": "a3_pd", "verdict": "PASS", "items": []}]}
    assert runs.release(_write(tmp_path, doc, runs.RELEASE)).scenarios[0].verdict == "PASS"
    with pytest.raises(InputError, match="field scenarios.0.verdict"):
        runs.release(_write(tmp_path, {**doc, "scenarios": [{"scenario": "a3_pd", "verdict": "OK"}]}, runs.RELEASE))
    with pytest.raises(InputError, match="not a k3lab release document"):
        runs.release(_write(tmp_path, {**doc, "kind": "other"}, runs.RELEASE))


def test_plan_is_read_once_typed_and_bounded(tmp_path):
    """plan.json: one reader (runs.plan), a file that does not validate names the file and the field."""
    from k3lab.model import runs, siminventory
    from k3lab.render import artefacts as render

    plan = render.build("a3_pd", siminventory.default("a3_pd")).plan
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    assert runs.plan(tmp_path) == plan
    assert runs.plan_nodes(tmp_path) == [n.name for n in plan.nodes]
    (tmp_path / "plan.json").write_text(plan.model_dump_json().replace('"nodes":[', '"nodes":"p0","x":[', 1))
    with pytest.raises(InputError, match=r"plan.json: field nodes"):
        runs.plan(tmp_path)
    (tmp_path / "plan.json").write_text("[" * 100_000)
    with pytest.raises(InputError, match="plan.json"):
        runs.plan_nodes(tmp_path)
