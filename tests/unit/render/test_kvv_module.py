"""conformance/kvv.py end to end, offline: the module runs against a fake toolkit on the kit host.

The fake ``python`` answers the kit's preflight and ``inspect_ai log dump`` with the real fixture
outputs (fixtures/bench/kvv.source.txt) and runs the fake ``verify_params_k3.py`` / ``eval.py``, which
print real outputs and leave a log in ``$INSPECT_LOG_DIR``. So the module's wiring is tested: the
guide's commands and environment, the order (parameter checks first), which log it reads, the gates
and their messages, and the skips per scenario.
"""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from k3lab.model import siminventory
from k3lab.render import artefacts as render

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "fixtures" / "bench"
pytest_plugins = ["pytester"]
QUIET = ("-p", "no:cacheprovider", "-p", "no:benchmark", "-p", "no:xdist", "-p", "no:randomly")

FAKE_PYTHON = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    from pathlib import Path
    bench = Path({bench!r})
    control = json.loads((Path(__file__).resolve().parent / "control.json").read_text())
    args = sys.argv[1:]
    if args[0] == "-c":  # the kit's preflight: versions, then the scripts it could not find
        missing = [f for f in args[2:] if not os.path.isfile(f)]
        print("3.12.7 0.3.285", *missing)
        sys.exit(3 if missing else 0)
    if args[:2] == ["-m", "inspect_ai"]:  # log dump --header-only LOG: the fake log names its header
        sys.stdout.write((bench / f"kvv-ocrbench-{{Path(args[-1]).read_text()}}.header.json").read_text())
        sys.exit(0)
    with open(Path(__file__).resolve().parent / "calls.jsonl", "a") as fh:
        fh.write(json.dumps({{"argv": args, "cwd": os.getcwd(), "env": {{k: os.environ.get(k) for k in (
            "KIMI_BASE_URL", "KIMI_API_KEY", "INSPECT_LOG_DIR")}}}}) + "\\n")
    if args[0] == "verify_params_k3.py":
        case, code = control["verify"]
        sys.stdout.write((bench / f"kvv-verify-params-{{case}}.txt").read_text())
        sys.exit(code)
    task = args[1]
    case = control.get("eval", {{}}).get(task, "success")
    if case == "hang":  # Inspect retrying a dead service with backoff
        print("retrying", flush=True)
        import time
        time.sleep(120)
    if case != "no-log":
        Path(os.environ["INSPECT_LOG_DIR"], f"2026-12-04T00-00-00_{{task}}_x.eval").write_text(case)
    sys.stdout.write((bench / "kvv-eval-console.txt").read_text())
    sys.exit(control.get("exit", {{}}).get(task, 0))
