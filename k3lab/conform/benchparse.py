"""Build benchmark commands and parse and gate their results; pure functions, no subprocesses.

* ``vllm bench serve``: the K3.1 Pro guide §8.2 command, result JSON per vllm ``benchmarks/serve.py``.
  Gate against a baseline like the vllm-ascend nightly rule: throughput >= threshold x baseline,
  latency <= baseline / threshold (default threshold 0.97).
* AISBench accuracy: the last column of the first row of the summary CSV must lie within
  ``baseline +/- tolerance`` points (default 1.0), as vllm-ascend ``tools/aisbench.py`` checks it;
  baselines are the guide's §7 figures.
* AISBench performance: ``"Output Token Throughput": {"total": "123.4 token/s"}`` >= threshold x baseline.
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from k3lab.model import apikey, numbers

THRESHOLD = 0.97  # vllm-ascend nightly perf default
TOLERANCE = 1.0   # vllm-ascend nightly accuracy default, absolute points

# K3.1 Pro guide §8.2: 16 random prompts through the proxy, concurrency 1, 1024 in / 128 out.
GUIDE_WORKLOAD: dict[str, Any] = {"random_input_len": 1024, "random_output_len": 128, "num_prompts": 16,
                                  "max_concurrency": 1, "request_rate": "inf", "seed": 0}

# K3.1 Pro guide §7 (vllm-api-general-chat, PD separation, 64 cards). The K3 guide gives no figures.
GUIDE_ACCURACY_MODEL = "kimi-k3.1-pro"
GUIDE_ACCURACY = {("A3", "gpqa"): 92.42, ("A3", "mmmu_pro"): 80.75,
                  ("950DT", "gpqa"): 94.44, ("950DT", "mmmu_pro"): 81.40}
# The guide names datasets, not AISBench tasks: GPQA as vllm-ascend's nightly runs it, MMMU Pro's
# vision task for the multimodal service (override with --aisbench-task).
AISBENCH_TASKS = {"gpqa": "gpqa_gen_0_shot_cot_chat_prompt", "mmmu_pro": "mmmu_pro_vision_gen"}
AISBENCH_DONE = {"accuracy": re.compile(r"write csv to (\S.*)"),
                 "performance": re.compile(r"Performance Result files locate(?:d)? in (\S.*)")}


@dataclass(frozen=True)
class Gate:
    metric: str
    value: float | None
    limit: float
    rule: str
    ok: bool

    def __str__(self) -> str:
        shown = "missing" if self.value is None else f"{self.value:g}"
        return f"{self.metric} {shown} ({'ok' if self.ok else 'FAILS'} {self.rule})"


# ----------------------------------------------------------------------------- vllm bench serve


def bench_serve_argv(base_url: str, model: str, tokenizer: str, result_dir: str, tokenizer_mode: str | None = None,
                     workload: dict[str, Any] | None = None) -> list[str]:
    """The guide's §8.2 command; ``workload`` overrides its lengths, counts and rate."""
    w = {**GUIDE_WORKLOAD, **(workload or {})}
    unknown = sorted(set(w) - set(GUIDE_WORKLOAD))
    if unknown:
        raise ValueError(f"unknown workload key(s) {', '.join(unknown)}; known: {', '.join(GUIDE_WORKLOAD)}")
    argv = ["vllm", "bench", "serve", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
            "--tokenizer", tokenizer]
    if tokenizer_mode:
        argv += ["--tokenizer-mode", tokenizer_mode]
    return argv + ["--trust-remote-code", "--dataset-name", "random",
                   "--random-input-len", str(w["random_input_len"]), "--random-output-len", str(w["random_output_len"]),
                   "--num-prompts", str(w["num_prompts"]), "--max-concurrency", str(w["max_concurrency"]),
                   "--request-rate", str(w["request_rate"]), "--ignore-eos", "--seed", str(w["seed"]),
                   "--save-result", "--result-dir", result_dir]


def parse_bench_result(text: str) -> dict[str, Any]:
    """A result file; with ``--append-result`` it holds one JSON document per line: the last counts."""
    text = text.strip()
    if not text:
        raise ValueError("empty vllm bench result")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = json.loads(text.splitlines()[-1])
    for key in ("completed", "output_throughput", "mean_ttft_ms"):
        if key not in doc:
            raise ValueError(f"not a vllm bench serve result: no {key!r}")
    return doc


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def requests_gates(result: dict[str, Any], num_prompts: int) -> list[Gate]:
    """The guide: check that all requests succeeded (and that there were some: 0 of 0 measures nothing)."""
    completed, failed = result.get("completed"), result.get("failed", 0)
    return [Gate("completed", completed, num_prompts, f"== {num_prompts} prompts (> 0)",
                 _is_count(completed) and completed == num_prompts > 0),
            Gate("failed", failed, 0, "== 0", _is_count(failed) and failed == 0)]


def _higher_is_better(metric: str) -> bool:
    if metric.endswith(("_throughput", "_goodput", "_per_s")):
        return True
    if metric.endswith("_ms"):
        return False
    raise ValueError(f"baseline metric {metric!r}: neither a throughput (*_throughput) nor a latency (*_ms)")


