"""Performance through the entrypoint with AISBench, as the Kimi K3 guide §8.3-8.4 runs it (``aisbench_test.py``).

Runs only with ``--aisbench-perf``; where the load generator runs is explained in
:mod:`k3lab.conform.benchrun` (the guide puts it on the master node: ``--bench-node``). The K3.1 Pro
guide §8.1 only refers to the AISBench performance guide, so the same two workloads serve both:

* ``8k-1k``: 8192 in / 1024 out, no prefix-cache hit;
* ``128k-1k-prefix99``: 131024 in / 1024 out, 99% of every request a shared prefix, warmed first;

each 16 requests at concurrency 4 with ``--request_rate 0`` (see :data:`aisperfparse.WORKLOADS`).

Needed on the load-generator host: AISBench installed as the guide's §8.1 does (``ais_bench`` on PATH,
an editable install whose checkout is the helper's ``WORK_PATH``), and a checkout of the helper
(github.com/rayn-zzz/aisbench_auto_tools_prefix) given as ``--aisbench-tools DIR``. The kit copies the
helper into a fresh work directory per workload, writes its ``config.py`` from the plan (§8.3's fields;
``OUTPUT_DIR`` under the work directory, ``POD_INFO`` the engine APIs, the API key read from
``$K3LAB_API_KEY``) and runs the guide's command there. The helper itself writes the key into its
``temp_api.py`` and prints that file; the kit redacts the saved output and scrubs ``temp_api.py`` after
the run. Evidence goes to ``evidence/bench/aisbench-perf-<workload>-*``.

Gates: every request succeeds; with a baseline (``--aisbench-perf-baseline FILE``, default
``fixtures/baselines/<scenario>-aisbench.json``, one perf.py-shaped entry per workload, see
:func:`aisperfparse.parse_baselines`) throughput >= threshold x baseline and latency <= baseline /
threshold (``--perf-threshold``, else the file's, else 0.97). Numbers measured on the simulator are
recorded, labelled not comparable, and never gate. The prefix-cache hit rate the helper reports is
recorded, not gated: the guide's command omits ``--dp``, so only one DP rank's cache is warmed.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from k3lab import paths
from k3lab.conform import aisperfparse as ap
from k3lab.conform import benchparse
from k3lab.conform.benchrun import Runner, api_key_env, require_service_up, runner_for, watched
from k3lab.conform.evidence import check, fail
from k3lab.conform.plugin import skip
from k3lab.model import apikey
from k3lab.model.apikey import redact

pytestmark = [pytest.mark.aisbench_perf,
              pytest.mark.conformance(area="aisbench-perf", must="The service MUST complete every request of the "
                                      "guide's AISBench workloads and stay within the recorded baseline's "
                                      "throughput and latency")]
KIND = "product"
TIMEOUT_S = 3 * 3600  # 16 requests of 128K tokens at concurrency 4, dataset generation and the warm-up included
REPORTED = ("output_token_throughput", "request_throughput", "total_token_throughput", "mean_ttft_ms",
            "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms")


class Helper:
    """The load-generator host, prepared once: where the helper and AISBench's checkout are."""

    def __init__(self, runner: Runner, tools: str, work_path: str):
        self.runner, self.tools, self.work_path = runner, tools.rstrip("/"), work_path


