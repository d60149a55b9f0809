"""The combined release report: ``release.md``, ``release.html`` (jinja2, autoescaped) and ``junit.xml``.

Everything shown may come from inventories, logs or node output, so Markdown goes through
:func:`k3lab.reports.report.md`, HTML through jinja2's autoescape, JUnit through ElementTree; the value
of ``$K3LAB_API_KEY`` is redacted from all three.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from k3lab import outputs
from k3lab.errors import printable
from k3lab.reports import gate
from k3lab.reports.report import md, redact
from k3lab.reports.templating import render_html

STATUS_TEXT = {"fail": "FAIL", "incomplete": "INCOMPLETE", "warn": "warn", "pass": "pass", "na": "n/a",
               "ignored": "ignored"}
STATIC_ONLY = ("Static-only release: render, preflight and golden of each scenario; no deployment was brought up "
               "or checked, no versions were read. The verdict covers the static stage only.")
COMPONENTS = ("vllm", "vllm_ascend", "memcache_hybrid", "cann", "driver", "npu_smi", "image")


class Cycle(TypedDict):
    """One scenario's ``k3lab cycle`` subprocess in a release (k3lab.tools.release.Live)."""

    scenario: str
    exit: int | None  # None: not started
    wall_s: float
    run_dir: NotRequired[str | None]  # the cycle's run directory, when it started
    log: NotRequired[str]
    note: str  # why it did not run, or the log's last lines
    slot: NotRequired[int]


class Host(TypedDict):
    python: str
    machine: str
    cpus: int | None
    load: str  # /proc/loadavg's three figures
    warnings: list[str]


class Timings(TypedDict):
    total_s: float
    static_s: float
    live_s: float
    sum_of_cycles_s: float


class ReleaseDoc(TypedDict):
    """``release.json`` as ``k3lab release`` writes it (read back through k3lab.model.runs.Release)."""

    schema: int
    kind: str  # k3lab-release
    k3lab: str
    target: str
    strict: bool
    policy: str  # where the policy came from
    started: str
    finished: str
    host: Host
    jobs: int  # cycles at a time
    live: bool  # False: --static-only
    scope: str  # full or static-only
    injected: dict[str, str]  # scenario -> fault id
    timings: Timings
    cycles: dict[str, Cycle]
    overall: str
    overall_label: str
    scenarios: list[gate.VerdictDoc]


def _rel(out: Path, path: str | None) -> str | None:
    if not path:
        return None
    try:
        return os.path.relpath(path, out)
    except ValueError:
        return path


class ScenarioRow(TypedDict):
    """One scenario of the release report: its verdict, the worst status per area, where its run is."""

    scenario: str
    verdict: str
    label: str  # the verdict as shown (waived MUST checks counted)
    waived: list[str]  # 'id: reason' per waived MUST check
    cells: list[str | None]  # per area of the release (ReleaseView.areas): worst status, None when it has none
    reasons: list[str]
    run: str | None  # the run directory, relative to the release
    report: str | None
    summary: str | None
    log: str | None  # the cycle's log, relative
    wall: float | None  # the cycle's seconds
    versions: list[str]  # per COMPONENTS, "–" when not read
    warnings: list[str]  # non-blocking problems
    counts: dict[str, int]  # effective status -> items


class ReleaseView(TypedDict):
    """What release.md and release.html show of a release document."""

    doc: ReleaseDoc  # release.json as written
    overall: str
    areas: list[str]
    rows: list[ScenarioRow]
    components: tuple[str, ...]
    status_text: dict[str, str]
    static_only: str


def _view(out: Path, doc: ReleaseDoc) -> ReleaseView:
    verdicts = [gate.Verdict.from_json(s) for s in doc["scenarios"]]
    areas = _areas(verdicts)
    rows = [_row(out, doc, v, areas) for v in verdicts]
    return ReleaseView(doc=doc, overall=_overall(doc), areas=areas, rows=rows, components=COMPONENTS,
                       status_text=STATUS_TEXT, static_only=STATIC_ONLY)


def _overall(doc: ReleaseDoc) -> str:
    """The release's verdict as written ('PASS with N waived MUST checks' when so), else its overall."""
    return str(doc.get("overall_label") or doc["overall"])


