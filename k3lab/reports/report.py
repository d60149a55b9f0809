"""Acceptance reports for a run directory: ``summary.md`` and a self-contained ``report.html``.

``write_reports(run_dir)`` reads ``plan.json``, ``run-state.json`` and ``conformance-results.json``
(written by ``k3lab.conform.plugin``: the run's only record of its results; a run without it has none).
``junit.xml`` is output only: never read for results; a failed run's diagnosis is appended to it. Every
value may come from an inventory, so all of it is escaped, and the value of ``$K3LAB_API_KEY`` is redacted
wherever it appears.

``k3lab report RUN`` rebuilds them with the gate's verdict (k3lab.reports.runreports).
"""
from __future__ import annotations

import datetime as _dt
import html
import os
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

from k3lab import __version__, outputs
from k3lab.diagnosis.engine import Diagnosis
from k3lab.errors import InputError, printable
from k3lab.model import apikey, runs
from k3lab.reports import diagreport, failures
from k3lab.reports.reportsvg import topology_svg
from k3lab.reports.rows import Check, VerdictDoc
from k3lab.reports.templating import Markup, render_html

SECRET_ENV = apikey.ENV
REDACTED = apikey.REDACTED
FAILED = ("failed", "error")
NO_NODE = "deployment"  # matrix row for checks that are not about one node
NO_RESULTS = "none"  # a run whose suite did not run or did not finish: no conformance-results.json
JUNIT_NOT_READ = " (no conformance-results.json; junit.xml is output only, not read)"


redact = apikey.redact


