"""``k3lab compare A B``: what changed from A (the last good) to B (the candidate).

A and B are each a release directory (``release.json``) or a single run directory
(``conformance-results.json``, ``run-state.json``; evaluated under ``--policy``; ``junit.xml`` is output
only). Per scenario present in either:

* verdict change (PASS / FAIL / INCOMPLETE);
* **new failures**: items failing or incomplete in B that passed, were not applicable or did not
  exist in A; **fixed**: the reverse; blocking items failing in both are counted, not listed;
* **expected values** that changed (the checks' ``expected`` property: a different plan or policy);
* **versions** read from the nodes that changed;
* **perf and accuracy deltas** of the metrics both sides recorded, with the policy's threshold or
  tolerance; numbers measured on the simulator are labelled not comparable and never count as a
  regression.

Output as text, Markdown (for a CI comment) or JSON. Exit status 1 when B regressed against A
(a new blocking failure, a worse verdict, or a comparable perf/accuracy number past its limit),
0 otherwise; 2 when A or B cannot be read.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from k3lab import formats
from k3lab.errors import InputError, UsageError, printable
from k3lab.model import catalog, numbers
from k3lab.model.policy import Policy
from k3lab.model.policy import load as load_policy
from k3lab.reports import gate, report
from k3lab.tools import release

BAD = ("fail", "incomplete")
RANK = {gate.PASS: 0, gate.INCOMPLETE: 1, gate.FAIL: 2}

Verdict = Mapping[str, Any]  # a scenario's verdict as JSON (gate.Verdict.to_json, or a release.json's, any kit's)
Item = dict[str, Any]  # one of its items (gate.Item as JSON): read by key, tolerant of what another kit wrote


class Side(TypedDict):
    """A or B: a release or a run directory, as verdicts per scenario."""

    label: str  # the path given
    kind: NotRequired[str]  # release or run
    target: str
    live: NotRequired[bool | None]  # False: a static-only release; None: a release that does not say
    scenarios: dict[str, Verdict]


class Scope(TypedDict):
    """What one side checked."""

    kind: str
    live: bool | None
    target: str
    checks: str  # in words
    scenarios: list[str]


class NewFailure(TypedDict):
    key: str
    id: str
    level: str
    status: str  # in B
    was: str  # in A, or "absent"
    message: str


class Fixed(TypedDict):
    key: str
    id: str
    level: str
    was: str
    now: str


class ExpectedChange(TypedDict):
    key: str
    a: str
    b: str


class VersionChange(TypedDict):
    component: str
    a: str | None
    b: str | None


class MetricDelta(TypedDict):
    key: str
    metric: str
    a: float | None  # None: not a finite number >= 0
    b: float | None
    delta: float | None
    relative: float | None
    rule: str
    within: bool
    comparable: bool  # False: a simulator's numbers (never a regression)


class ScenarioDelta(TypedDict):
    """One scenario's changes from A to B."""

    scenario: str
    verdict_a: str | None  # None: not in A
    verdict_b: str | None
    new_failures: list[NewFailure]
    fixed: list[Fixed]
    still_failing: int  # blocking items failing or incomplete in both
    expected_changed: list[ExpectedChange]
    versions_changed: list[VersionChange]
    metrics: list[MetricDelta]
    only_in_a: list[str]
    only_in_b: list[str]
    note: NotRequired[str]  # a scenario on one side only
    regression: NotRequired[bool]  # set last, after the note (the JSON's key order)


class Comparison(TypedDict):
    """``k3lab compare --format json``."""

    schema: int
    kind: str
    a: str
    b: str
    target_a: str
    target_b: str
    scope_a: Scope
    scope_b: Scope
    compared: str
    perf_comparable: bool
    regression: bool
    scenarios: list[ScenarioDelta]


def _side(path: str | Path, policy: Policy) -> Side:
    """A release or a run directory as verdicts per scenario."""
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"{path}: not a directory (give a release directory or a run directory)")
    if (p / release.FILE).exists() or (p / release.FILE).is_symlink():  # a FIFO or device is named by the reader
        doc = release.load(p)  # an unreadable one is an InputError naming file and field
        return Side(label=str(p), kind="release", target=doc.target, live=doc.live,
                    scenarios={v.scenario: v.model_dump(by_alias=True) for v in doc.scenarios})
    if not any((p / f).is_file() for f in ("conformance-results.json", "run-state.json")):
        junit = " (junit.xml is output only, not read: not a complete run)" if (p / "junit.xml").exists() else ""
        raise UsageError(f"{path}: neither a release ({release.FILE}) nor a run directory (conformance-results.json)"
                         + junit)
    run = report.load(p)
    if run.problems:  # a FIFO, device, huge or corrupted artefact: named, never judged as absent
        raise InputError("; ".join(run.problems))
    sid = run.scenario
    if not sid:
        raise UsageError(f"{path}: the run directory names no scenario (plan.json missing)")
    if sid not in catalog.SCENARIOS:
        raise UsageError(f"{path}: the run directory names scenario {sid!r}, which is not in the catalog")
    v = gate.evaluate_run(policy.for_scenario(sid), p)
    return Side(label=str(p), kind="run", target=run.target or "?", live=True, scenarios={sid: v.to_json()})


