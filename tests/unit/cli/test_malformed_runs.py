"""Malformed run files are bad input (#31): exit 2 naming the file and the field, never exit 4. Each case
broke the command before (an AttributeError or ValueError three functions later, exit 4)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k3lab.cli.main import main
from tests.unit.tools.test_compare import _lab_perf_run

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    return run


@pytest.mark.parametrize("field, value, words", [("schema", 7, "field schema"), ("nodes", ["node0"], "field nodes"),
                                                 ("summary", {"vllm": 0.23}, "field summary.vllm")])
def test_versions_json_with_a_field_of_the_wrong_type_is_exit_2(tmp_path, capsys, field, value, words):
    run = _run(tmp_path)
    doc = json.loads((run / "versions.json").read_text())
    doc[field] = value
    (run / "versions.json").write_text(json.dumps(doc))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "versions.json" in err and words in err and "Traceback" not in err


def test_a_healthy_versions_json_still_reads(tmp_path):
    from k3lab.launch import versions

    assert versions.load(_run(tmp_path))["summary"]["vllm_ascend"] == "0.23.0"


@pytest.mark.parametrize("time", ["abc", "nan", "-1", "inf"])
def test_a_junit_with_a_bad_time_is_never_read(tmp_path, capsys, time):
    """junit.xml is output only (#31): a run without conformance-results.json has no results, said so."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE / "plan.json", run / "plan.json")
    (run / "junit.xml").write_text('<testsuites><testsuite name="pytest"><testcase classname="conformance.test_x" '
                                   f'name="test_a" time="{time}"/></testsuite></testsuites>')
    code = main(["report", str(run)])
    assert code != 4 and "internal error" not in capsys.readouterr().err
    summary = (run / "summary.md").read_text()
    assert "junit.xml is output only, not read" in summary and "time=" not in summary


@pytest.mark.parametrize("line, words", [('vllm bench serve --random-input-len "1024', "No closing quotation"),
                                         ("vllm bench serve --random-input-len many --num-prompts 4", "'many'"),
                                         ("vllm bench serve --random-output-len 0 --num-prompts 4", "'0'")])
def test_a_baseline_from_a_malformed_saved_command_is_exit_2(tmp_path, capsys, line, words):
    run = _lab_perf_run(tmp_path)
    (run / "evidence" / "bench" / "perf-argv.txt").write_text(line + "\n")
    assert main(["baseline", "record", str(run), "--out", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert "perf-argv.txt" in err and words in err and not (tmp_path / "b.json").exists()


# the example states perf's threshold only (a lab's difference); tolerance's types: tests/unit/model/test_policy.py
@pytest.mark.parametrize("key, value", [("threshold", "true"), ("threshold", '"0.97"'), ("threshold", '"1"')])
def test_a_policy_with_a_boolean_or_string_where_a_number_belongs_is_exit_2(tmp_path, capsys, key, value):
    assert main(["policy", "init", "--out", str(tmp_path / "p.yaml")]) == 0
    text = (tmp_path / "p.yaml").read_text()
    old = next(line for line in text.splitlines() if line.strip().startswith(f"{key}:"))
    (tmp_path / "p.yaml").write_text(text.replace(old, f"    {key}: {value}"))
    capsys.readouterr()
    assert main(["policy", "--check", str(tmp_path / "p.yaml")]) == 2
    assert f"{key}" in capsys.readouterr().err