''')


@pytest.fixture
def kvv(pytester, tmp_path):
    """Run conformance/kvv.py for ``scenario`` against the fake toolkit set up by ``control``."""
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    for script in ("verify_params_k3.py", "eval.py"):
        (toolkit / script).write_text("# the fake python runs these\n")
    python = toolkit / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable, bench=str(BENCH)))
    python.chmod(0o755)

    def run(scenario: str = "k3_a3_mixed", *extra: str, verify=("pass", 0), **control):
        run_dir = tmp_path / f"run-{scenario}"
        run_dir.mkdir(exist_ok=True)
        plan = render.build(scenario, siminventory.default(scenario)).plan
        if control.pop("apis_down", False):  # every API's /health refused: nothing listens there
            for api in plan.expect.apis:
                api.url = f"http://127.0.0.1:{_closed_port()}"
        (run_dir / "plan.json").write_text(plan.model_dump_json())
        (run_dir / "run-state.json").write_text("{}")
        (toolkit / "control.json").write_text(json.dumps({"verify": list(verify), **control}))
        (toolkit / "calls.jsonl").unlink(missing_ok=True)
        result = pytester.runpytest(str(ROOT / "conformance" / "kvv.py"), "-p", "k3lab.conform.plugin",
                                    *QUIET, "--run-dir", str(run_dir), "--kvv", "--kvv-toolkit", str(toolkit),
                                    "--kvv-python", str(python), "-rs", *extra)
        calls = [json.loads(line) for line in (toolkit / "calls.jsonl").read_text().splitlines()] \
            if (toolkit / "calls.jsonl").is_file() else []
        return result, calls, run_dir

    return run


def test_healthy_toolkit_runs_the_guide_in_order(kvv, monkeypatch):
    monkeypatch.setenv("K3LAB_API_KEY", "sk-lab-key")
    result, calls, run_dir = kvv()
    # k3_a3_mixed (131072 tokens): parameters, OCRBench, MMMU Pro; ToolCall waits for the §7.5 restart
    result.assert_outcomes(passed=3, skipped=1)
    assert "ToolCall/KVVV runs on the §7.5 restart (--max-model-len 286720" in result.stdout.str()
    assert [c["argv"][0] if c["argv"][0] != "eval.py" else c["argv"][1] for c in calls] == [
        "verify_params_k3.py", "ocrbench", "mmmu"]
    for call in calls:
        assert call["env"]["KIMI_BASE_URL"] == "http://172.28.0.11:8000/v1"
        assert call["env"]["KIMI_API_KEY"] == "sk-lab-key"
        assert "sk-lab-key" not in json.dumps(call["argv"])  # the key travels only in the environment
    assert calls[1]["env"]["INSPECT_LOG_DIR"] != calls[2]["env"]["INSPECT_LOG_DIR"]  # one log dir per run
    assert calls[1]["argv"][1:4] == ["ocrbench", "--model", "opensource/kimi-k3"]
    evidence = run_dir / "evidence" / "bench"
    assert json.loads((evidence / "kvv-ocrbench-log-header.json").read_text())["status"] == "success"
    assert "eval.py mmmu --model opensource/kimi-k3" in (evidence / "kvv-mmmu-argv.txt").read_text()


def test_toolcall_runs_on_the_restarted_service(kvv):
    result, calls, _ = kvv("k3_a3_mixed_toolcall")
    result.assert_outcomes(passed=4)
    assert calls[-1]["argv"][-2:] == ["--dataset", "toolcall_benchmark/toolcall_thinking_samples.jsonl"]


def test_language_model_only_skips_the_vision_benchmarks(kvv):
    result, calls, _ = kvv("k3_a2_mixed")
    result.assert_outcomes(passed=1, skipped=2 + 1)  # k3_a2_mixed: 262144 tokens, short of ToolCall's too
    assert "multimodal dataset on a language-model-only deployment" in result.stdout.str()


def test_failed_parameter_checks_fail_every_benchmark_without_running_one(kvv):
    result, calls, _ = kvv(verify=("fail", 1))
    result.assert_outcomes(errors=4)  # the module fixture fails: every check that needs it errors with its message
    out = result.stdout.str()
    assert "K3 toolkit parameter checks (verify_params_k3.py --all)" in out
    assert "kvv-verify-params-stdout.log" in out
    assert [c["argv"][0] for c in calls] == ["verify_params_k3.py"]


def test_errored_sample_fails_its_benchmark_only(kvv):
    result, _, _ = kvv(eval={"mmmu": "sample-error"})
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    out = result.stdout.str()
    assert "MMMU Pro Vision evaluation (mmmu)" in out and "1 of 8 samples errored (not scored)" in out
    assert "inspect eval-retry" in out


@pytest.mark.parametrize(("case", "text"), [("status-error", "status error"),
                                            ("all-errors", "no results: no sample was scored")])
def test_run_that_did_not_finish_fails(kvv, case, text):
    result, _, _ = kvv(eval={"ocrbench": case})
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    assert text in result.stdout.str()


def test_no_log_names_the_console_output(kvv):
    result, _, _ = kvv(eval={"ocrbench": "no-log"})
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    assert "eval.py ended before Inspect opened its log" in result.stdout.str()


def test_baseline_gate(kvv, tmp_path):
    baseline = tmp_path / "kvv-baseline.json"
    baseline.write_text(json.dumps({"ocrbench": 0.875, "mmmu": 0.95}))  # the fixture run scored 0.875
    result, _, _ = kvv("k3_a3_mixed", "--kvv-baseline", str(baseline))
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    out = result.stdout.str()
    assert "mmmu score (ocrbench_scorer/accuracy)" in out and "within 0.95 +/- 1 points" in out


def _closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_whose_service_died_is_stopped_and_named(kvv):
    """Inspect would retry for hours: the watch stops the run once the APIs fail /health for the grace."""
    import time
    t = time.monotonic()
    result, _, _ = kvv("k3_a3_mixed", "--bench-down-grace", "1", "-k", "ocrbench", apis_down=True,
                       eval={"ocrbench": "hang"})
    result.assert_outcomes(passed=0, failed=1)
    out = result.stdout.str()
    assert "OCRBench evaluation (ocrbench): expected the service answering /health throughout the run, got " \
           "[k3lab] stopped: the service stopped answering, http://127.0.0.1:" in out
    assert "inspect eval-retry" in out and time.monotonic() - t < 60


def test_missing_toolkit_is_an_environment_failure(pytester, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(render.build("k3_a3_mixed", siminventory.default("k3_a3_mixed"))
                                       .plan.model_dump_json())
    (run_dir / "run-state.json").write_text("{}")
    result = pytester.runpytest(str(ROOT / "conformance" / "kvv.py"), "-p", "k3lab.conform.plugin", *QUIET,
                                "--run-dir", str(run_dir), "--kvv", "--kvv-toolkit", str(tmp_path / "nowhere"),
                                "--kvv-python", sys.executable)
    result.assert_outcomes(errors=4)
    out = result.stdout.str()
    assert "the toolkit or its kvv environment is not installed where the kit runs it" in out
    assert "No such file or directory" in out and "Traceback" not in out
