"""Performance through the entrypoint with ``vllm bench serve``, as the K3.1 Pro guide §8.2 runs it.

Runs only with ``--perf``; where the benchmark runs is explained in :mod:`k3lab.conform.benchrun`.
The baseline (``fixtures/baselines/<scenario>.json`` or ``--perf-baseline FILE``) fixes both the
workload and the gated metrics, because results compare only at equal lengths, concurrency and
cache state (guide §8.2)::

    {"workload": {"num_prompts": 16, "max_concurrency": 1},
     "metrics": {"output_throughput": 118.0, "mean_ttft_ms": 950.0, "mean_tpot_ms": 7.5},
     "threshold": 0.97, "source": "lab A3 run 2026-01-12, cold cache"}

Without a baseline the guide's workload runs and only request success is checked; the saved
``evidence/bench/perf-result.json`` is what a new baseline is made from.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from k3lab import paths
from k3lab.conform import benchparse
from k3lab.conform.benchrun import api_key_env, require_service_up, runner_for, watched
from k3lab.conform.evidence import check, fail
from k3lab.conform.plugin import skip
from k3lab.model.apikey import redact

pytestmark = [pytest.mark.perf,
              pytest.mark.conformance(area="perf", must="The service MUST complete the benchmark's requests and "
                                      "stay within the recorded baseline's throughput and latency")]
KIND = "product"
TIMEOUT_S = 1800  # the guide's 16-prompt run takes minutes; leaves room for larger baseline workloads
REPORTED = ("request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "p99_tpot_ms")


@pytest.fixture(scope="module")
def baseline(plan, pytestconfig) -> benchparse.Baseline | None:
    given = pytestconfig.getoption("--perf-baseline")
    path = Path(given) if given else paths.FIXTURES / "baselines" / f"{plan.scenario}.json"
    if not path.is_file():
        if given:
            fail("perf baseline file", "an existing JSON file", "missing", str(path), "wrong --perf-baseline path",
                 "pass the path of a baseline JSON (see conformance/perf.py)", kind="kit")
        return None
    return benchparse.parse_baseline(path.read_text())


def _tokenizer_mode(plan) -> str | None:
    """Whatever the engines were started with, so client-side token counts match the server's."""
    for proc in plan.processes():
        if proc.kind == "engine" and "--tokenizer-mode" in proc.argv:
            return proc.argv[proc.argv.index("--tokenizer-mode") + 1]
    return None


@pytest.fixture(scope="module")
def bench(plan, state, run_dir, pytestconfig, baseline, http) -> tuple[dict, dict]:
    """Run the benchmark once for the module; returns (result JSON, workload)."""
    runner = runner_for(pytestconfig, plan, state, run_dir)
    check(runner.which("vllm"), "vllm on the load-generator host", "vllm on PATH", "not found", runner.where,
          "vllm bench serve runs where the kit runs it", "install vllm on the kit host, or pass --bench-node NODE "
          "to run it in that node's container", kind="environment")
    workload = {**benchparse.GUIDE_WORKLOAD, **(baseline.workload if baseline else {})}
    out_dir = runner.workdir("perf")
    tokenizer = pytestconfig.getoption("--bench-tokenizer") or plan.expect.model_path
    argv = benchparse.bench_serve_argv(plan.expect.entrypoint, plan.expect.served_name, tokenizer, out_dir,
                                       _tokenizer_mode(plan), workload)
    evidence = run_dir / "evidence" / "bench"
    evidence.mkdir(parents=True, exist_ok=True)
    # the guide: "save the commands used"
    (evidence / "perf-argv.txt").write_text(f"# on {runner.where}\n{shlex.join(argv)}\n")
    code, out = runner.run(argv, TIMEOUT_S, env=api_key_env(), watch=watched(plan, http, pytestconfig))
    (evidence / "perf-stdout.log").write_text(redact(out))
    require_service_up(code, out, "vllm bench serve", runner.where, "perf-stdout.log")
    tail = " | ".join(out.strip().splitlines()[-3:])
    check(code == 0, "vllm bench serve exit status", 0, f"{code}: {tail}", runner.where,
          "the benchmark could not start, reach the entrypoint, or load the tokenizer",
          "read evidence/bench/perf-stdout.log; pass --bench-tokenizer if the model path does not exist there")
    path = runner.newest(out_dir)
    check(path, "vllm bench serve result file", f"a .json under {out_dir}", "none", runner.where,
          "--save-result wrote nothing", "read evidence/bench/perf-stdout.log", kind="environment")
    assert path is not None  # check() above failed otherwise
    text = runner.read(path)
    (evidence / "perf-result.json").write_text(redact(text))
    return benchparse.parse_bench_result(text), workload


@pytest.mark.conformance(
    id="perf.test_bench_requests_succeed",
    remedy="read the failing requests in evidence/bench and the engines' logs; the benchmark must complete before its numbers count.")
def test_bench_requests_succeed(bench, plan, record_property):
    result, workload = bench
    for key in REPORTED:
        if result.get(key) is not None:
            record_property(f"perf.{key}", result[key])
    bad = [g for g in benchparse.requests_gates(result, int(workload["num_prompts"])) if not g.ok]
    check(not bad, "benchmark requests", f"all {workload['num_prompts']} completed, none failed",
          "; ".join(map(str, bad)), plan.expect.entrypoint, "the proxy or an engine rejected or dropped requests",
          "check the proxy and engine logs under evidence/ around the benchmark's time")


@pytest.mark.conformance(
    id="perf.test_bench_within_baseline",
    remedy="compare the run with the baseline's deployment (versions, topology); record a new baseline only for an accepted change (k3lab baseline record).")
def test_bench_within_baseline(bench, baseline, plan, pytestconfig):
    if baseline is None:
        skip("no-baseline", f"no fixtures/baselines/{plan.scenario}.json; make one from evidence/bench/perf-result.json")
    result, _ = bench
    threshold = pytestconfig.getoption("--perf-threshold") or baseline.threshold or benchparse.THRESHOLD
    gates = benchparse.gate_perf(result, baseline.metrics, threshold)
    bad = [g for g in gates if not g.ok]
    check(not bad, "performance against the baseline", "; ".join(f"{g.metric} {g.rule}" for g in gates),
          "; ".join(map(str, bad)), f"{plan.expect.entrypoint} (baseline: {baseline.source or 'unnamed'})",
          "throughput fell or latency rose past the threshold: changed flags, a degraded node or link, "
          "a different cache state, or a product regression",
          "compare this run's plan and evidence with the baseline run's; re-run once to rule out noise before "
          "filing a regression")
