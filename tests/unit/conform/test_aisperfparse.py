"""AISBench performance runs (K3 guide §8.3-8.4) offline: the guide's commands, the helper's config,
AISBench's result JSON / per-request CSV / console, the helper's prefix-cache summary, and the gates."""
from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3lab.conform import aisperfparse as ap
from k3lab.conform import benchparse as bp
from tests import suite

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "fixtures" / "bench"
SEED_K3 = ROOT.parent / "shared" / "seeds" / "000_d4c4fad20ac2ebd8.txt"
STDOUT = (BENCH / "aisbench-perf-prefix-stdout.log").read_text()
RESULT = (BENCH / "aisbench-perf-gsm8k.json").read_text()
REQUESTS = (BENCH / "aisbench-perf-gsm8k.csv").read_text()
WD = "/tmp/k3lab-bench/aisperf-128k-1k-prefix99"


@pytest.fixture
def run() -> ap.PerfRun:
    return ap.parse_run(RESULT, REQUESTS, STDOUT)


# ------------------------------------------------------------------------------ workloads, helper


def test_argv_are_the_guide_commands():
    """§8.4's two aisbench_test.py commands, word for word and in order."""
    if not SEED_K3.is_file():
        pytest.skip("../shared/seeds not present")
    blocks = re.findall(r"^python3 aisbench_test\.py \\\n(?:.*\\\n)*.*\n", SEED_K3.read_text(), re.M)
    guide = [shlex.split(b.replace("\\\n", " ")) for b in blocks]
    assert guide == [ap.WORKLOADS["8k-1k"].argv(), ap.WORKLOADS["128k-1k-prefix99"].argv()]


def test_workload_lengths_and_description():
    w = ap.WORKLOADS["128k-1k-prefix99"]
    assert w.tokens == 132048 and (w.data_num, w.concurrency, w.request_rate) == (16, 4, 0)
    assert w.describe() == "16 requests of 131,024 in / 1,024 out tokens at concurrency 4, 99% shared prefix"
    assert "prefix" not in ap.WORKLOADS["8k-1k"].describe()


def test_helper_config_has_the_guide_fields_and_no_key(monkeypatch):
    monkeypatch.setenv("K3LAB_API_KEY", "sk-secret-123456")
    text = ap.helper_config("/d", "/root/benchmark", "kimi-k3", "/m", "172.28.0.11", 8000, "/w/outputs",
                            ["172.28.0.11:8000"])
    assert "sk-secret" not in text
    names: dict = {}
    exec(compile(text, "config.py", "exec"), names)  # the helper does `from config import *`
    assert {k: names[k] for k in ("DATASET_PATH", "WORK_PATH", "MODEL_NAME", "MODEL_PATH", "HOST_IP", "HOST_PORT",
                                  "DEFAULT_PERFORMANCE_TEST", "OUTPUT_DIR", "POD_INFO")} == {
        "DATASET_PATH": "/d", "WORK_PATH": "/root/benchmark", "MODEL_NAME": "kimi-k3", "MODEL_PATH": "/m",
        "HOST_IP": "172.28.0.11", "HOST_PORT": "8000", "DEFAULT_PERFORMANCE_TEST": "default_perf",
        "OUTPUT_DIR": "/w/outputs", "POD_INFO": ["172.28.0.11:8000"]}
    assert names["API_KEY"] == "sk-secret-123456"  # read from the environment when imported


def test_pod_info_follows_the_helper_readme():
    apis = [SimpleNamespace(url="http://10.0.0.1:8000", role="prefill"),
            SimpleNamespace(url="http://10.0.0.2:8000", role="decode"),
            SimpleNamespace(url="http://10.0.0.3:8000", role="mixed")]
    assert ap.pod_info(apis, external_pool=False) == ["10.0.0.1:8000", "10.0.0.3:8000"]
    assert ap.pod_info(apis, external_pool=True) == ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]


# --------------------------------------------------------------------------------------- console


def test_result_dir_is_the_full_runs():
    """Two ais_bench runs (warm-up, then full): the last located-in line, without its full stop."""
    assert ap.result_dir(STDOUT, WD) == f"{WD}/outputs/20260112_101602/performances/vllm-api-stream-chat"
    rel = "[x] [ais_bench] [INFO] Performance Result files located in ./outputs/default/1/performances/m.\n"
    assert ap.result_dir(rel, "/w/") == "/w/outputs/default/1/performances/m"
    assert ap.result_dir("no summary\n", WD) is None