def _scrub(value: Any) -> Any:
    """Redact every string of a loaded JSON document before anything is formatted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {redact(str(k)): _scrub(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------- loading


class Skipped(TypedDict):
    """A check that did not run here (the reports' 'Skipped and not applicable' table)."""

    nodeid: str
    node: str | None
    reason: str
    not_applicable: bool  # the gate's policy lists its reason


class Cell(TypedDict):
    """One node x area cell of the HTML matrix."""

    cls: str  # cell_class
    text: str  # passed/total
    title: str  # the outcome counts, its tooltip


class MatrixRow(TypedDict):
    name: str  # a plan node, or NO_NODE
    cells: list[Cell]  # one per area


@dataclass
class Run:
    dir: Path
    plan: dict[str, Any]
    state: dict[str, Any]
    tests: list[Check]
    source: str  # where the results came from
    exitstatus: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # artefacts left out: file and field
    preflight: dict[str, Any] = field(default_factory=dict)  # preflight.json: findings, accepted ones
    gate: VerdictDoc | None = None  # the gate's verdict of this run (k3lab.reports.runreports), when judged
    collected: list[str] | None = None  # what the suite collected (conformance-results.json)
    deselected: int = 0
    evidence: dict[str, list[str]] = field(default_factory=dict)  # group -> files (_evidence_files), walked once

    @property
    def scenario(self) -> str | None:
        """The scenario the run deployed: its plan's, else its run-state's."""
        return (self.plan or {}).get("scenario") or self.state.get("scenario") or None

    @property
    def target(self) -> str | None:
        return self.state.get("target") or (self.plan or {}).get("target") or None

    @property
    def node_names(self) -> list[str]:
        return [str(n.get("name")) for n in self.plan.get("nodes", [])]

    def count(self, outcome: str) -> int:
        return sum(t["outcome"] == outcome for t in self.tests)

    @property
    def verdict_label(self) -> str:
        """The verdict as the reports say it: the gate's label ('PASS with N waived MUST checks', #35) when judged."""
        label = self.gate.get("label") if self.gate else None
        return str(label or self.verdict)

    @property
    def verdict(self) -> str:
        """The gate's verdict when the run was judged (the word compare and release show), else the outcome rule."""
        if self.gate:
            return str(self.gate["verdict"])
        if any(t["outcome"] in FAILED for t in self.tests):
            return "FAIL"
        if not self.count("passed") or self.exitstatus not in (None, 0):
            return "INCOMPLETE"  # nothing passed, or pytest stopped early (interrupt, usage error)
        return "PASS"


def _json(path: Path) -> dict[str, Any]:
    """A run's JSON file through the one bounded reader: a FIFO, a device, a huge or deeply nested file
    is an InputError naming it (exit 2); a missing or half-written one is reported as what there is."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        doc = _scrub(runs.read_doc(path))
    except ValueError:  # half-written: report what there is
        return {}
    return doc if isinstance(doc, dict) else {}


def _artefact(read, run_dir: Path, name: str, problems: list[str]) -> dict[str, Any]:
    """A run artefact through its model (k3lab.model.runs), as plain data for the report; a missing file
    is nothing to report, a corrupted one is named and left out (report what there is)."""
    if not (run_dir / name).exists():
        return {}
    try:
        return _scrub(read(run_dir).model_dump(by_alias=True))
    except InputError as exc:
        problems.append(str(exc))
        return {}


def _plan(run_dir: Path, problems: list[str]) -> dict[str, Any]:
    """plan.json through the one plan reader (k3lab.model.runs.plan): a plan whose fields have the wrong type
    is named and left out like any corrupted artefact, never a crash three functions later; a half-written
    (not JSON) one is what there is, nothing (the gate says why it cannot be judged)."""
    from k3lab.model.plan import jsonable

    path = run_dir / runs.PLAN
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        return _scrub(jsonable(runs.plan(run_dir)))
    except InputError as exc:
        if "not valid JSON" not in str(exc):
            problems.append(str(exc))
        return {}


def load(run_dir: str | Path) -> Run:
    run_dir = Path(run_dir)
    problems: list[str] = []
    plan = _plan(run_dir, problems)
    state = _artefact(runs.run_state, run_dir, runs.RUN_STATE, problems)
    results = _artefact(runs.results, run_dir, runs.RESULTS, problems)
    if results.get("tests") is not None:
        tests, source = results["tests"], runs.RESULTS
    else:  # junit.xml is output only (a CI's view of the suite); the run's results are the plugin's record
        tests, source = [], NO_RESULTS + (JUNIT_NOT_READ if (run_dir / "junit.xml").exists() else "")
    run = Run(run_dir, plan, state, [], source, results.get("exitstatus"), results.get("versions") or {},
              problems)
    run.tests = [_normalise(t, run.node_names) for t in tests]
    run.preflight = _json(run_dir / "preflight.json")
    run.collected, run.deselected = results.get("collected"), results.get("deselected") or 0
    run.evidence = _walk_evidence(run_dir, run.problems)
    return run


def _node(t: dict[str, Any], nodeid: str, names: list[str]) -> str | None:
    """The result's node, else the plan node its parameter names (e.g. [p0] or [p0:8000])."""
    param = t.get("param") or (nodeid.rsplit("[", 1)[1][:-1] if nodeid.endswith("]") else None)
    if t.get("node") or not param:
        return t.get("node")
    return next((n for n in (param, param.split(":")[0]) if n in names), None)


def _normalise(t: dict[str, Any], names: list[str]) -> Check:
    """A row of the validated, redacted results (ResultRow.model_dump) as the reports read it."""
    nodeid = str(t.get("nodeid", "?"))
    props: dict[str, str] = t.get("properties") or {}
    meta = {key: str(t.get(key) or props.get(f"conformance.{key}") or "") for key in ("area", "id", "must")}
    return Check(nodeid=nodeid, area=meta["area"] or "other", id=meta["id"], must=meta["must"],
                 node=_node(t, nodeid, names), outcome=str(t.get("outcome", "error")),
                 duration=float(t.get("duration") or 0), properties=props, message=str(t.get("message") or ""),
                 na_reason=t.get("na_reason"))


# ------------------------------------------------------------------------------------- tallies


def _cells(run: Run) -> tuple[list[str], list[str], dict[tuple[str, str], dict[str, int]]]:
    """(rows, areas, (row, area) -> outcome counts)."""
    areas: list[str] = []
    rows = list(run.node_names)
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for t in run.tests:
        row = t["node"] or NO_NODE
        if t["area"] not in areas:
            areas.append(t["area"])
        if row not in rows:
            rows.append(row)
        counts = cells.setdefault((row, t["area"]), {})
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    if NO_NODE in rows:  # deployment-wide checks last
        rows.remove(NO_NODE)
        rows.append(NO_NODE)
    return rows, areas, cells


def cell_class(counts: dict[str, int] | None) -> str:
    if not counts:
        return "none"
    if any(counts.get(o) for o in FAILED):
        return "fail"
    if counts.get("passed") or counts.get("xpassed"):
        return "pass"
    return "skip"


def _tally(counts: dict[str, int]) -> tuple[int, int, int]:
    passed = counts.get("passed", 0) + counts.get("xpassed", 0)
    failed = sum(counts.get(o, 0) for o in FAILED)
    return passed, failed, sum(counts.values()) - passed - failed


def _evidence_files(run: Run) -> dict[str, list[str]]:
    return run.evidence


def _walk_evidence(run_dir: Path, problems: list[str]) -> dict[str, list[str]]:
    """Group -> run-dir-relative paths: top-level files, then evidence/<node>/ and rendered/<node>/; what
    was not followed (a symlink, too deep, too many) goes to ``problems``, named."""
    out: dict[str, list[str]] = {}
    top = [n for n in ("plan.json", "run-state.json", "junit.xml", "conformance-results.json")
           if (run_dir / n).is_file() and not (run_dir / n).is_symlink()]
    if top:
        out["run"] = top
    for sub in ("evidence", "rendered"):
        files, skipped = runs.walk(run_dir, sub)  # never leaves the run directory, bounded
        for rel in files:
            parts = rel.split("/")
            out.setdefault(parts[1] if len(parts) > 2 else NO_NODE, []).append(rel)
        problems.extend(skipped)
    return out


def _versions(run: Run) -> dict[str, str]:
    images = sorted({str(n.get("container", {}).get("image", "")) for n in run.plan.get("nodes", [])} - {""})
    return {"k3lab": run.versions.get("k3lab", __version__), "image": ", ".join(images) or "?",
            "python": run.versions.get("python", platform.python_version())}


def _run_label(run: Run) -> str:
    status = run.state.get("status")
    return f"{run.state.get('run', run.dir.name)}, " + (f"status {status}" if status else "no run-state.json")


# ------------------------------------------------------------------------------------ markdown

_MD = str.maketrans({c: "\\" + c for c in "\\`*[]|"})


def md(value: object) -> str:
    """Inline Markdown text: one line, controls and lone surrogates shown (printable), HTML neutralised,
    emphasis/link/table syntax escaped."""
    return html.escape(" ".join(printable(str(value)).split()), quote=False).translate(_MD)


def href(rel: str) -> str:
    """A run-relative path as a URL: a file name that is not UTF-8 (its bytes came back as surrogates)
    links to its real bytes; any other surrogate, which no file name holds, is shown escaped."""
    try:
        return quote(os.fsencode(rel))
    except UnicodeEncodeError:
        return quote(printable(rel))


def _link(rel: str, text: str | None = None) -> str:
    return f"[{md(text or rel)}]({href(rel)})"


def summary_md(run: Run, diagnosis: Diagnosis | None = None) -> str:
    """``diagnosis``: a failed run's (k3lab.reports.diagreport.for_run), shown as its own section."""
    p, v = run.plan, _versions(run)
    counts = f"{run.count('passed')} passed, {run.count('failed')} failed, {run.count('error')} errors, " \
             f"{run.count('skipped')} skipped" + (f", {run.count('xfailed')} xfailed" if run.count("xfailed") else "")
    lines = [f"# k3lab acceptance: {md(p.get('scenario', '?'))}: {run.verdict_label}", "",
             "| | |", "|---|---|",
             f"| Scenario | {md(p.get('scenario', '?'))}: {md(p.get('title', ''))} |",
             f"| Seed | {md(p.get('seed', '?'))}, {md(p.get('section', ''))} |",
             f"| Target | {md(p.get('target', '?'))} (platform {md(p.get('platform', '?'))}) |",
             f"| Inventory | {md(p.get('inventory', '?'))} |",
             f"| Run | {md(_run_label(run))} |",
             f"| Versions | k3lab {md(v['k3lab'])}; image {md(v['image'])}; Python {md(v['python'])} |",
             f"| Verdict | **{run.verdict_label}**: {counts} ({len(run.tests)} checks, from {md(run.source)}) |", ""]
    lines += [f"- left out, unreadable: {md(problem)}" for problem in run.problems] + ([""] if run.problems else [])
    lines += _results_md(run)
    if diagnosis is not None:
        lines += [""] + diagreport.markdown(diagnosis, md)
    lines += ["", "## Failures", ""]
    fails = failures.rows(run.tests, run.plan, diagnosis)
    if not fails:
        lines.append("None.")
    evidence = _evidence_files(run)
    for row in fails:
        lines += _failure_md(row, evidence)
    lines += _gate_md(run)
    lines += _skipped_md(run)
    lines += _preflight_md(run)
    lines += ["## Deviations from the guides", ""]
    devs = p.get("deviations") or []
    lines += [f"- {md(d.get('id', '?'))} ({md(d.get('scope', '?'))}): {md(d.get('what', ''))}. "
              f"Why: {md(d.get('why', ''))}" for d in devs] or ["None."]
    lines += ["", "## Evidence", ""]
    lines += [f"- {md(group)}: " + ", ".join(_link(r, Path(r).name) for r in files)
              for group, files in evidence.items()]
    lines += ["", f"Generated {_now()} by k3lab {md(__version__)}; report.html has the topology picture.", ""]
    return redact("\n".join(lines))


def _gate_md(run: Run) -> list[str]:
    if not run.gate or not run.gate.get("reasons"):
        return []
    return ["## Why not PASS", "", *[f"- {md(r)}" for r in run.gate["reasons"]], ""]


def skipped(run: Run) -> list[Skipped]:
    """Every check that did not run here, with its reason; ``not_applicable`` when the gate's policy lists
    the reason (the check does not apply to this scenario), else it counts as not evaluated."""
    na = {i["key"]: i for i in (run.gate.get("items", []) if run.gate else []) if i.get("status") == "na"}
    return [Skipped(nodeid=t["nodeid"], node=t["node"],
                    reason=t["message"].removeprefix("Skipped: ") or "(no reason given)", not_applicable=t["nodeid"] in na)
            for t in run.tests if t["outcome"] in ("skipped", "xfailed")]


def _skipped_md(run: Run) -> list[str]:
    rows = skipped(run)
    if not rows:
        return []
    n_na = sum(r["not_applicable"] for r in rows)
    lines = ["## Skipped and not applicable", "",
             f"{len(rows)} check(s) did not run: {n_na} not applicable here, {len(rows) - n_na} skipped.", "",
             "| check | node | outcome | reason |", "|---|---|---|---|"]
    lines += [f"| {md(r['nodeid'])} | {md(r['node'] or '–')} | {'not applicable' if r['not_applicable'] else 'skipped'}"
              f" | {md(r['reason'])} |" for r in rows]
    return lines + [""]


def _preflight_md(run: Run) -> list[str]:
    """The preflight's warnings and the findings the inventory accepted, each with its reason."""
    pf = run.preflight
    if not pf:
        return []
    lines = ["## Preflight", "", f"{pf.get('checks', '?')} checks, {pf.get('errors', 0)} error(s), "
             f"{pf.get('warnings', 0)} warning(s), {len(pf.get('accepted') or [])} accepted"
             f"{' (--strict)' if pf.get('strict') else ''}.", ""]
    for f in pf.get("findings") or []:
        lines.append(f"- {md(str(f.get('severity', '')).upper())} {md(f.get('check'))} "
                     f"[{md(', '.join(f.get('nodes') or []))}]: {md(f.get('message'))}")
    for a in pf.get("accepted") or []:
        lines.append(f"- ACCEPTED {md(a.get('check'))} [{md(', '.join(a.get('nodes') or []))}]: "
                     f"{md(a.get('message'))} Reason: {md(a.get('reason'))}")
    return lines + [""]


def _results_md(run: Run) -> list[str]:
    rows, areas, cells = _cells(run)
    lines = ["## Results by area and node", "",
             "| area | node | passed | failed | skipped |", "|---|---|---:|---:|---:|"]
    for area in areas:
        for row in rows:
            if (row, area) in cells:
                ok, bad, skip = _tally(cells[(row, area)])
                mark = " ✗" if bad else ""
                lines.append(f"| {md(area)} | {md(row)}{mark} | {ok} | {bad} | {skip} |")
    return lines


EVIDENCE_LINKS = 12


def _failure_md(row: failures.Row, evidence: dict[str, list[str]]) -> list[str]:
    lines = [f"### {md(row.nodeid)}", "", f"- kind: **{md(row.kind)}**, outcome {md(row.outcome)}"]
    lines += [f"- {key}: {md(val)}" for key, val in zip(failures.COLUMNS, row.values())]
    files = [r for node in row.nodes for r in evidence.get(node, [])[:EVIDENCE_LINKS + 1]]
    if files:  # a few links per failure: every failure listing every file made the summary failures x files
        more = " (and more: see Evidence)" if len(files) > EVIDENCE_LINKS else ""
        lines.append("- evidence: " + ", ".join(_link(r, Path(r).name) for r in files[:EVIDENCE_LINKS]) + more)
    return [*lines, ""]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------- HTML


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1b1f24;max-width:1400px}
h1{font-size:22px;margin:0 0 12px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:6px 0} th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;
vertical-align:top} th{background:#f6f8fa} .verdict{padding:2px 10px;border-radius:4px;color:#fff}
.verdict.PASS{background:#1a7f37} .verdict.FAIL{background:#cf222e} .verdict.INCOMPLETE{background:#9a6700}
td.cell{text-align:center;min-width:70px} td.pass{background:#dafbe1} td.fail{background:#ffebe9;font-weight:600}
td.skip{background:#fff8c5} td.none{background:#f6f8fa;color:#8c959f} .long{white-space:pre-wrap;max-width:420px;
max-height:220px;overflow:auto;font:12px ui-monospace,monospace} .muted{color:#57606a}
.matrix-wrap{max-width:100%;overflow-x:auto} table.matrix th:first-child{position:sticky;left:0;z-index:1}
table.matrix th.area{vertical-align:bottom;padding:4px 2px} table.matrix th.area span{writing-mode:vertical-rl;
transform:rotate(180deg);white-space:nowrap} table.matrix td.cell{min-width:0;white-space:nowrap}
svg.topo{border:1px solid #d0d7de;border-radius:6px;background:#fff;max-width:100%;height:auto}
svg text{font:12px system-ui,sans-serif;fill:#1b1f24} svg text.name{font-weight:600;font-size:13px}
svg .sub{fill:#57606a;font-size:11px} svg text.hdr{font-weight:600;text-transform:uppercase;fill:#57606a}
svg text.lbl{font-size:11px;fill:#57606a;paint-order:stroke;stroke:#fff;stroke-width:4px}
svg rect.frame{fill:#f6f8fa;stroke:#d0d7de;stroke-dasharray:4 3}
svg rect.box{fill:#fff;stroke:#8c959f;stroke-width:1.5} svg rect.box.pass{stroke:#1a7f37}
svg rect.box.fail{stroke:#cf222e;stroke-width:3;fill:#fff5f5} svg rect.svc{fill:#ddf4ff;stroke:#0969da}
svg text.st.fail{fill:#cf222e;font-weight:600} svg text.st.pass{fill:#1a7f37}
svg .link{fill:none;stroke-width:1.5} svg .link.api{stroke:#0969da} svg .link.kv{stroke:#bc4c00;stroke-width:4}
svg .link.pool{stroke:#8250df;stroke-dasharray:6 4} svg .head.api{fill:#0969da} svg .head.kv{fill:#bc4c00}
svg .head.pool{fill:#8250df}
"""


_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>k3lab {{ scenario }}: {{ label }}</title><style>{{ css }}</style></head><body>
<h1>k3lab acceptance: {{ scenario }} <span class="verdict {{ verdict }}">{{ label }}</span></h1>
<table>{% for k, val in info %}<tr><th>{{ k }}</th><td>{{ val }}</td></tr>{% endfor %}</table>
<h2>Deployment</h2>
{{ svg }}
<h2>Checks by node and area</h2>
{% if not areas %}
<p class="muted">No check results.</p>
{% else %}
<div class="matrix-wrap"><table class="matrix"><tr><th class="corner">node</th>
{%- for a in areas %}<th class="area"><span>{{ a }}</span></th>{% endfor %}</tr>
{% for row in matrix %}<tr><th>{{ row.name }}</th>
{%- for c in row.cells %}<td class="cell {{ c.cls }}" title="{{ c.title }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
{% endif %}
{{ diagnosis }}
<h2>Failures</h2>
{% if not failures %}
<p class="muted">None.</p>
{% else %}
<table class="failures"><tr><th>check</th><th>kind</th>{% for c in failure_cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for f in failures %}<tr><td>{{ f.nodeid }}<br><span class="muted">{{ f.outcome }}</span></td><td>{{ f.kind }}</td>
{%- for val in f.values() %}<td class="f-{{ failure_cols[loop.index0] }}"><div class="long">{{ val }}</div></td>{% endfor %}</tr>
{% endfor %}</table>
{% endif %}
<h2>Deviations from the guides</h2>
{% if not deviations %}
<p class="muted">None.</p>
{% else %}
<table><tr><th>id</th><th>scope</th><th>what</th><th>why</th></tr>
{% for d in deviations %}<tr><td>{{ d.get('id', '?') }}</td><td>{{ d.get('scope', '?') }}</td><td>{{ d.get('what', '') }}</td><td>{{ d.get('why', '') }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if skipped %}<h2>Skipped and not applicable</h2>
<table><tr><th>check</th><th>node</th><th>outcome</th><th>reason</th></tr>
{% for r in skipped %}<tr><td>{{ r.nodeid }}</td><td>{{ r.node or '–' }}</td><td>{{ 'not applicable' if r.not_applicable else 'skipped' }}</td><td>{{ r.reason }}</td></tr>{% endfor %}</table>
{% endif %}
<h2>Evidence</h2>
{% if not evidence %}
<p class="muted">No evidence files.</p>
{% else %}
<ul>{% for group, files in evidence %}<li><b>{{ group }}</b>: {% for href, name in files %}{% if not loop.first %} · {% endif %}<a href="{{ href }}">{{ name }}</a>{% endfor %}</li>{% endfor %}</ul>
{% endif %}
<p class="muted">Generated {{ generated }} by k3lab {{ version }}.</p></body></html>"""


def report_html(run: Run, diagnosis: Diagnosis | None = None) -> str:
    p, v = run.plan, _versions(run)
    info = [("Scenario", f"{p.get('scenario', '?')}: {p.get('title', '')}"),
            ("Seed", f"{p.get('seed', '?')}, {p.get('section', '')}"),
            ("Target", f"{p.get('target', '?')} (platform {p.get('platform', '?')})"),
            ("Inventory", p.get("inventory", "?")),
            ("Run", _run_label(run)),
            ("Versions", f"k3lab {v['k3lab']}; image {v['image']}; Python {v['python']}"),
            ("Checks", f"{len(run.tests)}: {run.count('passed')} passed, {run.count('failed')} failed, "
                       f"{run.count('error')} errors, {run.count('skipped')} skipped (from {run.source})")]
    rows, areas, _ = _cells(run)
    fails = failures.rows(run.tests, run.plan, diagnosis)
    return render_html(
        _HTML, scenario=p.get("scenario", "?"), verdict=run.verdict, label=run.verdict_label, css=Markup(CSS), info=info,
        svg=Markup(topology_svg(run.plan, run.tests, failures.marked(fails, diagnosis))),
        diagnosis=diagreport.html(diagnosis) if diagnosis is not None else Markup(""), areas=areas, matrix=_matrix_rows(run),
        failure_cols=failures.COLUMNS, failures=fails, deviations=run.plan.get("deviations") or [],
        evidence=[(group, [(href(r), Path(r).name) for r in files]) for group, files in _evidence_files(run).items()],
        skipped=skipped(run), generated=_now(), version=__version__)


def _matrix_rows(run: Run) -> list[MatrixRow]:
    """Node x area: passed/total per cell, its class, and the outcome counts as its tooltip."""
    rows, areas, cells = _cells(run)
    out = []
    for row in rows:
        tds = []
        for area in areas:
            counts = cells.get((row, area))
            if counts:
                ok, bad, skip = _tally(counts)
                text = f"{ok}/{ok + bad + skip}" + (f" ({bad} failed)" if bad else "")
                title = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
            else:
                text, title = "–", "no checks"
            tds.append(Cell(cls=cell_class(counts), text=text, title=title))
        out.append(MatrixRow(name=row, cells=tds))
    return out


# --------------------------------------------------------------------------------------- entry


def write_reports(run_dir: str | Path, gate: VerdictDoc | None = None, run: Run | None = None) -> dict[str, Path]:
    """Write summary.md and report.html into RUN_DIR; returns them (and junit.xml when present).
    ``gate``: the run's verdict as the gate decided it (k3lab.reports.runreports.rebuild passes it);
    ``run``: the run already loaded (its results are read once)."""
    run = run or load(run_dir)
    run.gate = gate
    out = {"summary": run.dir / "summary.md", "html": run.dir / "report.html"}
    # a run that did not pass gets a Diagnosis section: its likely cause from the logs it collected
    failed = run.verdict != "PASS" or (run.dir / runs.GATE_FAILURE).is_file()
    diagnosis = diagreport.for_run(run.dir) if failed else None
    outputs.write_file(out["summary"], summary_md(run, diagnosis), flag="report")
    outputs.write_file(out["html"], report_html(run, diagnosis), flag="report")
    junit = run.dir / "junit.xml"
    if junit.is_file() and not junit.is_symlink():  # a link placed there is read by no one and never written through
        out["junit"] = run.dir / "junit.xml"
        if diagnosis:
            try:
                diagreport.add_to_junit(out["junit"], diagnosis)
            except (ET.ParseError, OSError, InputError):  # disk full (EnvError) still stops the report
                pass  # an unreadable junit.xml is the suite's problem; the other reports carry the diagnosis
    return out
