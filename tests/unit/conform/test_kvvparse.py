"""The K3 evaluation toolkit (K3 §7) offline: the guide's commands, verify_params output, Inspect logs, gates.

Fixtures are real outputs (fixtures/bench/kvv.source.txt): Inspect AI logs and console, and the public
Kimi Vendor Verifier's verify_params.py against a loopback endpoint.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from k3lab.conform import kvvparse as kp
from tests import suite

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "fixtures" / "bench"
SEED_K3 = ROOT.parent / "shared" / "seeds" / "000_d4c4fad20ac2ebd8.txt"
HEADERS = {case: (BENCH / f"kvv-ocrbench-{case}.header.json").read_text()
           for case in ("success", "sample-error", "status-error", "all-errors")}


def _verify(case: str, code: int) -> kp.Verification:
    return kp.parse_verify(code, (BENCH / f"kvv-verify-params-{case}.txt").read_text())


# ------------------------------------------------------------------------------------- commands


def _guide_commands() -> dict[str, list[str]]:
    """§7.2-§7.5's ``python ...`` commands, keyed by their first argument."""
    if not SEED_K3.is_file():
        pytest.skip("../shared/seeds not present")
    text = SEED_K3.read_text()
    section = text[text.index("7.2 Check the Service"):text.index("7.6 Inspect and Resume")]
    blocks = re.findall(r"^python .*\\\n(?:.*\\\n)*.*\n", section, re.M)
    cmds = [shlex.split(b.replace("\\\n", " ")) for b in blocks]
    return {(c[2] if c[1] == "eval.py" else c[1]): c for c in cmds}


def test_verify_argv_is_the_guide_command_with_the_key_in_the_environment():
    guide = _guide_commands()["verify_params_k3.py"]
    i = guide.index("--api-key")
    assert guide[i + 1] == "$KIMI_API_KEY"
    guide = guide[:i] + guide[i + 2:]  # the script defaults --api-key to $KIMI_API_KEY, which the kit sets
    guide = [{"$KIMI_BASE_URL": "http://172.28.0.11:8000/v1"}.get(w, w) for w in guide]
    assert kp.verify_argv("python", "kimi-k3", "http://172.28.0.11:8000/v1") == guide


@pytest.mark.parametrize("task", list(kp.TASKS))
def test_eval_argv_is_the_guide_command(task):
    assert kp.eval_argv("python", task, "kimi-k3") == _guide_commands()[task]


def test_the_guide_runs_exactly_these_benchmarks():
    assert set(_guide_commands()) == {"verify_params_k3.py", *kp.TASKS}


def test_header_dump_reads_any_log_format():
    assert kp.header_dump_argv("/opt/kvv/bin/python", "/l/x.eval") == [
        "/opt/kvv/bin/python", "-m", "inspect_ai", "log", "dump", "--header-only", "/l/x.eval"]


# ------------------------------------------------------------------------------- verify_params


def test_verify_all_passed():
    res = _verify("pass", 0)
    assert res.ok and res.modes == [("non-think", True, 11, 11), ("think", True, 11, 11)] and not res.failures
    assert res.describe() == "exit 0; non-think: 11/11 passed; think: 11/11 passed"


def test_verify_wrong_values_accepted():
    res = _verify("fail", 1)
    assert not res.ok and res.modes == [("non-think", False, 6, 11), ("think", False, 6, 11)]
    assert len(res.failures) == 10 and res.failures[0] == "non-think: temperature=0.5 should be rejected"
    assert res.describe().startswith("exit 1; non-think: 6/11 passed; think: 6/11 passed; failed: non-think: "
                                     "temperature=0.5 should be rejected | ")


def test_verify_unreachable_service():
    res = _verify("unreachable", 1)
    assert not res.ok and res.failures[0] == ("non-think: request without params failed: Error: "
                                              "APIConnectionError: Connection error.")


def test_verify_exit_status_decides_over_the_lines():
    # a FAIL line or a failed mode fails even with exit 0; exit != 0 fails whatever was printed
    assert not kp.parse_verify(0, (BENCH / "kvv-verify-params-fail.txt").read_text()).ok
    assert not _verify("pass", 1).ok
    missing = kp.parse_verify(2, "python: can't open file '/kvv/verify_params_k3.py': [Errno 2] No such file")
    assert not missing.ok and missing.describe() == "exit 2; no 'Result:' lines"
    # an output format the parser does not know: exit 0 is the script's own verdict
    assert kp.parse_verify(0, "all parameter checks passed\n").ok


# ---------------------------------------------------------------------------------- Inspect logs


def test_success_log():
    run = kp.parse_log(HEADERS["success"])
    assert (run.task, run.model, run.status, run.error) == ("ocrbench", "mockllm/model", "success", None)
    assert (run.total_samples, run.completed_samples, run.errored_samples) == (8, 8, 0)
    assert run.metrics == {"ocrbench_scorer/accuracy": 0.875, "ocrbench_scorer/stderr": 0.125}
    assert run.headline == ("ocrbench_scorer/accuracy", 0.875)
    assert kp.completion_problems(run) == []


