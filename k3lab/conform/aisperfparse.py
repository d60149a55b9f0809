"""AISBench performance runs (Kimi K3 guide §8.3-8.4, K3.1 Pro guide §8.1): workloads, helper config, parsers, gates.

Pure functions, tested offline on the real tools' output formats; the check that runs them is
:mod:`k3lab.conform.aisperf`.

The guide runs ``aisbench_test.py`` (github.com/rayn-zzz/aisbench_auto_tools_prefix, configured by its
``config.py``). The helper builds a GSM8K-derived dataset of the requested lengths, points a
``VLLMCustomAPIChatStream`` model config at the service and runs ``ais_bench --mode perf --summarizer
default_perf``; with ``--dataset_type prefix_cache --prefix_test`` it first sends the shared prefix
(``--dp`` requests, default 1) and then the full dataset, diffing ``vllm:prefix_cache_{queries,hits}_total``
and ``vllm:external_prefix_cache_*`` on ``POD_INFO`` around each run. What is read back:

* AISBench's end-to-end result ``<work-dir>/<ts>/performances/<model abbr>/<dataset abbr>.json``
  (``{"Total Requests": {"total": 16}, "Output Token Throughput": {"total": "123.4 token/s"}, ...}``),
  whose directory AISBench prints as ``Performance Result files located in <dir>.``;
* the per-request statistics ``<dataset abbr>.csv`` (``Performance Parameters,Stage,Average,Min,Max,
  Median,P75,P90,P99,N`` rows such as ``TTFT,total,2006.0 ms,...``); TTFT/TPOT rows are absent when
  AISBench measured none (non-streaming, or one output token);
* the helper's console block ``Prefix cache hit summary`` (its ``ALL_PODS`` row:
  ``hbm_hit_rate  hbm(hit/query)  external_hit_rate  external(hit/query)``), printed after each
  prefix-dataset run (the warm-up's, then the full run's: only the latter is read).
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from k3lab.conform import benchparse
from k3lab.model import apikey, targetkinds

GUIDE = "Kimi K3 guide §8.4"
HELPER = "aisbench_test.py"
SUMMARIZER = "default_perf"  # the helper's DEFAULT_PERFORMANCE_TEST; its stage is "total"
STAGE = "total"


@dataclass(frozen=True)
class Workload:
    """One ``aisbench_test.py`` command of the guide; field names are the helper's options."""
    name: str
    input_len: int
    output_len: int
    data_num: int = 16
    concurrency: int = 4
    request_rate: int = 0
    repeat_rate: str = "0"
    dataset_type: str | None = None  # "prefix_cache": every request starts with a shared prefix
    prefix_test: bool = True

    def argv(self) -> list[str]:
        """The guide's command, option for option."""
        argv = ["python3", HELPER, "--input_len", str(self.input_len), "--output_len", str(self.output_len),
                "--data_num", str(self.data_num), "--concurrency", str(self.concurrency),
                "--request_rate", str(self.request_rate)]
        if self.dataset_type:
            argv += ["--dataset_type", self.dataset_type]
        argv += ["--repeat_rate", self.repeat_rate]
        return argv + (["--prefix_test"] if self.prefix_test else [])

    @property
    def tokens(self) -> int:
        return self.input_len + self.output_len

    def describe(self) -> str:
        prefix = f", {float(self.repeat_rate):.0%} shared prefix" if self.dataset_type == "prefix_cache" else ""
        return (f"{self.data_num} requests of {self.input_len:,} in / {self.output_len:,} out tokens at "
                f"concurrency {self.concurrency}{prefix}")


# §8.4: "8K input, 1K output, and no prefix-cache hit" and "128K input, 1K output, and a 99% prefix-cache
# hit rate". The first passes --repeat_rate 0 --prefix_test without --dataset_type: a normal dataset,
# on which the helper ignores --prefix_test.
WORKLOADS = {w.name: w for w in (
    Workload("8k-1k", 8192, 1024),
    Workload("128k-1k-prefix99", 131024, 1024, repeat_rate="0.99", dataset_type="prefix_cache"),
)}
_WORKLOAD_KEYS = tuple(f.name for f in fields(Workload) if f.name != "name")


# ----------------------------------------------------------------------------------- the helper


def pod_info(apis: list[Any], external_pool: bool) -> list[str]:
    """``POD_INFO``: the engine APIs whose /metrics hold the prefix-cache counters. The helper's README:
    mixed deployments the serving node, PD the prefill engines, and with a KV pool every engine."""
    urls = [a.url for a in apis if external_pool or a.role != "decode"]
    return [urlsplit(u).netloc for u in urls]


