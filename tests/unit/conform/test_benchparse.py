"""Benchmark commands, result parsing and the pass/fail boundaries of every gate."""
from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from k3lab.conform import benchparse as bp

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "fixtures" / "bench"
VLLM_RESULT = BENCH / "openai-infqps-concurrency1-kimi-k3.1-pro-20260112-101530.json"
SEED_K31 = ROOT.parent / "shared" / "seeds" / "002_6ab7298b1aa1dc3e.txt"


@pytest.fixture
def result() -> dict:
    return bp.parse_bench_result(VLLM_RESULT.read_text())


# ----------------------------------------------------------------------------- vllm bench serve


def test_argv_is_the_guide_command():
    """With the guide's placeholders filled in, the kit's argv is §8.2's command word for word."""
    if not SEED_K31.is_file():
        pytest.skip("../shared/seeds not present")
    text = SEED_K31.read_text()
    block = re.search(r"^vllm bench serve \\\n(?:.*\\\n)*.*\n", text, re.M).group(0)
    guide = shlex.split(block.replace("\\\n", " "))
    subst = {"http://<PROXY_IP>:<PROXY_PORT>": "http://172.28.0.11:8080", "<LOCAL_MODEL_PATH>": "/m",
             "<BENCHMARK_RESULT_DIR>": "/out"}
    guide = [subst.get(w, w) for w in guide]
    argv = bp.bench_serve_argv("http://172.28.0.11:8080", "kimi-k3.1-pro", "/m", "/out", "kimi_k3")
    assert argv == guide


def test_argv_workload_override_and_unknown_key():
    argv = bp.bench_serve_argv("http://h:1", "m", "/t", "/o", None, {"num_prompts": 64, "max_concurrency": 8})
    assert argv[argv.index("--num-prompts") + 1] == "64" and argv[argv.index("--max-concurrency") + 1] == "8"
    assert "--tokenizer-mode" not in argv
    with pytest.raises(ValueError, match="unknown workload key"):
        bp.bench_serve_argv("http://h:1", "m", "/t", "/o", None, {"num_prompt": 64})


def test_parse_result_fields(result):
    assert result["completed"] == 16 and result["failed"] == 0
    assert result["output_throughput"] == pytest.approx(48.96)
    assert {"mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms"} <= set(result)


def test_parse_appended_results_takes_the_last():
    first = json.loads(VLLM_RESULT.read_text())
    second = {**first, "completed": 15, "failed": 1}
    text = json.dumps(first) + "\n" + json.dumps(second) + "\n"
    assert bp.parse_bench_result(text)["completed"] == 15


@pytest.mark.parametrize("text", ["", "{}", '{"completed": 1}'])
def test_parse_rejects_non_results(text):
    with pytest.raises(ValueError):
        bp.parse_bench_result(text)


def test_requests_gates(result):
    assert all(g.ok for g in bp.requests_gates(result, 16))
    bad = [g.metric for g in bp.requests_gates({**result, "completed": 15, "failed": 1}, 16) if not g.ok]
    assert bad == ["completed", "failed"]


def test_fixture_result_passes_example_baseline(result):
    base = bp.parse_baseline((BENCH / "baseline-example.json").read_text())
    assert base.workload == {"num_prompts": 16, "max_concurrency": 1} and base.threshold == 0.97
    assert all(g.ok for g in bp.gate_perf(result, base.metrics, base.threshold))
    strict = {g.metric: g.ok for g in bp.gate_perf(result, base.metrics, 0.99)}
    assert strict["output_throughput"] is False  # 48.96 < 0.99 x 50


@pytest.mark.parametrize("value, ok", [(97.0, True), (96.99, False), (150.0, True)])
def test_throughput_boundary(value, ok):
    (gate,) = bp.gate_perf({"output_throughput": value}, {"output_throughput": 100.0}, 0.97)
    assert gate.ok is ok and gate.limit == pytest.approx(97.0)


@pytest.mark.parametrize("factor, ok", [(1.0, True), (1.0001, False), (0.5, True)])
def test_latency_boundary(factor, ok):
    limit = 200.0 / 0.97
    (gate,) = bp.gate_perf({"mean_ttft_ms": limit * factor}, {"mean_ttft_ms": 200.0}, 0.97)
    assert gate.ok is ok