@pytest.fixture(scope="module")
def helper(plan, state, run_dir, pytestconfig) -> Helper:
    runner = runner_for(pytestconfig, plan, state, run_dir)
    tools = pytestconfig.getoption("--aisbench-tools")
    check(tools, f"{ap.HELPER} location", "--aisbench-tools DIR", "not given", runner.where,
          "the guide's load generator is a helper script, not part of AISBench",
          "clone github.com/rayn-zzz/aisbench_auto_tools_prefix on the load-generator host and pass its path "
          "as --aisbench-tools", kind="environment")
    code, out = runner.run(["test", "-f", f"{tools}/{ap.HELPER}"], 60)
    check(code == 0, f"{ap.HELPER} on the load-generator host", f"{tools}/{ap.HELPER}", "missing", runner.where,
          "wrong --aisbench-tools path, or the helper is on another host",
          "pass the helper checkout's path on that host; --bench-node NODE runs it in NODE's container",
          kind="environment")
    check(runner.which("ais_bench"), "ais_bench on the load-generator host", "ais_bench on PATH", "not found",
          runner.where, "AISBench is not installed where the kit runs it",
          "install AISBench as the K3 guide §8.1 does (pip3 install -e ./ in its checkout)", kind="environment")
    code, out = runner.run(["python3", "-c", "import ais_bench, os; "
                            "print(os.path.dirname(os.path.dirname(os.path.abspath(ais_bench.__file__))))"], 60)
    check(code == 0, "AISBench checkout (the helper's WORK_PATH)", "importable ais_bench", out.strip()[-300:],
          runner.where, "ais_bench is on PATH but not importable by python3",
          "install AISBench into the python3 environment as the guide's §8.1 does", kind="environment")
    return Helper(runner, tools, out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baselines(plan, pytestconfig) -> dict[str, benchparse.Baseline]:
    given = pytestconfig.getoption("--aisbench-perf-baseline")
    path = Path(given) if given else paths.FIXTURES / "baselines" / f"{plan.scenario}-aisbench.json"
    if not path.is_file():
        if given:
            fail("AISBench perf baseline file", "an existing JSON file", "missing", str(path),
                 "wrong --aisbench-perf-baseline path", "pass the path of a baseline JSON (see conformance/aisperf.py)",
                 kind="kit")
        return {}
    try:
        return ap.parse_baselines(path.read_text())
    except ValueError as exc:
        fail("AISBench perf baseline file", "per-workload perf baselines", str(exc), str(path),
             "the file does not follow aisperfparse.parse_baselines", "fix the file", kind="kit")


def _config(plan, helper: Helper, workdir: str, dataset_dir: str, tokenizer: str) -> str:
    url = urlsplit(plan.expect.entrypoint)
    return ap.helper_config(dataset_dir, helper.work_path, plan.expect.served_name, tokenizer, url.hostname or "",
                            url.port or 80, f"{workdir}/outputs", ap.pod_info(plan.expect.apis,
                                                                              plan.expect.external_pool))


def _scrub_api_config(runner: Runner, workdir: str) -> None:
    """The helper substitutes the key into ``temp_api.py`` (linked from AISBench's configs): redact it."""
    if not apikey.get():
        return
    try:
        runner.write(f"{workdir}/temp_api.py", redact(runner.read(f"{workdir}/temp_api.py")))
    except OSError:
        pass  # the helper never got that far


def _read_optional(runner: Runner, path: str) -> str | None:
    try:
        return runner.read(path)
    except OSError:
        return None


@pytest.fixture(scope="module", params=sorted(ap.WORKLOADS))
def aisperf(request, plan, run_dir, pytestconfig, helper, http) -> tuple[ap.Workload, ap.PerfRun]:
    """Run one workload once for the module; returns it and what AISBench measured."""
    w = ap.WORKLOADS[request.param]
    runner, where = helper.runner, helper.runner.where
    check(w.tokens <= plan.expect.max_model_len, f"{w.name}: request length within --max-model-len",
          f"{w.tokens:,} tokens (input + output) <= max_model_len", plan.expect.max_model_len, plan.expect.entrypoint,
          "the deployment is not the guide's performance configuration",
          "deploy with the K3 guide §8.2 values (--max-model-len 250000) before the AISBench runs",
          kind="environment")
    workdir, dataset_dir = runner.workdir(f"aisperf-{w.name}"), runner.workdir(f"aisperf-{w.name}-dataset")
    code, out = runner.run(["cp", "-a", f"{helper.tools}/.", workdir], 300)
    check(code == 0, f"copy of {ap.HELPER}", f"{helper.tools} copied to {workdir}", out.strip()[-300:], where,
          "the helper checkout is unreadable or the disk is full", "check the path and free space", kind="environment")
    tokenizer = pytestconfig.getoption("--bench-tokenizer") or plan.expect.model_path
    config = _config(plan, helper, workdir, dataset_dir, tokenizer)
    runner.write(f"{workdir}/config.py", config)
    evidence = run_dir / "evidence" / "bench"
    evidence.mkdir(parents=True, exist_ok=True)
    stem = f"aisbench-perf-{w.name}"
    argv = w.argv()
    # the guide: save the commands used
    (evidence / f"{stem}-argv.txt").write_text(f"# on {where}, in {workdir} ({ap.GUIDE})\n{shlex.join(argv)}\n")
    (evidence / f"{stem}-config.py").write_text(config)
    try:
        code, out = runner.run(argv, TIMEOUT_S, env=api_key_env(), cwd=workdir, watch=watched(plan, http, pytestconfig))
    finally:
        _scrub_api_config(runner, workdir)
    (evidence / f"{stem}-stdout.log").write_text(redact(out))
    require_service_up(code, out, f"{ap.HELPER} {w.name}", where, f"{stem}-stdout.log")
    errors = benchparse.aisbench_errors(out)
    check(code == 0 and not errors, f"{ap.HELPER} {w.name}", "exit 0 and no ERROR lines",
          f"exit {code}; " + (" | ".join(errors[:3]) or "no ERROR lines"), where,
          "dataset generation failed (tokenizer or DATASET_PATH), the service was unreachable or rejected requests, "
          "or the prefix-cache metrics could not be read from POD_INFO",
          f"read evidence/bench/{stem}-stdout.log; pass --bench-tokenizer if the model path does not exist there")
    return w, _results(runner, where, workdir, out, evidence, stem)


def _results(runner: Runner, where: str, workdir: str, out: str, evidence: Path, stem: str) -> ap.PerfRun:
    directory, task = ap.result_dir(out, workdir), ap.task_of(out)
    if not directory or not task:
        fail("AISBench performance result", "'Performance Results of task' and 'Performance Result files located "
             "in' lines", "none", where, "AISBench finished without summarising",
             f"read evidence/bench/{stem}-stdout.log", kind="environment")
    json_path = f"{directory}/{task[1]}.json"
    text = _read_optional(runner, json_path)
    if text is None:
        fail("AISBench result JSON", json_path, "unreadable", where,
             "AISBench printed a result directory without writing the result", f"list {directory}",
             kind="environment")
    (evidence / f"{stem}-result.json").write_text(redact(text))
    per_request = _read_optional(runner, f"{directory}/{task[1]}.csv")
    if per_request is not None:
        (evidence / f"{stem}-requests.csv").write_text(redact(per_request))
    try:
        return ap.parse_run(text, per_request, out)
    except ValueError as exc:
        fail("AISBench result files", "AISBench's performance JSON and CSV", str(exc), json_path,
             "an AISBench version whose result format k3lab does not know", "record the AISBench version and "
             "report the format to the k3lab maintainers", kind="kit")


@pytest.mark.conformance(
    id="aisbench-perf.test_aisbench_perf_requests_succeed",
    remedy="read the failing requests in evidence/ and the engines' logs; the workload must complete before its numbers count.")
def test_aisbench_perf_requests_succeed(aisperf, plan, run_dir, record_property):
    w, run = aisperf
    label = ap.not_comparable(plan.target)
    for key in REPORTED:
        if key in run.metrics:
            record_property(f"perf.{key}", run.metrics[key])
    if run.prefix:
        record_property("perf.prefix_cache_hit_rate", run.prefix.hbm_hit_rate)
        record_property("aisbench_perf.prefix_cache", run.prefix.describe())
    if label:
        record_property("aisbench_perf.comparable", f"no: {label}")
    summary = {"guide": ap.GUIDE, "workload": w.name, "argv": w.argv(), "target": plan.target,
               "comparable": label is None, "note": label, **run.to_json()}
    (run_dir / "evidence" / "bench" / f"aisbench-perf-{w.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    bad = [g for g in ap.requests_gates(run.metrics, w.data_num) if not g.ok]
    check(not bad, f"AISBench {w.name} requests", f"all {w.data_num} sent and succeeded, none failed",
          "; ".join(map(str, bad)), plan.expect.entrypoint,
          "the service rejected, dropped or timed out requests of this length",
          f"read evidence/bench/aisbench-perf-{w.name}-stdout.log and the engine logs around the run")


@pytest.mark.conformance(
    id="aisbench-perf.test_aisbench_perf_within_baseline",
    remedy="compare the run with the baseline's deployment (versions, topology); record a new baseline only for an accepted change (k3lab baseline record).")
def test_aisbench_perf_within_baseline(aisperf, baselines, plan, pytestconfig):
    w, run = aisperf
    label = ap.not_comparable(plan.target)
    if label:
        skip("no-baseline", f"no fixtures/baselines/ gate for this run: {label}")
    baseline = baselines.get(w.name)
    if baseline is None:
        skip("no-baseline", f"no fixtures/baselines/{plan.scenario}-aisbench.json entry for {w.name}; "
                    f"make one from evidence/bench/aisbench-perf-{w.name}.json")
    mismatch = ap.workload_mismatch(baseline.workload, w)
    check(not mismatch, f"{w.name}: baseline workload", w.describe(), "; ".join(mismatch),
          baseline.source or "baseline file", "the baseline was measured with another workload",
          "record the baseline with the guide's command", kind="kit")
    threshold = pytestconfig.getoption("--perf-threshold") or baseline.threshold or benchparse.THRESHOLD
    gates = benchparse.gate_perf(run.metrics, baseline.metrics, threshold)
    bad = [g for g in gates if not g.ok]
    check(not bad, f"AISBench {w.name} against the baseline", "; ".join(f"{g.metric} {g.rule}" for g in gates),
          "; ".join(map(str, bad)), f"{plan.expect.entrypoint} (baseline: {baseline.source or 'unnamed'})",
          "throughput fell or latency rose past the threshold: changed flags (§8.2), a degraded node or link, "
          "a different cache state, or a product regression",
          "compare this run's plan and evidence with the baseline run's; re-run once to rule out noise before "
          "filing a regression")