def test_task_of_old_and_new_console_lines():
    assert ap.task_of(STDOUT) == ("vllm-api-stream-chat", "gsm8k")
    # AISBench docs before 2026: "Performance Results of task: model/dataset:"
    assert ap.task_of("[..] [INFO] Performance Results of task: vllm-api-stream-chat/demo_gsm8k:\n") == (
        "vllm-api-stream-chat", "demo_gsm8k")
    assert ap.task_of("nothing") is None


def test_no_error_lines_in_a_good_run():
    assert bp.aisbench_errors(STDOUT) == []


# ---------------------------------------------------------------------------------- result files


def test_common_metrics(run):
    m = run.metrics
    assert (m["total_requests"], m["success_requests"], m["failed_requests"]) == (16, 16, 0)
    assert m["output_token_throughput"] == pytest.approx(84.9837)
    assert m["request_throughput"] == pytest.approx(0.083)
    assert m["benchmark_duration_ms"] == pytest.approx(192790.0)
    assert m["total_output_tokens"] == 16384 and m["max_concurrency"] == 4


def test_request_stats(run):
    m = run.metrics
    assert m["mean_ttft_ms"] == pytest.approx(7971.3439) and m["p99_ttft_ms"] == pytest.approx(27315.5)
    assert m["mean_tpot_ms"] == pytest.approx(37.8322) and m["median_e2el_ms"] == pytest.approx(42618.9976)
    assert not any(k.startswith(("mean_inputtokens", "mean_outputtokenthroughput")) for k in m)


def test_request_stats_without_tpot_rows():
    """A one-token run (the helper's prefix warm-up) has no TPOT/ITL rows: absent, not zero."""
    rows = [r for r in REQUESTS.splitlines() if not r.startswith(("TPOT", "ITL"))]
    stats = ap.parse_request_stats("\n".join(rows))
    assert "mean_ttft_ms" in stats and "mean_tpot_ms" not in stats


def test_older_json_spelling_is_read():
    doc = json.loads((BENCH / "aisbench-perf-gsm8kdataset.json").read_text())
    m = ap.parse_common(json.dumps(doc))
    assert m["output_token_throughput"] == pytest.approx(123.4) and m["total_output_tokens"] == 16400
    assert m["prefill_token_throughput"] == pytest.approx(4101.7)


@pytest.mark.parametrize("text, match", [
    ("", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"Output Token Throughput": {"total": "1 token/s"}}', "no 'total' stage of Total Requests"),
    ('{"Total Requests": {"stable": 16}, "Failed Requests": {"stable": 0}, "Success Requests": {"stable": 16}, '
     '"Output Token Throughput": {"stable": "1 token/s"}}', "no 'total' stage"),
])
def test_malformed_result_json(text, match):
    with pytest.raises(ValueError, match=match):
        ap.parse_common(text)


def test_malformed_value_and_csv():
    doc = json.loads(RESULT)
    doc["Request Throughput"]["total"] = "fast"
    with pytest.raises(ValueError, match="'fast'"):
        ap.parse_common(json.dumps(doc))
    with pytest.raises(ValueError, match="Performance Parameters"):
        ap.parse_request_stats("metric,value\nTTFT,1\n")


def test_missing_csv_is_noted():
    r = ap.parse_run(RESULT, None, STDOUT)
    assert "mean_ttft_ms" not in r.metrics and r.notes == ["no per-request CSV: TTFT/TPOT not recorded"]


# ------------------------------------------------------------------------------- prefix summary


def test_prefix_hits_of_the_full_run(run):
    p = run.prefix
    assert p is not None
    assert (p.hbm_hit_rate, p.hbm_hits, p.hbm_queries) == (80.40, 1685632, 2096496)
    assert (p.external_hit_rate, p.external_hits, p.external_queries, p.skipped) == (0.0, 0, 0, ())
    assert p.describe().startswith("HBM prefix-cache hits 80.40% (1685632/2096496 tokens)")
    assert json.loads(json.dumps(run.to_json()))["prefix_cache"]["hbm_hit_rate"] == 80.40


def test_warm_up_summary_never_stands_for_the_full_run():
    cut = STDOUT[:STDOUT.rindex("Prefix cache hit summary")]  # full run's counters could not be read
    assert ap.FULL_RUN in cut and ap.parse_prefix_hits(cut) is None