def test_missing_metric_fails_and_bad_inputs_raise():
    (gate,) = bp.gate_perf({}, {"mean_tpot_ms": 10.0})
    assert not gate.ok and "missing" in str(gate)
    with pytest.raises(ValueError, match="neither a throughput"):
        bp.gate_perf({}, {"duration": 10.0})
    with pytest.raises(ValueError, match="threshold"):
        bp.gate_perf({}, {"output_throughput": 1.0}, 1.5)
    with pytest.raises(ValueError, match="metrics"):
        bp.parse_baseline('{"metrics": {}}')


# -------------------------------------------------------------------------------------- AISBench


def test_accuracy_csv():
    assert bp.parse_aisbench_accuracy((BENCH / "aisbench-accuracy-summary.csv").read_text()) == pytest.approx(92.42)
    with pytest.raises(ValueError, match="did not produce a score"):
        bp.parse_aisbench_accuracy("dataset,version,metric,mode,vllm-api-general-chat\ngpqa_diamond,-,accuracy,gen,-\n")
    with pytest.raises(ValueError, match="no result row"):
        bp.parse_aisbench_accuracy("dataset,version,metric,mode,vllm-api-general-chat\n")


def test_perf_json_output_token_throughput():
    assert bp.parse_aisbench_perf((BENCH / "aisbench-perf-gsm8kdataset.json").read_text()) == pytest.approx(123.4)
    assert bp.parse_aisbench_perf({"Output Token Throughput": {"total": "347.4475token/s"}}) == pytest.approx(347.4475)
    with pytest.raises(ValueError, match="Output Token Throughput"):
        bp.parse_aisbench_perf({"Total Token Throughput": {"total": "1 token/s"}})


@pytest.mark.parametrize("value, ok", [(123.4 * 0.97, True), (119.69, False)])
def test_aisbench_throughput_boundary(value, ok):
    assert bp.gate_throughput(value, 123.4).ok is ok


@pytest.mark.parametrize("acc, ok", [(92.42, True), (91.42, True), (93.42, True), (91.41, False), (93.43, False)])
def test_accuracy_boundary(acc, ok):
    assert bp.gate_accuracy(acc, 92.42, 1.0).ok is ok


def test_guide_figures():
    assert bp.guide_accuracy("kimi-k3.1-pro", "A3", "gpqa") == 92.42
    assert bp.guide_accuracy("kimi-k3.1-pro", "A3", "mmmu_pro") == 80.75
    assert bp.guide_accuracy("kimi-k3.1-pro", "950DT", "gpqa") == 94.44
    assert bp.guide_accuracy("kimi-k3.1-pro", "950DT", "mmmu_pro") == 81.40
    assert bp.guide_accuracy("kimi-k3", "A3", "gpqa") is None
    assert bp.guide_accuracy("kimi-k3.1-pro", "A2", "gpqa") is None


def test_stdout_result_path_and_errors():
    log = (BENCH / "aisbench-accuracy-stdout.log").read_text()
    assert bp.aisbench_result_path(log).endswith("summary/summary_20260112_101530.csv")
    assert bp.aisbench_result_path(log, "performance") is None
    assert bp.aisbench_result_path("x Performance Result files locate in /o/perf/\n", "performance") == "/o/perf/"
    assert bp.aisbench_errors(log) == []
    noisy = "01/12 - AISBench - ERROR - connection refused\n" + "ok\n" * 100
    assert bp.aisbench_errors(noisy) == []  # only the last 100 lines count
    assert bp.aisbench_errors(noisy + "boom ERROR x\n") == ["boom ERROR x"]


def test_model_config_is_python_without_the_key(monkeypatch):
    monkeypatch.setenv("K3LAB_API_KEY", "sk-never-on-disk")
    text = bp.aisbench_model_config("172.28.0.11", 8080, "kimi-k3.1-pro", 65536, 32, 1.0, 0.95)
    tree = ast.parse(text)
    assert "sk-never-on-disk" not in text
    assert "host_port=8080" in text and "'kimi-k3.1-pro'" in text and "top_p=0.95" in text
    assert any(isinstance(n, ast.Assign) and n.targets[0].id == "models" for n in tree.body)
    assert bp.aisbench_argv("m", "gpqa_gen_0_shot_cot_chat_prompt") == [
        "ais_bench", "--models", "m", "--datasets", "gpqa_gen_0_shot_cot_chat_prompt"]
    assert bp.aisbench_argv("m", "t", "perf", 60)[-4:] == ["--mode", "perf", "--num-prompts", "60"]