def helper_config(dataset_path: str, work_path: str, model_name: str, model_path: str, host_ip: str,
                  host_port: int, output_dir: str, pods: list[str]) -> str:
    """``config.py`` for ``aisbench_test.py`` with the guide's §8.3 fields. The API key is read from the
    environment when the helper imports it, so this file never holds it."""
    return f'''# written by k3lab (conformance/aisperf.py) for {HELPER}: Kimi K3 guide §8.3
import os

DATASET_PATH = {dataset_path!r}
WORK_PATH = {work_path!r}
MODEL_NAME = {model_name!r}
MODEL_PATH = {model_path!r}
HOST_IP = {host_ip!r}
HOST_PORT = {str(int(host_port))!r}
API_KEY = os.environ.get("{apikey.ENV}", "")
DEFAULT_PERFORMANCE_TEST = {SUMMARIZER!r}
OUTPUT_DIR = {output_dir!r}
# engine APIs for the per-DP prefix-cache metrics (guide: PD deployments list every relevant endpoint)
POD_INFO = {pods!r}
'''


def result_dir(stdout: str, cwd: str) -> str | None:
    """The directory of the last ``Performance Result files located in <dir>.`` line (the full run's)."""
    path = benchparse.aisbench_result_path(stdout, "performance")
    if not path:
        return None
    path = path[:-1] if path.endswith(".") else path  # AISBench ends the sentence with a full stop
    return path if path.startswith("/") else f"{cwd.rstrip('/')}/{path.removeprefix('./')}"


_TASK = re.compile(r"Performance Results of task:?\s*\[?(?P<model>[^\s/\[\]]+)/(?P<dataset>[^\s\]:]+)\]?\s*:")


def task_of(stdout: str) -> tuple[str, str] | None:
    """(model abbr, dataset abbr) of the last ``Performance Results of task [model/dataset]:`` line."""
    found = list(_TASK.finditer(stdout))
    return (found[-1]["model"], found[-1]["dataset"]) if found else None


# ------------------------------------------------------------------------------------- results

# AISBench's common metrics -> k3lab names (units in the name, as vllm bench serve's result names them);
# "Total generated tokens" is how releases before 2025-11 spelled "Total Generated Tokens".
COMMON = {"benchmark duration": "benchmark_duration_ms", "total requests": "total_requests",
          "failed requests": "failed_requests", "success requests": "success_requests",
          "concurrency": "concurrency", "max concurrency": "max_concurrency",
          "request throughput": "request_throughput", "total input tokens": "total_input_tokens",
          "total generated tokens": "total_output_tokens", "total output tokens": "total_output_tokens",
          "prefill token throughput": "prefill_token_throughput",
          "input token throughput": "input_token_throughput", "output token throughput": "output_token_throughput",
          "total token throughput": "total_token_throughput"}
REQUIRED = ("Total Requests", "Failed Requests", "Success Requests", "Output Token Throughput")
# per-request rows and statistics kept (CSV header -> name prefix)
LATENCIES = ("E2EL", "TTFT", "TPOT", "ITL")
STATS = {"Average": "mean", "Median": "median", "P90": "p90", "P99": "p99"}
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:ms|req/s|token/s)?\s*$")


def _number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = _NUMBER.match(str(value))
    if not m:
        raise ValueError(f"not a number with a unit AISBench prints: {value!r}")
    return float(m.group(1))


def parse_common(text: str) -> dict[str, float]:
    """The end-to-end result JSON (``<dataset abbr>.json``), stage ``total``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"AISBench performance result is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("AISBench performance result is not a JSON object")
    missing = [k for k in REQUIRED if not isinstance(doc.get(k), dict) or STAGE not in doc[k]]
    if missing:
        raise ValueError(f"not an AISBench performance result: no {STAGE!r} stage of {', '.join(missing)}")
    out = {}
    for key, stages in doc.items():
        name = COMMON.get(key.lower())
        if name and isinstance(stages, dict) and STAGE in stages:
            out[name] = _number(stages[STAGE])
    out["output_token_throughput"] = benchparse.parse_aisbench_perf(doc)  # the nightly harness's reading
    return out


def parse_request_stats(text: str) -> dict[str, float]:
    """The per-request CSV (``<dataset abbr>.csv``): mean/median/p90/p99 of E2EL, TTFT, TPOT and ITL in ms."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    if not rows or rows[0][:2] != ["Performance Parameters", "Stage"]:
        raise ValueError("not an AISBench per-request CSV: no 'Performance Parameters,Stage' header")
    header = rows[0]
    out = {}
    for row in rows[1:]:
        if len(row) != len(header) or row[0] not in LATENCIES or row[1] != STAGE:
            continue
        cells = dict(zip(header, row))
        for stat, prefix in STATS.items():
            if cells.get(stat, "") != "":
                out[f"{prefix}_{row[0].lower()}_ms"] = _number(cells[stat])
    return out