@pytest.mark.parametrize("name", ["kvv-ocrbench-success.eval", "kvv-ocrbench-sample-error.eval"])
def test_current_eval_zip_needs_inspect_to_read(name):
    """Inspect now compresses .eval members with Zstandard (zip method 93), which zipfile reads only
    from Python 3.14: the kit reads logs through 'inspect log dump' in the toolkit's environment."""
    try:
        header = kp.parse_log(kp.header_from_eval_zip((BENCH / name).read_bytes()))
    except ValueError as exc:
        assert "compression method 93" in str(exc) and "inspect log dump" in str(exc)
    else:  # a Python whose zipfile has Zstandard reads the same header that 'log dump' printed
        assert header == kp.parse_log(HEADERS[name.removeprefix("kvv-ocrbench-").removesuffix(".eval")])


def test_json_format_log():
    run = kp.parse_log((BENCH / "kvv-ocrbench-success.log.json").read_text())
    assert run.status == "success" and run.headline == ("ocrbench_scorer/accuracy", 0.875)


def test_older_eval_log_with_metric_options():
    run = kp.parse_log(kp.header_from_eval_zip((BENCH / "inspect-0.3.4x-input-task.eval").read_bytes()))
    assert run.headline == ("model_graded_fact/accuracy", 1.0) and kp.completion_problems(run) == []


def test_errored_samples_keep_status_success():
    run = kp.parse_log(HEADERS["sample-error"])
    assert run.status == "success" and run.errored_samples == 1
    assert kp.completion_problems(run) == ["1 of 8 samples errored (not scored)"]


def test_status_error():
    run = kp.parse_log(HEADERS["status-error"])
    assert kp.completion_problems(run) == ["status error", "2 of 8 samples errored (not scored)"]


def test_every_sample_errored_leaves_no_results():
    run = kp.parse_log(HEADERS["all-errors"])
    assert run.status == "success" and run.headline is None
    assert kp.completion_problems(run) == ["no results: no sample was scored"]


def test_eval_error_and_cancelled():
    doc = json.loads(HEADERS["success"])
    doc.update(status="error", error={"message": "RuntimeError('boom')", "traceback": "", "traceback_ansi": ""})
    assert kp.completion_problems(kp.parse_log(json.dumps(doc))) == ["status error: RuntimeError('boom')"]
    doc.update(status="cancelled", error=None)
    assert kp.completion_problems(kp.parse_log(json.dumps(doc))) == ["status cancelled"]


def test_headline_names_the_score_inspect_reports():
    doc = json.loads(HEADERS["success"])
    doc["results"]["headline"] = {"scorer": "ocrbench_scorer", "score": "ocrbench_scorer", "metric": "stderr"}
    assert kp.parse_log(json.dumps(doc)).headline == ("ocrbench_scorer/stderr", 0.125)
    del doc["results"]["headline"]
    doc["results"]["scores"][0]["metrics"] = {}
    assert kp.completion_problems(kp.parse_log(json.dumps(doc))) == ["no metric in the results"]


@pytest.mark.parametrize("text, message", [
    ("Traceback (most recent call last):\n  FileNotFoundError", "not an Inspect log"),
    ('{"version": 2}', "no 'status' and 'eval'"),
    ("[]", "no 'status' and 'eval'"),
])
def test_malformed_log(text, message):
    with pytest.raises(ValueError, match=message):
        kp.parse_log(text)


def test_unfinished_eval_zip():
    with pytest.raises(ValueError, match="not a finished Inspect .eval log"):
        kp.header_from_eval_zip(b"PK\x03\x04 truncated")


def test_console_summary_shows_the_log_score():
    """What the run prints matches what the kit reads from its log (the console is evidence only)."""
    console = (BENCH / "kvv-eval-console.txt").read_text()
    assert re.search(r"^accuracy\s+0\.875\s*$", console, re.M) and "Log: logs-ok/" in console


# ---------------------------------------------------------------------------------------- gates


def test_baseline():
    assert kp.parse_baseline('{"ocrbench": 0.89, "mmmu": 0.82, "source": "lab A3, 2026-08"}') == {
        "ocrbench": 0.89, "mmmu": 0.82}


@pytest.mark.parametrize("text, message", [
    ('{"ocr": 0.89}', "unknown task 'ocr'"),
    ('{"ocrbench": 89}', "not a score in \\[0, 1\\].*0.89, not 89"),
    ('{"ocrbench": true}', "not a score"),
    ("[0.89]", "JSON object"),
])
def test_bad_baseline(text, message):
    with pytest.raises(ValueError, match=message):
        kp.parse_baseline(text)


@pytest.mark.parametrize("value, ok", [(0.89, True), (0.88, True), (0.9, True), (0.8799, False), (0.9001, False)])
def test_score_boundary_in_points(value, ok):
    assert kp.gate_score("ocrbench_scorer/accuracy", value, 0.89, 1.0).ok is ok


def test_score_gate_message():
    gate = kp.gate_score("ocrbench_scorer/accuracy", 0.857, 0.89, 1.0)
    assert str(gate) == "ocrbench_scorer/accuracy 0.857 (FAILS within 0.89 +/- 1 points)"


# ---------------------------------------------------------------------------------- check module


def test_check_module_declares_its_marker_and_area():
    mod = suite.load("kvv")
    marks = {m.mark.name: m.mark for m in mod.pytestmark}
    assert "kvv" in marks and marks["conformance"].kwargs["area"] == "kvv-accuracy"
    assert "MUST" in marks["conformance"].kwargs["must"]
    assert set(mod.TIMEOUT_S) == set(kp.TASKS)
