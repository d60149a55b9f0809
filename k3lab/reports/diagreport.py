"""The Diagnosis section of a failed run's reports: Markdown (summary.md), HTML (report.html), JUnit.

The diagnosis itself is :func:`k3lab.diagnosis.engine.diagnose`; this module only lays it out. In
``junit.xml`` it is one extra ``<testsuite name="k3lab.diagnosis">`` whose test cases are the causes
found (a failure each: evidence, remedy, source), or one skipped case saying where it looked; the
kit's JUnit reader leaves that suite out of the check results.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, TypedDict

from k3lab import outputs
from k3lab.diagnosis.engine import Diagnosis, Finding, diagnose
from k3lab.diagnosis.triage import text as terminal_lines
from k3lab.errors import K3labError, printable
from k3lab.model import apikey
from k3lab.reports.templating import Markup, render_html

SUITE = "k3lab.diagnosis"
SHOWN = 3  # causes in a report


def for_run(run_dir: Path) -> Diagnosis | None:
    """The run's diagnosis, or None when it cannot be made (a report never fails for it)."""
    try:
        return diagnose(run_dir)
    except (K3labError, OSError):
        return None


def _finding_md(i: int, f: Finding, _md: Callable[[object], str]) -> list[str]:
    c = f.cause
    where = f" on **{_md(f.node)}**" if f.node and f.node != "-" else ""
    lines = [f"{i}. **{_md(c.id)}**{where}: {_md(c.title)} ({_md(c.component)}, {c.tier})", ""]
    lines += [f"   - evidence: `{_md(e.where())}`: {_md(e.text)}" for e in f.evidence[:3]]
    if len(f.nodes) > 1:
        lines.append(f"   - also on: {_md(', '.join(n for n in f.nodes[1:]))}")
    lines += [f"   - why: {_md(c.explanation)}", f"   - remedy: {_md(c.remedy)}",
              "   - sources: " + ", ".join(_md(s) for s in c.sources), ""]
    return lines


def markdown(d: Diagnosis, _md: Callable[[object], str]) -> list[str]:
    """The section's lines; ``_md`` escapes a value for inline Markdown (the report's ``md``)."""
    lines = ["## Diagnosis", ""]
    if d.gate:
        lines += [f"The bring-up stopped at gate **{_md(d.gate.get('stage', '?'))}** on "
                  f"**{_md(d.gate.get('node') or '?')}**: {_md(d.gate.get('message', ''))}", ""]
    if not d.findings:
        files = ", ".join(_md(f) for _, f, _ in d.looked[:12]) or "none"
        return lines + [f"No known cause matched in {len(d.looked)} file(s): {files}.", ""]
    for i, f in enumerate(d.findings[:SHOWN], 1):
        lines += _finding_md(i, f, _md)
    return lines


_HTML = """<h2>Diagnosis</h2>
{% if gate %}<p>The bring-up stopped at gate <b>{{ gate.get('stage', '?') }}</b> on <b>{{ gate.get('node') or '?' }}</b>:
{{ gate.get('message', '') }}</p>{% endif %}
{% if not findings %}
<p class="muted">No known cause matched in {{ looked|length }} file(s){% if looked %}: {{ looked[:12]|join(', ') }}{% endif %}.</p>
{% else %}
<table><tr><th>#</th><th>cause</th><th>node</th><th>evidence</th><th>remedy</th><th>sources</th></tr>
{% for f in findings %}<tr><td>{{ loop.index }}</td><td><b>{{ f.id }}</b><br>{{ f.title }}<br>
<span class="muted">{{ f.component }}, {{ f.tier }}</span></td><td>{{ f.nodes|join(', ') }}</td>
<td><div class="long">{% for e in f.evidence %}{{ e }}
{% endfor %}</div></td><td>{{ f.remedy }}<br><span class="muted">{{ f.explanation }}</span></td>
<td>{% for s in f.sources %}{% if '://' in s %}<a href="{{ s }}">{{ s }}</a>{% else %}{{ s }}{% endif %}<br>{% endfor %}</td></tr>
{% endfor %}</table>
{% endif %}
"""


class FindingView(TypedDict):
    """A diagnosis finding as the HTML report's table shows it: its cause and where it was seen."""

    id: str
    title: str
    component: str
    tier: str  # cause or symptom
    nodes: list[str]  # root-cause node first
    evidence: list[str]  # "file:line: text", the first three
    remedy: str
    explanation: str
    sources: list[str]


def _row(f: Finding) -> FindingView:
    c = f.cause
    return FindingView(id=c.id, title=c.title, component=c.component, tier=c.tier, nodes=f.nodes,
                       evidence=[f"{e.where()}: {e.text}" for e in f.evidence[:3]], remedy=c.remedy,
                       explanation=c.explanation, sources=c.sources)


def html(d: Diagnosis) -> Markup:
    return Markup(render_html(_HTML, gate=d.gate, looked=[f for _, f, _ in d.looked],
                              findings=[_row(f) for f in d.findings[:SHOWN]]))


def add_to_junit(path: Path, d: Diagnosis) -> None:
    """Replace the diagnosis suite of ``path`` (a pytest junit.xml) with this diagnosis."""
    from k3lab.model import runs, safeyaml

    runs.inside(path)
    root = ET.fromstring(safeyaml.read_capped(path, path.name, runs.MAX_BYTES).encode())  # the report's bound
    if root.tag != "testsuites":  # a bare <testsuite>: wrap it so a second suite can sit beside it
        wrapper = ET.Element("testsuites")
        wrapper.append(root)
        root = wrapper
    for old in [s for s in root.findall("testsuite") if s.get("name") == SUITE]:
        root.remove(old)
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=str(max(1, len(d.findings[:SHOWN]))),
                          failures=str(len(d.findings[:SHOWN])), errors="0", skipped="0" if d.findings else "1")
    for f in d.findings[:SHOWN]:  # node names, log lines and file names: printable, so the XML stays XML 1.0
        case = ET.SubElement(suite, "testcase", classname=SUITE, name=printable(f"{f.cause.id}@{f.node or '-'}"))
        fail = ET.SubElement(case, "failure", message=printable(f"{f.cause.title} on {f.node or '?'}: {f.cause.remedy}"))
        fail.text = printable(apikey.redact("\n".join(terminal_lines(_single(d, f), limit=1))))
    if not d.findings:
        case = ET.SubElement(suite, "testcase", classname=SUITE, name="no-known-cause")
        ET.SubElement(case, "skipped", message=printable(apikey.redact(terminal_lines(d)[-1])))
    outputs.write_file(path, ET.tostring(root, encoding="utf-8", xml_declaration=True), flag="report")


def _single(d: Diagnosis, f: Finding) -> Diagnosis:
    return Diagnosis(d.root, d.kind, [f], d.looked, d.nodes, [], None)