def _items(v: Verdict | None) -> dict[str, Item]:
    """Items by key; two items with one key (a release written by hand or by another kit) count as the worse
    of them, never as whichever came last (#35)."""
    out: dict[str, Item] = {}
    for i in (v or {}).get("items", []):
        cur = out.get(i["key"])
        if cur is None or _rank(i) < _rank(cur):
            out[i["key"]] = i
    return out


def _rank(item: Item) -> int:
    status = item.get("status")
    return gate.ORDER.index(status) if status in gate.ORDER else 0  # an unknown status is no pass


def _metric_rule(metric: str, threshold: float, tolerance: float) -> tuple[str, Any]:
    if metric.startswith("accuracy."):
        return f"within +/- {tolerance:g} points", lambda a, b: abs(b - a) <= tolerance
    name = metric.split(".", 1)[1]
    if name.endswith("_ms"):
        return f"<= A / {threshold:g}", lambda a, b: b <= a / threshold
    return f">= {threshold:g} x A", lambda a, b: b >= threshold * a


def compare(a: Side, b: Side, policy: Policy) -> Comparison:
    sim = "sim" in (a["target"], b["target"])
    scenarios = [_compare_scenario(sid, a["scenarios"].get(sid), b["scenarios"].get(sid), policy, sim)
                 for sid in sorted(set(a["scenarios"]) | set(b["scenarios"]))]
    return Comparison(schema=1, kind="k3lab-compare", a=a["label"], b=b["label"],
                      target_a=a["target"], target_b=b["target"], scope_a=scope(a), scope_b=scope(b),
                      compared=_compared(a, b), perf_comparable=not sim,
                      regression=any(r.get("regression") for r in scenarios), scenarios=scenarios)


STATIC_STAGE = "render, preflight and golden"


def scope(side: Side) -> Scope:
    """What one side checked: a release or a run, static-only or live, on which target, which scenarios."""
    live = side.get("live")
    checks = (f"{STATIC_STAGE}, then a live cycle (readiness gates, conformance suite)" if live
              else f"{STATIC_STAGE} only; no deployment was checked" if live is False
              else "not recorded (a release.json without 'live')")
    return Scope(kind=side.get("kind", "?"), live=live, target=side["target"], checks=checks,
                 scenarios=sorted(side["scenarios"]))


def _compared(a: Side, b: Side) -> str:
    """What the comparison covers, in words: like for like only as far as both sides checked."""
    common = len(set(a["scenarios"]) & set(b["scenarios"]))
    if a.get("live") is False and b.get("live") is False:
        return f"the static stage ({STATIC_STAGE}) of {common} scenario(s) on both sides; neither side checked a deployment"
    if a.get("live") is False or b.get("live") is False:
        static = "A" if a.get("live") is False else "B"
        return (f"{common} scenario(s); {static} is static-only ({STATIC_STAGE}), so only that stage is compared like "
                "for like: the other side's live items have no counterpart")
    return f"{common} scenario(s), live on both sides" if a.get("live") and b.get("live") else f"{common} scenario(s)"


def _compare_scenario(sid: str, va: Verdict | None, vb: Verdict | None, policy: Policy, sim: bool) -> ScenarioDelta:
    row = ScenarioDelta(scenario=sid, verdict_a=(va or {}).get("verdict"), verdict_b=(vb or {}).get("verdict"),
                        new_failures=[], fixed=[], still_failing=0, expected_changed=[], versions_changed=[], metrics=[],
                        only_in_a=[], only_in_b=[])
    if va is None or vb is None:
        # a scenario on one side only: its verdict and the note say it
        row["note"] = f"only in {'B' if va is None else 'A'}"
    else:
        eff = policy.for_scenario(sid)
        ia, ib = _items(va), _items(vb)
        for key in sorted(set(ia) | set(ib)):
            x, y = ia.get(key), ib.get(key)
            _presence(row, key, x, y)
            _status_change(row, key, x, y)
            if x and y and x.get("expected") and y.get("expected") and x["expected"] != y["expected"]:
                row["expected_changed"].append(ExpectedChange(key=key, a=x["expected"], b=y["expected"]))
            row["metrics"] += _metric_deltas(key, x, y, eff, sim)
        row["versions_changed"] = _versions_changed(va, vb)
    row["regression"] = _regressed(row, va, vb)
    return row