def _areas(verdicts: list[gate.Verdict]) -> list[str]:
    """Every area any scenario has: the release's own stages first, then the checks' areas sorted."""
    areas: list[str] = []
    for v in verdicts:
        areas += [a for a in v.areas() if a not in areas]
    front = [a for a in ("static", "live", "versions", "deviations") if a in areas]
    return front + sorted(a for a in areas if a not in front)


def _row(out: Path, doc: ReleaseDoc, v: gate.Verdict, areas: list[str]) -> ScenarioRow:
    cells = v.areas()
    cyc: Cycle | dict[str, Any] = doc.get("cycles", {}).get(v.scenario, {})
    run = _rel(out, v.run_dir)
    not_evaluated = sum(i.level == "warn" and i.status == "incomplete" for i in v.items)
    return ScenarioRow(
        scenario=v.scenario, verdict=v.verdict, label=v.label, waived=v.waived_must(), cells=[cells.get(a) for a in areas],
        reasons=v.reasons, run=run,
        report=f"{run}/report.html" if run else None, summary=f"{run}/summary.md" if run else None,
        log=_rel(out, cyc.get("log")), wall=cyc.get("wall_s"),
        versions=[v.versions.get(c) or "–" for c in COMPONENTS],
        warnings=[f"{i.key}: {i.message}" for i in v.items if i.level == "warn" and i.status == "fail"]
        + ([f"{not_evaluated} non-blocking check(s) not evaluated (e.g. opt-in perf/accuracy not requested)"]
           if not_evaluated else []),
        counts=_counts(v))


def _counts(v: gate.Verdict) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in v.items:
        s = gate._effective(i)
        out[s] = out.get(s, 0) + 1
    return out


# ------------------------------------------------------------------------------------ markdown


def release_md(out: Path, doc: ReleaseDoc) -> str:
    view = _view(out, doc)
    lines = _header_md(doc, len(view["rows"])) + _matrix_md(view)
    lines += ["", "## Why not PASS", ""]
    reasons = [x for r in view["rows"] for x in r["reasons"]]
    lines += [f"- {md(x)}" for x in reasons] or ["Every scenario passed its blocking checks."]
    lines += _listed_md("Waived MUST checks (the policy's waive_must)", [(r["scenario"], w) for r in view["rows"] for w in r["waived"]])
    lines += _listed_md("Warnings (non-blocking)", [(r["scenario"], w) for r in view["rows"] for w in r["warnings"]][:200])
    if doc.get("live", True):  # a static-only release read no versions: no table of dashes
        lines += ["", "## Versions read from the nodes", "",
                  "| scenario | " + " | ".join(md(c) for c in COMPONENTS) + " |", "|---|" + "---|" * len(COMPONENTS)]
        lines += [f"| {md(r['scenario'])} | " + " | ".join(md(x) for x in r["versions"]) + " |" for r in view["rows"]]
    lines += ["", "Generated by k3lab release; release.json holds every item, junit.xml one case per item.", ""]
    return redact("\n".join(lines))


def _listed_md(title: str, items: list[tuple[str, Any]]) -> list[str]:
    """A section of (scenario, text) bullets, or nothing when there are none."""
    return ["", f"## {title}", "", *(f"- {md(s)}: {md(x)}" for s, x in items)] if items else []


def _header_md(doc: ReleaseDoc, scenarios: int) -> list[str]:
    t = doc["timings"]
    lines = [f"# k3lab release: {_overall(doc)}{'' if doc.get('live', True) else ' (static only)'}", "",
             *([STATIC_ONLY, ""] if not doc.get("live", True) else []),
             f"Target {md(doc['target'])}, policy {md(doc['policy'])}, {scenarios} scenarios, "
             f"{doc['jobs']} at a time. Wall {t['total_s']:.1f} s (static {t['static_s']:.2f} s, live {t['live_s']:.1f} s; "
             f"sum of the cycles {t['sum_of_cycles_s']:.1f} s). Host load {md(doc['host']['load'])}, "
             f"{doc['host']['cpus']} CPUs. k3lab {md(doc['k3lab'])}, {md(doc['started'])}.", ""]
    warnings = doc["host"].get("warnings", [])
    lines += [f"Host warning: {md(w)}" for w in warnings] + ([""] if warnings else [])
    if doc.get("injected"):
        lines += ["Injected faults: " + ", ".join(f"{md(k)}={md(v)}" for k, v in doc["injected"].items()), ""]
    return lines