@dataclass(frozen=True)
class PrefixHits:
    """The helper's ``ALL_PODS`` row: token hits over queries, local (HBM) and external (KV pool)."""
    hbm_hit_rate: float       # percent, as printed
    hbm_hits: float
    hbm_queries: float
    external_hit_rate: float
    external_hits: float
    external_queries: float
    skipped: tuple[str, ...] = ()  # PODs whose counters could not be read before and after

    def describe(self) -> str:
        text = (f"HBM prefix-cache hits {self.hbm_hit_rate:.2f}% ({self.hbm_hits:.0f}/{self.hbm_queries:.0f} tokens), "
                f"external {self.external_hit_rate:.2f}% ({self.external_hits:.0f}/{self.external_queries:.0f})")
        return text + (f"; skipped PODs {', '.join(self.skipped)}" if self.skipped else "")


_NUM = r"(\d+(?:\.\d+)?)"
_ALL_PODS = re.compile(rf"ALL_PODS\s+{_NUM}%\s+{_NUM}/{_NUM}\s+{_NUM}%\s+{_NUM}/{_NUM}")
FULL_RUN = "[开始] 全量数据集测试"  # the helper's "[start] full dataset test" log line


def parse_prefix_hits(stdout: str) -> PrefixHits | None:
    """The ``Prefix cache hit summary`` of the full-dataset run (after the helper's last ``[开始]
    全量数据集测试`` line, so a warm-up's summary never stands in for it); None when there is none: a
    normal dataset, or no counters read (the helper then logs ``No prefix cache metrics found``)."""
    full = stdout[max(stdout.rfind(FULL_RUN), 0):]
    at = full.rfind("Prefix cache hit summary")
    if at < 0:
        return None
    m = _ALL_PODS.search(full, at)
    if not m:
        raise ValueError("'Prefix cache hit summary' without an ALL_PODS row")
    after = full[m.end():].splitlines()[1:3]  # the closing rule, then "Skipped PODs: a, b" if any
    skipped = next((line.split(": ", 1)[1] for line in after if line.startswith("Skipped PODs: ")), "")
    hbm_rate, hbm_hits, hbm_queries, ext_rate, ext_hits, ext_queries = (float(v) for v in m.groups())
    return PrefixHits(hbm_rate, hbm_hits, hbm_queries, ext_rate, ext_hits, ext_queries,
                      tuple(p.strip() for p in skipped.split(",") if p.strip()))


@dataclass
class PerfRun:
    metrics: dict[str, float]
    prefix: PrefixHits | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "prefix_cache": asdict(self.prefix) if self.prefix else None,
                "notes": self.notes}


def parse_run(result_json: str, request_csv: str | None, stdout: str) -> PerfRun:
    run = PerfRun(parse_common(result_json))
    if request_csv is None:
        run.notes.append("no per-request CSV: TTFT/TPOT not recorded")
    else:
        run.metrics.update(parse_request_stats(request_csv))
    run.prefix = parse_prefix_hits(stdout)
    return run


# ---------------------------------------------------------------------------------------- gates


def requests_gates(metrics: dict[str, float], data_num: int) -> list[benchparse.Gate]:
    """Every request of the dataset was sent and succeeded."""
    total, ok, failed = (metrics.get(k) for k in ("total_requests", "success_requests", "failed_requests"))
    return [benchparse.Gate("total_requests", total, data_num, f"== {data_num} (--data_num)", total == data_num),
            benchparse.Gate("success_requests", ok, data_num, f"== {data_num}", ok == data_num),
            benchparse.Gate("failed_requests", failed, 0, "== 0", failed == 0)]


def parse_baselines(text: str) -> dict[str, benchparse.Baseline]:
    """``{"threshold": .., "source": .., "workloads": {"8k-1k": {"workload": {..}, "metrics": {..}}, ..}}``;
    each workload's entry is a perf.py baseline (its own threshold and source win)."""
    doc = json.loads(text)
    entries = doc.get("workloads") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ValueError("AISBench perf baseline needs a non-empty 'workloads' object keyed by "
                         f"{', '.join(WORKLOADS)}")
    unknown = sorted(set(entries) - set(WORKLOADS))
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}")
    shared = {k: doc[k] for k in ("threshold", "source") if k in doc}
    return {name: benchparse.parse_baseline(json.dumps({**shared, **entry})) for name, entry in entries.items()}


def workload_mismatch(recorded: dict[str, Any], workload: Workload) -> list[str]:
    """Where the baseline's recorded workload differs from this one: numbers compare only at equal
    lengths, counts, concurrency and cache state."""
    unknown = sorted(set(recorded) - set(_WORKLOAD_KEYS))
    bad = [f"unknown workload key {k!r}" for k in unknown]
    for key in _WORKLOAD_KEYS:
        if key in recorded and str(recorded[key]) != str(getattr(workload, key)):
            bad.append(f"{key} {recorded[key]!r} in the baseline, {getattr(workload, key)!r} here")
    return bad


def not_comparable(target: str) -> str | None:
    """Why numbers of this run compare with no lab baseline (k3lab baseline/compare rule), else None."""
    kind = targetkinds.KINDS.get(target)
    if kind is None:
        return f"measured on an unknown target {target!r}: not comparable with a lab's numbers"
    return f"measured on {kind.where}: not comparable with a lab's numbers" if kind.simulated else None