def _presence(row: ScenarioDelta, key: str, x: Item | None, y: Item | None) -> None:
    if x is None and y is not None and y["status"] not in BAD:
        row["only_in_b"].append(key)
    if y is None and x is not None:
        row["only_in_a"].append(key)


def _missing_from_b(row: ScenarioDelta, key: str, x: Item | None, y: Item | None) -> bool:
    """The baseline judged it, the candidate did not: coverage lost is never "unchanged"."""
    if y is not None or x is None or x["status"] in ("na", "ignored"):
        return False
    row["new_failures"].append(NewFailure(key=key, id=x["id"], level=x["level"], status="incomplete", was=x["status"],
                                          message="judged in A, missing from B (did not run)"))
    return True


def _status_change(row: ScenarioDelta, key: str, x: Item | None, y: Item | None) -> None:
    if _missing_from_b(row, key, x, y) or y is None:
        return
    bad_a = x is not None and x["status"] in BAD
    bad_b = y["status"] in BAD
    if bad_b and not bad_a:
        row["new_failures"].append(NewFailure(key=key, id=y["id"], level=y["level"], status=y["status"],
                                              was=x["status"] if x else "absent", message=y["message"]))
    elif bad_a and not bad_b:
        assert x is not None
        row["fixed"].append(Fixed(key=key, id=x["id"], level=x["level"], was=x["status"], now=y["status"]))
    elif bad_a and bad_b and y["level"] == "block":
        row["still_failing"] += 1


def _metric_deltas(key: str, x: Item | None, y: Item | None, eff, sim: bool) -> list[MetricDelta]:
    out = []
    for metric in sorted(set((x or {}).get("metrics", {})) & set((y or {}).get("metrics", {}))):
        assert x is not None and y is not None
        ma, mb = numbers.finite_or_none(x["metrics"][metric]), numbers.finite_or_none(y["metrics"][metric])
        if ma is None or mb is None:  # not a measurement (a release written by hand or by another kit)
            out.append(MetricDelta(key=key, metric=metric, a=ma, b=mb, delta=None, relative=None,
                                   rule="a finite number >= 0 on both sides", within=False, comparable=not sim))
            continue
        rule, ok = _metric_rule(metric, eff.threshold, eff.tolerance)
        out.append(MetricDelta(key=key, metric=metric, a=ma, b=mb, delta=round(mb - ma, 4),
                               relative=round((mb - ma) / ma, 4) if ma else None, rule=rule,
                               within=bool(ok(ma, mb)), comparable=not sim))
    return out


def _versions_changed(va: Verdict, vb: Verdict) -> list[VersionChange]:
    vera, verb = va.get("versions") or {}, vb.get("versions") or {}
    return [VersionChange(component=comp, a=vera.get(comp), b=verb.get(comp))
            for comp in sorted(set(vera) | set(verb)) if vera.get(comp) != verb.get(comp)]


def _regressed(row: ScenarioDelta, va: Verdict | None, vb: Verdict | None) -> bool:
    worse = (row["verdict_a"] is not None and row["verdict_b"] is not None
             and RANK.get(row["verdict_b"], 1) > RANK.get(row["verdict_a"], 1))
    dropped = va is not None and vb is None  # a scenario A gated that B did not: coverage lost
    new_bad = va is None and row["verdict_b"] == gate.FAIL
    return bool(worse or dropped or new_bad or any(f["level"] == "block" for f in row["new_failures"])
                or any(m["comparable"] and not m["within"] for m in row["metrics"]))


# ------------------------------------------------------------------------------------- output


def _changed(rows: list[ScenarioDelta]) -> list[ScenarioDelta]:
    return [r for r in rows if r["verdict_a"] != r["verdict_b"] or r["new_failures"] or r["fixed"]
            or r["expected_changed"] or r["versions_changed"] or r["metrics"] or r.get("note")]


_LIVE: dict[bool | None, str] = {True: "live", False: "static-only"}


def _g(value: float | None, spec: str = "g") -> str:
    return "not a number" if value is None else format(value, spec)


def _scope_line(which: str, label: str, sc: Scope) -> str:
    live = _LIVE.get(sc["live"], "scope not recorded")
    ids = sc["scenarios"]
    names = f"all {len(ids)} scenarios" if len(ids) == len(catalog.SCENARIOS) else ", ".join(ids) or "no scenario"
    return f"{which}: {sc['kind']} {label}, {live}, target {sc['target']}: {sc['checks']}; {names}"