def gate_perf(result: dict[str, Any], baseline: dict[str, float], threshold: float = THRESHOLD) -> list[Gate]:
    """One gate per baseline metric: throughput >= threshold*baseline, latency <= baseline/threshold."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], not {threshold}")
    gates = []
    for metric, base in baseline.items():
        # NaN, Infinity, true or a negative number is no measurement: it fails its gate
        value = numbers.finite_or_none(result.get(metric))
        if _higher_is_better(metric):
            limit, rule = threshold * base, f">= {threshold:g} x baseline {base:g}"
            ok = value is not None and value >= limit
        else:
            limit, rule = base / threshold, f"<= baseline {base:g} / {threshold:g}"
            ok = value is not None and value <= limit
        gates.append(Gate(metric, value, limit, rule, ok))
    return gates


@dataclass(frozen=True)
class Baseline:
    """``fixtures/baselines/<scenario>.json``: the workload it was measured with and its metrics."""
    metrics: dict[str, float]
    workload: dict[str, Any]
    threshold: float | None = None
    source: str = ""


def parse_baseline(text: str) -> Baseline:
    doc = json.loads(text)
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        raise ValueError("baseline needs a non-empty 'metrics' object, e.g. {\"output_throughput\": 120.0}")
    for metric in metrics:
        _higher_is_better(metric)  # rejects metrics without a known direction early
    threshold = doc.get("threshold")
    if threshold is not None:
        threshold = numbers.measured(threshold, "baseline threshold", 0, 1, lo_open=True)
    return Baseline({k: numbers.measured(v, f"baseline {k}", lo_open=True) for k, v in metrics.items()},
                    dict(doc.get("workload") or {}), threshold, str(doc.get("source", "")))


# -------------------------------------------------------------------------------------- AISBench


def aisbench_argv(models: str, task: str, mode: str | None = None, num_prompts: int | None = None) -> list[str]:
    argv = ["ais_bench", "--models", models, "--datasets", task]
    if mode:
        argv += ["--mode", mode]
    if num_prompts:
        argv += ["--num-prompts", str(num_prompts)]
    return argv


def aisbench_model_config(host: str, port: int, model: str, max_out_len: int, batch_size: int,
                          temperature: float, top_p: float | None = None, stream: bool = False) -> str:
    """A ``vllm_api_general_chat``-shaped model config. The API key is read from the environment when
    AISBench loads the file, so it is never written to disk."""
    gen = f"temperature={temperature!r}, ignore_eos=False" + (f", top_p={top_p!r}" if top_p is not None else "")
    return f'''import os

from ais_bench.benchmark.models import VLLMCustomAPIChat
from ais_bench.benchmark.utils.postprocess.model_postprocessors import extract_non_reasoning_content

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="vllm-api-general-chat",
        path="",
        model={model!r},
        stream={stream!r},
        request_rate=0,
        retry=2,
        api_key=os.environ.get("{apikey.ENV}", ""),
        host_ip={host!r},
        host_port={int(port)},
        url="",
        max_out_len={int(max_out_len)},
        batch_size={int(batch_size)},
        trust_remote_code=False,
        generation_kwargs=dict({gen}),
        pred_postprocessor=dict(type=extract_non_reasoning_content),
    )
]
'''


def aisbench_result_path(stdout: str, case: str = "accuracy") -> str | None:
    """Where AISBench says it wrote the result (it prints the path when done)."""
    pattern = AISBENCH_DONE[case]
    for line in reversed(stdout.splitlines()):
        m = pattern.search(line)
        if m:
            return m.group(1).strip()
    return None


def aisbench_errors(stdout: str, last: int = 100) -> list[str]:
    """Lines with ERROR among the last ``last`` lines fail the case, as the nightly harness rules."""
    return [line.strip() for line in stdout.splitlines()[-last:] if "ERROR" in line]


def parse_aisbench_accuracy(csv_text: str) -> float:
    """The last column of the first row: ``dataset,version,metric,mode,<model abbr>``."""
    rows = [r for r in csv.reader(io.StringIO(csv_text)) if r]
    if len(rows) < 2:
        raise ValueError("AISBench summary CSV has no result row")
    cell = rows[1][-1].strip()
    try:
        return float(cell)
    except ValueError:
        raise ValueError(f"AISBench reports {cell!r} for {rows[1][0]} "
                         "(the evaluation did not produce a score)") from None


def parse_aisbench_perf(doc: str | dict[str, Any]) -> float:
    """``Output Token Throughput``.total, e.g. ``"123.4 token/s"`` -> 123.4."""
    data = json.loads(doc) if isinstance(doc, str) else doc
    try:
        raw = data["Output Token Throughput"]["total"]
    except (KeyError, TypeError):
        raise ValueError("AISBench performance result has no 'Output Token Throughput'.total") from None
    return float(str(raw).replace("token/s", "").strip())


def gate_accuracy(acc: float, baseline: float, tolerance: float = TOLERANCE) -> Gate:
    lo, hi = baseline - tolerance, baseline + tolerance
    return Gate("accuracy", acc, baseline, f"within {baseline:g} +/- {tolerance:g}",
                numbers.finite_or_none(acc) is not None and lo <= acc <= hi)


def gate_throughput(value: float, baseline: float, threshold: float = THRESHOLD) -> Gate:
    limit = threshold * baseline
    ok = numbers.finite_or_none(value) is not None and value >= limit  # Infinity is no throughput
    return Gate("output_token_throughput", value, limit, f">= {threshold:g} x baseline {baseline:g}", ok)


def guide_accuracy(served_name: str, platform: str, dataset: str) -> float | None:
    """The guide's figure for this model, platform and dataset; None where the guides give none."""
    if served_name != GUIDE_ACCURACY_MODEL:
        return None
    return GUIDE_ACCURACY.get((platform, dataset))