def test_skipped_pods_and_normal_dataset():
    block = ("=" * 118 + "\nPrefix cache hit summary\n" + "=" * 118 + "\nscope  hbm_hit_rate ...\n" + "-" * 118 +
             "\nALL_PODS                           99.10%             991/1000             50.00%               1/2\n"
             + "=" * 118 + "\nSkipped PODs: 10.0.0.2:8000, 10.0.0.3:8000\n")
    p = ap.parse_prefix_hits(block)
    assert p is not None and p.hbm_hit_rate == 99.1 and p.external_queries == 2
    assert p.skipped == ("10.0.0.2:8000", "10.0.0.3:8000")
    assert ap.parse_prefix_hits("8K run: no prefix dataset\n") is None
    with pytest.raises(ValueError, match="ALL_PODS"):
        ap.parse_prefix_hits("Prefix cache hit summary\n(truncated)\n")


# ----------------------------------------------------------------------------------------- gates


def test_requests_gate_passes(run):
    assert all(g.ok for g in ap.requests_gates(run.metrics, 16))


def test_requests_gate_fails_with_its_message(run):
    m = {**run.metrics, "success_requests": 14.0, "failed_requests": 2.0}
    bad = [str(g) for g in ap.requests_gates(m, 16) if not g.ok]
    assert bad == ["success_requests 14 (FAILS == 16)", "failed_requests 2 (FAILS == 0)"]
    assert [g.ok for g in ap.requests_gates(run.metrics, 32)][0] is False  # fewer sent than --data_num


def test_baselines_file():
    b = ap.parse_baselines((BENCH / "aisbench-perf-baseline-example.json").read_text())
    assert set(b) == set(ap.WORKLOADS)
    assert b["128k-1k-prefix99"].threshold == 0.97 and b["8k-1k"].threshold == 0.9
    assert b["8k-1k"].source.startswith("example")
    assert ap.workload_mismatch(b["128k-1k-prefix99"].workload, ap.WORKLOADS["128k-1k-prefix99"]) == []
    assert ap.workload_mismatch(b["128k-1k-prefix99"].workload, ap.WORKLOADS["8k-1k"])[0] == (
        "input_len 131024 in the baseline, 8192 here")


@pytest.mark.parametrize("text, match", [
    ('{"metrics": {"output_token_throughput": 1}}', "workloads"),
    ('{"workloads": {"8k": {"metrics": {"output_token_throughput": 1}}}}', "unknown workload"),
    ('{"workloads": {"8k-1k": {"metrics": {"hit_rate": 1}}}}', "neither a throughput"),
])
def test_malformed_baselines(text, match):
    with pytest.raises(ValueError, match=match):
        ap.parse_baselines(text)


def test_baseline_gate_passes_and_fails(run):
    base = ap.parse_baselines((BENCH / "aisbench-perf-baseline-example.json").read_text())["128k-1k-prefix99"]
    assert all(g.ok for g in bp.gate_perf(run.metrics, base.metrics, 0.97))
    slow = {**run.metrics, "output_token_throughput": 80.0, "mean_tpot_ms": 40.0}
    bad = [str(g) for g in bp.gate_perf(slow, base.metrics, 0.97) if not g.ok]
    assert bad == ["output_token_throughput 80 (FAILS >= 0.97 x baseline 85)",
                   "mean_tpot_ms 40 (FAILS <= baseline 37.8 / 0.97)"]


def test_sim_numbers_are_not_comparable():
    assert ap.not_comparable("lab") is None
    assert "not comparable" in (ap.not_comparable("sim") or "")


# ----------------------------------------------------------------------------------- check module


def test_check_module_imports_and_declares_its_area():
    mod = suite.load("aisperf")
    marks = {m.name: m for m in mod.pytestmark}
    assert "aisbench_perf" in marks and marks["conformance"].kwargs["area"] == "aisbench-perf"
    assert "MUST" in marks["conformance"].kwargs["must"]
    assert mod.REPORTED and all(k in ap.parse_run(RESULT, REQUESTS, STDOUT).metrics for k in mod.REPORTED)


def test_check_module_keeps_the_key_off_command_lines():
    """The helper's run gets the key through benchrun.api_key_env() (its environment), never argv."""
    tree = ast.parse((ROOT / "conformance" / "aisperf.py").read_text())
    runs = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
            and c.func.attr == "run"]
    with_env = [c for c in runs if any(k.arg == "env" for k in c.keywords)]
    assert len(with_env) == 1
    env = next(k.value for k in with_env[0].keywords if k.arg == "env")
    assert isinstance(env, ast.Call) and getattr(env.func, "id", None) == "api_key_env"
    assert not [c for c in runs for a in ast.walk(c) if isinstance(a, ast.Attribute) and a.attr == "get"]