def text(doc: Comparison) -> str:
    verdict = "REGRESSION" if doc["regression"] else "no regression"
    out = [f"compare A={doc['a']} B={doc['b']}: {verdict} in {doc['compared']}",
           _scope_line("A (last good)", doc["a"], doc["scope_a"]), _scope_line("B (candidate)", doc["b"], doc["scope_b"])]
    changed = _changed(doc["scenarios"])
    same = len(doc["scenarios"]) - len(changed)
    for r in changed:
        out.append(f"{r['scenario']}: {r['verdict_a'] or '-'} -> {r['verdict_b'] or '-'}" + (f" ({r['note']})" if r.get("note") else ""))
        for f in r["new_failures"]:
            out.append(f"  new {f['status']} [{f['level']}] {f['key']} (was {f['was']}): {f['message'][:300]}")
        for fx in r["fixed"]:
            out.append(f"  fixed {fx['key']} ({fx['was']} -> {fx['now']})")
        for e in r["expected_changed"]:
            out.append(f"  expected changed {e['key']}: {e['a']!r} -> {e['b']!r}")
        for v in r["versions_changed"]:
            out.append(f"  version {v['component']}: {v['a']} -> {v['b']}")
        for m in r["metrics"]:
            tag = "not comparable (simulator)" if not m["comparable"] else ("ok" if m["within"] else "PAST LIMIT")
            out.append(f"  {m['metric']}: {_g(m['a'])} -> {_g(m['b'])} ({_g(m['delta'], '+g')}; {m['rule']}) {tag}")
        if r["still_failing"]:
            out.append(f"  {r['still_failing']} blocking item(s) failing or incomplete in both")
    out.append(f"{same} scenario(s) unchanged")
    return printable("\n".join(out) + "\n")  # messages, keys and versions come from the runs


def markdown(doc: Comparison) -> str:
    md = report.md
    head = "**Regression**" if doc["regression"] else "No regression"
    out = [f"### k3lab compare: {head}", "", f"Compared: {md(doc['compared'])}", "",
           f"A (last good): `{md(doc['a'])}` ({_scope_md(doc['scope_a'])})  ",
           f"B (candidate): `{md(doc['b'])}` ({_scope_md(doc['scope_b'])})", "",
           "| scenario | A | B | new failures | fixed | versions changed |", "|---|---|---|---|---|---|"]
    for r in doc["scenarios"]:
        out.append(f"| {r['scenario']} | {r['verdict_a'] or '-'} | {r['verdict_b'] or '-'} | {len(r['new_failures'])} | "
                   f"{len(r['fixed'])} | {len(r['versions_changed'])} |")
    for r in _changed(doc["scenarios"]):
        lines = _markdown_details(r)
        if lines:
            out += ["", f"**{r['scenario']}** ({r['verdict_a'] or '-'} → {r['verdict_b'] or '-'})", "", *lines]
    return printable(report.redact("\n".join(out) + "\n"))


def _scope_md(sc: Scope) -> str:
    live = _LIVE.get(sc["live"], "scope not recorded")
    return f"{sc['kind']}, {live}, target {sc['target']}, {len(sc['scenarios'])} scenario(s)"


def _markdown_details(r: ScenarioDelta) -> list[str]:
    md = report.md
    lines = [f"- new {f['status']} [{f['level']}] `{md(f['key'])}` (was {f['was']}): {md(f['message'][:300])}"
             for f in r["new_failures"]]
    lines += [f"- fixed `{md(f['key'])}` ({f['was']} → {f['now']})" for f in r["fixed"]]
    lines += [f"- expected `{md(e['key'])}`: {md(e['a'])} → {md(e['b'])}" for e in r["expected_changed"]]
    lines += [f"- version {v['component']}: {md(v['a'])} → {md(v['b'])}" for v in r["versions_changed"]]
    lines += [f"- {m['metric']}: {_g(m['a'])} → {_g(m['b'])} ({_g(m['delta'], '+g')}; {m['rule']})"
              + (" not comparable (simulator)" if not m["comparable"] else "" if m["within"] else " **past limit**")
              for m in r["metrics"]]
    return lines


def cmd_compare(args) -> int:
    from k3lab import outputs

    out = outputs.check_file(args.out, getattr(args, "force", False)) if args.out else None
    policy = load_policy(args.policy)
    doc = compare(_side(args.a, policy), _side(args.b, policy), policy)
    if out is not None:
        # allow_nan=False: the JSON stays JSON (every number was checked finite before it counted)
        fmt = {"text": text, "markdown": markdown,
               "json": lambda d: json.dumps(d, indent=2, allow_nan=False) + "\n"}[args.format]
        outputs.write_file(out, fmt(doc))
    else:
        formats.emit(args, doc, lambda d: formats.say((markdown if args.format == "markdown" else text)(d), end=""))
    return 1 if doc["regression"] else 0
