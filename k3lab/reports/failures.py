"""Each failed check of a run as one full row: expected, actual, where, cause and remedy.

A check that fails through :func:`k3lab.conform.evidence.fail` records all five; a plain ``assert``
records none, and its row is filled from what the run does hold, each value saying where it comes from:

* expected: the check's MUST statement (its result row, else the check registry, k3lab.model.checks);
* actual: the failure message, what the check saw;
* where: the result's node and every node of the plan the message names, with its address and the
  devices named after it (``p0 device 3``);
* cause: the run's diagnosis (k3lab.diagnosis), the finding on this failure's nodes first;
* remedy: the check's remedy from the registry, else the diagnosis finding's.

A value the run truly lacks reads "not recorded" with the reason, never an empty cell. The nodes a
failure or the diagnosis names are what the deployment picture marks (k3lab.reports.reportsvg).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from k3lab.diagnosis.engine import Diagnosis, Finding
from k3lab.model import checks
from k3lab.reports.rows import Check

NOT_RECORDED = "not recorded"
FAILED = ("failed", "error")
COLUMNS = ("what", "expected", "actual", "where", "cause", "remedy")
SHOWN = 3  # diagnosis findings the reports show (k3lab.reports.diagreport.SHOWN)


@dataclass
class Row:
    nodeid: str
    outcome: str
    kind: str
    what: str
    expected: str
    actual: str
    where: str
    cause: str
    remedy: str
    nodes: list[str] = field(default_factory=list)  # plan nodes the failure names

    def values(self) -> list[str]:
        return [getattr(self, c) for c in COLUMNS]


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, checks.CheckInfo]:
    """The suite's checks by id; empty when the suite's files are not there to read (an installed kit
    without conformance/): the rows then say the remedy is not recorded."""
    try:
        return {c.id: c for c in checks.suite_checks()}
    except (OSError, SyntaxError, ValueError):
        return {}


def named_nodes(text: str, names: list[str]) -> dict[str, list[str]]:
    """Plan node -> devices named after it (``p0 device 3``), for every node ``text`` names, in plan order."""
    out: dict[str, list[str]] = {}
    for name in names:
        token = rf"(?<![\w.-]){re.escape(name)}(?![\w-])"
        if not re.search(token, text):
            continue
        devices = re.findall(token + r" device (\d+)", text)
        out[name] = sorted(set(devices), key=int)
    return out


def _where(t: Check, props: dict[str, str], plan_nodes: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The where cell and the plan nodes the failure names (its own node first)."""
    named = named_nodes(" ".join([props.get("where", ""), t["message"], props.get("actual", "")]), list(plan_nodes))
    own = t["node"]
    if own is not None and own in plan_nodes:
        named = {own: named.get(own, []), **named}
    if props.get("where"):
        return props["where"], list(named)
    if not named:
        return f"deployment-wide: {NOT_RECORDED} (the result names no node of the plan)", []
    parts = []
    for name, devices in named.items():
        addr = plan_nodes[name].get("address")
        part = name + (f" (address {addr})" if addr else "")
        parts.append(part + (f": device {', '.join(devices)}" if devices else ""))
    return "; ".join(parts), list(named)


def _finding(nodes: list[str], diagnosis: Diagnosis | None) -> tuple[Finding | None, bool]:
    """The diagnosis finding for a failure on ``nodes``: one on those nodes, else the run's top one
    (False: it is the run's, not tied to these nodes)."""
    if diagnosis is None or not diagnosis.findings:
        return None, False
    for f in diagnosis.findings[:SHOWN]:
        if set(f.nodes) & set(nodes):
            return f, True
    return diagnosis.findings[0], False


def _cause(props: dict[str, str], finding: Finding | None, on_nodes: bool, diagnosis: Diagnosis | None) -> str:
    parts = [props["cause"]] if props.get("cause") else []
    if finding is not None:
        scope = "" if on_nodes else " (the run's most likely cause; not on this failure's nodes)"
        parts.append(f"diagnosis: {finding.cause.id} on {', '.join(finding.nodes) or '?'}: {finding.cause.title}{scope}")
    if parts:
        return "; ".join(parts)
    if diagnosis is None:
        return f"{NOT_RECORDED}: no diagnosis could be made from the run's files"
    return f"{NOT_RECORDED}: no known cause matched in the {len(diagnosis.looked)} log file(s) of the run"


def _remedy(props: dict[str, str], info: checks.CheckInfo | None, finding: Finding | None, on_nodes: bool) -> str:
    if props.get("remedy") or (info and info.remedy):
        return props.get("remedy") or (info.remedy if info else "")
    if finding is not None and on_nodes:
        return f"diagnosis ({finding.cause.id}): {finding.cause.remedy}"
    return f"{NOT_RECORDED}: the check names no remedy"


def row(t: Check, plan_nodes: dict[str, dict[str, Any]], diagnosis: Diagnosis | None) -> Row:
    props = t["properties"]
    info = registry().get(t.get("id") or props.get("conformance.id") or checks.base_id(t["nodeid"]))
    must = props.get("expected") or t.get("must") or props.get("conformance.must") or (info.must if info else "")
    where, nodes = _where(t, props, plan_nodes)
    finding, on_nodes = _finding(nodes, diagnosis)
    return Row(t["nodeid"], t["outcome"], props.get("kind", "product"),
               what=props.get("what") or (info.id if info else t["nodeid"]),
               expected=must or f"{NOT_RECORDED}: the check states no MUST",
               actual=props.get("actual") or t["message"] or f"{NOT_RECORDED}: the result carries no message",
               where=where, cause=_cause(props, finding, on_nodes, diagnosis),
               remedy=_remedy(props, info, finding, on_nodes), nodes=nodes)


def rows(tests: list[Check], plan: dict[str, Any], diagnosis: Diagnosis | None) -> list[Row]:
    """A row per failed or errored check, in result order."""
    plan_nodes = {str(n.get("name")): n for n in plan.get("nodes", [])}
    return [row(t, plan_nodes, diagnosis) for t in tests if t["outcome"] in FAILED]


def marked(failure_rows: list[Row], diagnosis: Diagnosis | None) -> dict[str, list[str]]:
    """Node -> why the picture marks it: every node a failure or the diagnosis names."""
    out: dict[str, list[str]] = {}
    for r in failure_rows:
        for node in r.nodes:
            out.setdefault(node, []).append(f"named by {r.nodeid}")
    if diagnosis is not None:
        for f in diagnosis.findings[:SHOWN]:
            for node in f.nodes:
                out.setdefault(node, []).append(f"diagnosis: {f.cause.id}")
        if diagnosis.gate and diagnosis.gate.get("node"):
            out.setdefault(str(diagnosis.gate["node"]), []).append(f"stopped gate {diagnosis.gate.get('stage', '?')}")
    return out
