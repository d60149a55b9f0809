"""MkDocs hook: the Benchmarks page's tables from ``nox -s bench`` output (build/bench.json), never pasted prose.

The page holds the marker ``<!-- k3lab-bench -->``; at build time it is replaced with the numbers of the file
``$K3LAB_BENCH_JSON`` names, else ``build/bench.json`` beside mkdocs.yml. Without the file the page says so
and how to make it; the build never fails for a missing or partial file (a static-only run has no live
entries), only for one that is not JSON.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

MARKER = "<!-- k3lab-bench -->"
PAGE = "benchmarks.md"


def bench_file(config_dir: Path) -> Path:
    return Path(os.environ.get("K3LAB_BENCH_JSON") or config_dir / "build" / "bench.json")


def _num(value: Any, unit: str = " s") -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else ("yes" if value else "no")
    if isinstance(value, (int, float)):
        return f"{value:g}{unit}"
    return str(value)


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _static_rows(doc: dict) -> list[str]:
    targets = doc.get("targets", {})
    rows = []
    rp = doc.get("render_preflight") or {}
    if rp:
        rows.append(_row("render + preflight, all twelve, one process (median)", _num(rp.get("all_twelve_s_median")),
                         targets.get("render_preflight_all_twelve_s", "-"), "-"))
    cli = doc.get("cli_render_preflight") or {}
    if cli:
        seen = (f"best {_num(cli.get('best_wall_s'))} wall, {_num(cli.get('best_cpu_s'))} CPU; floor "
                f"{_num(cli.get('floor_import_pydantic_yaml_s'))}")
        rows.append(_row(f"render + preflight as {cli.get('processes', '?')} CLI processes", seen,
                         _num(cli.get("target_s")), _num(cli.get("meets_target"))))
    diag = doc.get("diagnosis") or {}
    if diag:
        seen = (f"best {_num(diag.get('best_s'))} wall, {_num(diag.get('best_cpu_s'))} CPU; judged on "
                f"{diag.get('judged_on', '-')}; found {diag.get('top', '-')}")
        rows.append(_row(f"diagnosis, {diag.get('nodes', '?')} nodes, {_num(diag.get('log_mb'), ' MB')} of logs",
                         seen, _num(targets.get("diagnosis_17_nodes_100_mb_s")), _num(diag.get("meets_target"))))
    return rows


def _scenario_rows(doc: dict) -> list[str]:
    rows = []
    for sid, res in (doc.get("scenarios") or {}).items():
        trips = res.get("exec_round_trips_per_node") or {}
        rows.append(_row(sid, _num((res.get("timings") or {}).get("up_s")), _num(res.get("conformance_s")),
                         _num(res.get("cycle_s")), _num((res.get("floor_s") or {}).get("value")),
                         max(trips.values()) if trips else "-", res.get("conformance_summary", "-")))
    return rows


def _lab_rows(doc: dict) -> list[str]:
    rows = []
    lab = doc.get("lab_a3_pd_1m")
    if isinstance(lab, dict):
        if "skipped" in lab:
            rows.append(_row("a3_pd_1m cycle on the emulated lab", f"skipped: {lab['skipped']}", "-", "-"))
        else:
            targets = doc.get("targets", {})
            rows.append(_row("a3_pd_1m cycle on the emulated lab", _num(lab.get("cycle_s")),
                             _num(targets.get("lab_a3_pd_1m_cycle_s")), f"exit {lab.get('exit', '-')}"))
            rows.append(_row("its host and hardware stages", _num(lab.get("stages_s")),
                             _num(targets.get("lab_a3_pd_1m_stages_s")), _num(lab.get("stages_meet_target"))))
            rows.append(_row("exec round trips per node (most)", _num(lab.get("exec_round_trips_max"), ""),
                             _num(targets.get("exec_round_trips_per_node"), ""), "-"))
    fast = doc.get("lab_fail_fast_a3_pd_1m")
    if isinstance(fast, dict):
        if "skipped" in fast:
            rows.append(_row("time to the first actionable failure", f"skipped: {fast['skipped']}", "-", "-"))
        for fault, res in fast.items():
            if isinstance(res, dict):
                rows.append(_row(f"fault `{fault}` on {res.get('node', '?')}: exit {res.get('exit', '-')}",
                                 _num(res.get("seconds")), _num(fast.get("target_s")), _num(res.get("meets_target"))))
    return rows


def render(doc: dict, source: str, written: str) -> str:
    """The tables for one bench document."""
    machine = doc.get("machine") or {}
    out = [f"From `{source}`, written {written}; Python {machine.get('python', '?')} on "
           f"{machine.get('platform', '?')}, {machine.get('cpus', '?')} cores.", ""]
    head = ["| measured | seen | target | met |", "|---|---|---|---|"]
    out += head + _static_rows(doc) + [""]
    scenarios = _scenario_rows(doc)
    if scenarios:
        out += ["On the simulator:", "",
                "| scenario | up | conformance | cycle | floor | exec round trips (most per node) | suite |",
                "|---|---|---|---|---|---|---|", *scenarios, ""]
    else:
        out += ["No live entries: this run was static only (`k3lab bench --no-live`).", ""]
    lab = _lab_rows(doc)
    if lab:
        out += ["On the emulated 8-host lab:", "", *head, *lab, ""]
    return "\n".join(out)


def section(path: Path, shown: str) -> str:
    if not path.is_file():
        return (f"No `{shown}` at build time: run `nox -s bench` (or `k3lab bench --no-live --out "
                "build/bench.json`), then `nox -s docs`.\n")
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not the JSON nox -s bench writes ({exc})") from None
    written = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return render(doc if isinstance(doc, dict) else {}, shown, written)


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs' hook signature
    if page.file.src_uri != PAGE or MARKER not in markdown:
        return markdown
    root = Path(config["config_file_path"]).parent
    path = bench_file(root)
    shown = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    return markdown.replace(MARKER, section(path, shown))
