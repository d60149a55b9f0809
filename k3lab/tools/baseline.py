"""``k3lab baseline record RUN``: a perf baseline from a ``--perf`` run, with its provenance.

The baseline is what ``conformance/perf.py`` reads (``fixtures/baselines/<scenario>.json``): the
workload the numbers were measured with, the gated metrics and the threshold, plus where they come
from: the run, the component versions read from the nodes (``versions.json``), the hardware
(driver and ``npu-smi`` versions, node count, platform), the date and the benchmark command.

Numbers measured on the simulator are not comparable with a lab's and never gate, so a sim run is
refused (exit 2).
"""
from __future__ import annotations

import datetime as _dt
import json
import shlex
from pathlib import Path
from typing import Any, TypedDict

from k3lab import formats, outputs, paths
from k3lab.conform import benchparse
from k3lab.errors import UsageError
from k3lab.launch import versions
from k3lab.model import catalog, numbers, runs, safeyaml, targetkinds
from k3lab.reports import report

# the metrics a baseline gates: throughput up, latency down (benchparse.gate_perf)
GATED = ("output_throughput", "request_throughput", "mean_ttft_ms", "mean_tpot_ms")


class Hardware(TypedDict):
    platform: str | None
    nodes: int
    driver: str | None  # as versions.json read it from the nodes
    npu_smi: str | None


class Provenance(TypedDict):
    run: str
    scenario: str
    target: str
    recorded: str  # when this baseline was written (UTC, ISO 8601)
    measured: str | None  # the bench result's own date
    command: str | None  # the saved vllm bench serve command line
    versions: dict[str, str | None]  # versions.json's summary
    hardware: Hardware


class Baseline(TypedDict):
    """A baseline file as conformance/perf.py reads it (benchparse.parse_baseline), with its provenance."""

    source: str
    workload: dict[str, Any]  # vllm bench serve's num_prompts, max_concurrency, request_rate, random lengths
    metrics: dict[str, float]  # GATED metric -> value
    threshold: float
    provenance: Provenance


def build(run_dir: str | Path, threshold: float | None = None) -> tuple[str, Baseline]:
    """(scenario, baseline document) of a run directory; UsageError when it cannot be one."""
    run_dir = Path(run_dir)
    run, sid, target = _lab_run(run_dir)
    result = _bench_result(run_dir)
    try:  # NaN, Infinity, true, 0 or a negative number is no baseline
        metrics = {m: numbers.measured(result[m], m, lo_open=True) for m in GATED if m in result}
    except ValueError as exc:
        raise UsageError(f"{run_dir / 'evidence' / 'bench' / 'perf-result.json'}: {exc}") from None
    if not metrics:
        raise UsageError(f"{run_dir / 'evidence' / 'bench' / 'perf-result.json'}: none of {', '.join(GATED)} in the result")
    workload = {k: result[k] for k in ("num_prompts", "max_concurrency", "request_rate") if result.get(k) is not None}
    command = _bench_command(run_dir, workload)
    summary = versions.load(run_dir).get("summary") or {}
    doc = Baseline(
        source=f"k3lab baseline record {run_dir.name}",
        workload=workload,
        metrics=metrics,
        threshold=threshold if threshold is not None else benchparse.THRESHOLD,
        provenance=Provenance(
            run=run.state.get("run") or run_dir.name,
            scenario=sid,
            target=target,
            recorded=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            measured=result.get("date"),
            command=command,
            versions=summary,
            hardware=Hardware(platform=(run.plan or {}).get("platform"), nodes=len(run.node_names),
                              driver=summary.get("driver"), npu_smi=summary.get("npu_smi")),
        ),
    )
    benchparse.parse_baseline(json.dumps(doc, allow_nan=False))  # what conformance/perf.py will read must parse
    return sid, doc


def _lab_run(run_dir: Path):
    """(run, scenario, target) of a lab run directory; a sim run makes no baseline."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a run directory")
    run = report.load(run_dir)
    sid = run.scenario
    if not sid:
        raise UsageError(f"{run_dir}: no plan.json naming the scenario")
    if sid not in catalog.SCENARIOS:  # it names the baseline file: never a path (../)
        raise UsageError(f"{run_dir}: plan.json names scenario {sid!r}, which is not in the catalog")
    target = run.target
    if target not in targetkinds.KINDS:
        raise UsageError(f"{run_dir}: plan.json names target {target!r}, which the kit does not know")
    if targetkinds.kind(target).simulated:
        raise UsageError(f"{run_dir}: a simulator run; its perf numbers are not comparable with a lab's and never "
                         "gate, so they make no baseline (record from a lab run: k3lab cycle ID -i lab.yaml -- --perf)")
    return run, sid, target


def _bench_result(run_dir: Path) -> dict[str, Any]:
    """vllm bench serve's result document (vllm's schema, not this kit's: each value is checked where read)."""
    result_path = runs.within(run_dir, "evidence/bench/perf-result.json")
    if not result_path.is_file():
        raise UsageError(f"{run_dir}: no evidence/bench/perf-result.json (run the cycle with -- --perf)")
    try:
        return benchparse.parse_bench_result(safeyaml.read_capped(result_path, "perf result", runs.MAX_BYTES))
    except (ValueError, OSError) as exc:
        raise UsageError(f"{result_path}: not a vllm bench serve result: {exc}") from None


def _bench_command(run_dir: Path, workload: dict[str, Any]) -> str | None:
    """The saved vllm bench serve command line; its random lengths join ``workload`` (not in the result)."""
    argv = runs.within(run_dir, "evidence/bench/perf-argv.txt")
    if not argv.is_file():
        return None
    text = safeyaml.read_capped(argv, "benchmark command", 1 << 20)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    command = lines[-1] if lines else None
    try:
        words = shlex.split(command or "")
    except ValueError as exc:  # an unbalanced quote: not a command line this kit saved
        raise UsageError(f"{argv}: not a vllm bench serve command line ({exc})") from None
    for flag in ("--random-input-len", "--random-output-len"):
        if flag in words[:-1]:
            value = words[words.index(flag) + 1]
            if not value.isdigit() or not 0 < int(value) <= 10_000_000:
                raise UsageError(f"{argv}: {flag} {value!r} is not a token count (a whole number > 0)")
            workload[flag[2:].replace("-", "_")] = int(value)
    return command


def cmd_baseline(args) -> int:
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise UsageError(f"--threshold must be in (0, 1], not {args.threshold}")
    sid, doc = build(args.run, args.threshold)
    if args.out:
        out = outputs.check_file(args.out, args.force)
    else:
        out = paths.FIXTURES / "baselines" / f"{sid}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out = outputs.check_file(out, args.force, flag="baseline")
    outputs.write_file(out, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    formats.emit(args, {"scenario": sid, "metrics": doc["metrics"], "out": str(out)},
                 lambda d: formats.say(f"baseline for {sid}: {', '.join(f'{k}={v:g}' for k, v in d['metrics'].items())} -> {out}"))
    return 0