def _matrix_md(view: ReleaseView) -> list[str]:
    lines = ["## Scenario × area", "",
             "| scenario | verdict | " + " | ".join(md(a) for a in view["areas"]) + " | run |",
             "|---|---|" + "---|" * len(view["areas"]) + "---|"]
    for r in view["rows"]:
        cells = " | ".join(STATUS_TEXT.get(c, "–") if c else "–" for c in r["cells"])
        link = f"[report]({r['report']}) · [summary]({r['summary']})" if r["run"] else "–"
        lines.append(f"| {md(r['scenario'])} | **{md(r['label'])}** | {cells} | {link} |")
    return lines


# ---------------------------------------------------------------------------------------- HTML

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>k3lab release: {{ overall }}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;max-width:1500px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}.v{padding:2px 10px;border-radius:4px;color:#fff}.PASS{background:#1a7f37}
.FAIL{background:#cf222e}.INCOMPLETE{background:#9a6700}td.c{text-align:center}td.pass{background:#dafbe1}
td.fail{background:#ffebe9;font-weight:600}td.incomplete{background:#fff1c2;font-weight:600}td.warn{background:#fff8c5}
td.na,td.none,td.ignored{background:#f6f8fa;color:#8c959f}.muted{color:#57606a}li{margin:2px 0}
.matrix-wrap{max-width:100%;overflow-x:auto}table.matrix th:first-child{position:sticky;left:0;z-index:1}
table.matrix th.area{vertical-align:bottom;padding:4px 2px}table.matrix th.area span{writing-mode:vertical-rl;
transform:rotate(180deg);white-space:nowrap}.warn{background:#fff8c5;padding:4px 8px}
</style></head><body>
<h1>k3lab release <span class="v {{ doc.overall }}">{{ overall }}</span>{% if not doc.get('live', true) %} (static only){% endif %}</h1>
{% if not doc.get('live', true) %}<p class="warn">{{ static_only }}</p>{% endif %}
<p>Target {{ doc.target }}, policy {{ doc.policy }}, {{ rows|length }} scenarios, {{ doc.jobs }} at a time.
Wall {{ '%.1f'|format(doc.timings.total_s) }} s (static {{ '%.2f'|format(doc.timings.static_s) }} s,
live {{ '%.1f'|format(doc.timings.live_s) }} s; sum of the cycles {{ '%.1f'|format(doc.timings.sum_of_cycles_s) }} s).
Host load {{ doc.host.load }}, {{ doc.host.cpus }} CPUs. k3lab {{ doc.k3lab }}, {{ doc.started }}.</p>
{% for w in doc.host.get('warnings', []) %}<p class="warn">Host warning: {{ w }}</p>{% endfor %}
{% if doc.injected %}<p>Injected faults: {% for k, v in doc.injected.items() %}{{ k }}={{ v }} {% endfor %}</p>{% endif %}
<h2>Scenario × area</h2>
<div class="matrix-wrap"><table class="matrix"><tr><th>scenario</th><th>verdict</th>{% for a in areas %}<th class="area"><span>{{ a }}</span></th>{% endfor %}<th>evidence</th><th>cycle</th></tr>
{% for r in rows %}<tr><th>{{ r.scenario }}</th><td><span class="v {{ r.verdict }}">{{ r.label }}</span></td>
{% for c in r.cells %}<td class="c {{ c or 'none' }}">{{ status_text.get(c, '–') if c else '–' }}</td>{% endfor %}
<td>{% if r.run %}<a href="{{ r.report }}">report</a> · <a href="{{ r.summary }}">summary</a>{% else %}–{% endif %}
{% if r.log %} · <a href="{{ r.log }}">log</a>{% endif %}</td>
<td class="muted">{{ '%.1f s'|format(r.wall) if r.wall else '–' }}</td></tr>
{% endfor %}</table></div>
<h2>Why not PASS</h2>
{% set ns = namespace(any=false) %}<ul>{% for r in rows %}{% for x in r.reasons %}{% set ns.any = true %}<li>{{ x }}</li>{% endfor %}{% endfor %}</ul>
{% if not ns.any %}<p class="muted">Every scenario passed its blocking checks.</p>{% endif %}
{% if rows|map(attribute='waived')|select|list %}<h2>Waived MUST checks (the policy's waive_must)</h2><ul>{% for r in rows %}{% for w in r.waived %}<li><b>{{ r.scenario }}</b>: {{ w }}</li>{% endfor %}{% endfor %}</ul>{% endif %}
{% if rows|map(attribute='warnings')|select|list %}<h2>Warnings (non-blocking)</h2><ul>{% for r in rows %}{% for w in r.warnings %}<li><b>{{ r.scenario }}</b>: {{ w }}</li>{% endfor %}{% endfor %}</ul>{% endif %}
{% if doc.get('live', true) %}<h2>Versions read from the nodes</h2>
<table><tr><th>scenario</th>{% for c in components %}<th>{{ c }}</th>{% endfor %}</tr>
{% for r in rows %}<tr><th>{{ r.scenario }}</th>{% for x in r.versions %}<td>{{ x }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
<p class="muted">release.json holds every item; junit.xml has one case per item.</p>
</body></html>
"""


def release_html(out: Path, doc: ReleaseDoc) -> str:
    return render_html(_HTML, **_view(out, doc))


# --------------------------------------------------------------------------------------- JUnit


def _x(text: str) -> str:
    """Redacted, and valid in XML 1.0: a log tail's ANSI colour or control character would make the
    whole file unreadable to a CI system."""
    return printable(redact(text))


def release_junit(doc: ReleaseDoc) -> str:
    root = ET.Element("testsuites", name="k3lab release", tests="0", failures="0", errors="0",
                      time=f"{float(doc.get('timings', {}).get('total_s', 0.0)):.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in doc["scenarios"]:
        v = gate.Verdict.from_json(s)
        suite = ET.SubElement(root, "testsuite", name=_x(v.scenario), timestamp=_x(str(doc.get("started", ""))),
                              time=f"{sum(i.duration for i in v.items):.3f}")
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=_x(v.verdict))
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for i in v.items:
            case = ET.SubElement(suite, "testcase", classname=_x(f"{v.scenario}.{i.area}"), name=_x(i.key),
                                 time=f"{i.duration:.3f}")
            cp = ET.SubElement(case, "properties")
            for k in ("id", "level", "status", "expected", "actual", "node"):
                val = getattr(i, k)
                if val:
                    ET.SubElement(cp, "property", name=f"gate.{k}", value=_x(str(val)))
            eff = gate._effective(i)
            counts["tests"] += 1
            if eff == "fail":
                ET.SubElement(case, "failure", message=_x(i.message)[:2000])
                counts["failures"] += 1
            elif eff == "incomplete":
                ET.SubElement(case, "error", type="incomplete", message=_x(i.message)[:2000])
                counts["errors"] += 1
            elif eff in ("na", "ignored"):
                ET.SubElement(case, "skipped", message=_x(i.message)[:2000])
                counts["skipped"] += 1
            elif eff == "warn":
                ET.SubElement(case, "system-out").text = "WARNING (non-blocking): " + _x(i.message)
        for k, n in counts.items():
            suite.set(k, str(n))
            totals[k] += n
    for k, n in totals.items():
        root.set(k, str(n))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_all(out: Path, doc: ReleaseDoc, shown_in: Path | None = None) -> dict[str, Path]:
    """release.md, release.html and junit.xml into ``out`` through the one writer; links are relative to
    ``shown_in`` (where ``out``, a staging directory, will be), ``out`` itself by default."""
    where = shown_in or out
    paths = {"md": out / "release.md", "html": out / "release.html", "junit": out / "junit.xml"}
    outputs.write_file(paths["md"], release_md(where, doc))
    outputs.write_file(paths["html"], release_html(where, doc))
    outputs.write_file(paths["junit"], release_junit(doc))
    return paths
