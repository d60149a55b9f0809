"""Verdict of one scenario under a gate policy: PASS, FAIL or INCOMPLETE, with its reasons.

Inputs are what a run leaves behind (``conformance-results.json`` via
:mod:`k3lab.reports.report`, ``versions.json``, ``plan.json``'s deviations) plus, in a release, the
static stage's rows. Every input becomes an :class:`Item` with a level from the policy and a
status; the verdict is the worst status among blocking items (see :mod:`k3lab.model.policy`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from k3lab.launch import versions
from k3lab.model import numbers
from k3lab.model.policy import Effective
from k3lab.reports import report
from k3lab.reports.rows import VerdictDoc

if TYPE_CHECKING:
    from k3lab.preflight.checks import AcceptedJson

PASS, FAIL, INCOMPLETE = "PASS", "FAIL", "INCOMPLETE"
# item status, worst first; "na" = not applicable here, "warn" = a non-blocking problem
ORDER = ("fail", "incomplete", "warn", "pass", "na", "ignored")
EXIT = {PASS: 0, FAIL: 1, INCOMPLETE: 3}  # 3: could not be evaluated fully (environment, skips)


class StaticRow(TypedDict):
    """One step of a scenario's static stage in a release (k3lab.tools.release.static_rows)."""

    id: str  # static.render, static.preflight, static.golden
    status: str  # pass, fail, na
    message: str
    duration: float  # seconds
    accepted: NotRequired[list[AcceptedJson]]  # static.preflight: the findings accepted, with reasons


@dataclass
class Item:
    key: str            # unique in the scenario: nodeid for checks, "<area>.<name>" otherwise
    id: str             # policy id (conformance.id, static.preflight, versions.vllm_ascend, ...)
    area: str
    level: str          # block / warn / ignore
    status: str         # one of ORDER
    message: str = ""
    node: str | None = None
    why_level: str = ""
    expected: str = ""
    actual: str = ""
    metrics: dict[str, float] = field(default_factory=dict)  # perf.* / accuracy.* properties
    duration: float = 0.0  # seconds the check (or static step) took; JUnit's time
    waived: str = ""    # a MUST check the policy's waive_must lets not block: its reason


@dataclass
class Verdict:
    scenario: str
    verdict: str
    reasons: list[str]
    items: list[Item]
    run_dir: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> VerdictDoc:
        return VerdictDoc(scenario=self.scenario, verdict=self.verdict, label=self.label, reasons=self.reasons,
                          waived_must=self.waived_must(), run_dir=self.run_dir, versions=self.versions,
                          items=[asdict(i) for i in self.items])

    def waived_must(self) -> list[str]:
        """MUST checks that did not pass and did not block only because the policy's waive_must names them:
        'id: reason', one per check id."""
        out = {i.id: f"{i.id}: {i.waived}" for i in self.items
               if i.waived and i.status in ("fail", "incomplete", "warn")}
        return sorted(out.values())

    @property
    def label(self) -> str:
        """The verdict as every report says it: a PASS reached with waived MUST checks says how many (#35)."""
        return label(self.verdict, len(self.waived_must()))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Verdict:
        return cls(doc["scenario"], doc["verdict"], list(doc.get("reasons", [])),
                   [Item(**i) for i in doc.get("items", [])], doc.get("run_dir"), doc.get("versions") or {})

    def areas(self) -> dict[str, str]:
        """area -> worst status of its items (the scenario x area matrix cell)."""
        out: dict[str, str] = {}
        for item in self.items:
            cur = out.get(item.area)
            if cur is None or ORDER.index(_effective(item)) < ORDER.index(cur):
                out[item.area] = _effective(item)
        return out


def label(verdict: str, waived: int) -> str:
    return f"{verdict} with {waived} waived MUST checks" if verdict == PASS and waived else verdict


def _effective(item: Item) -> str:
    """A non-blocking problem is a warning; an ignored item is ignored."""
    if item.level == "ignore":
        return "ignored"
    if item.level == "warn" and item.status in ("fail", "incomplete"):
        return "warn"
    return item.status


# ------------------------------------------------------------------------------------ sources


def check_items(eff: Effective, run: report.Run) -> list[Item]:
    items = []
    for t in run.tests:
        props = t["properties"]
        area = t["area"]
        cid = props.get("conformance.id") or f"{area}.{t['nodeid'].split('::')[-1].split('[')[0]}"
        must = props.get("conformance.must", t["must"]) or ""
        level, why = eff.level(cid, area, must)
        status, msg = _status(eff, cid, t["outcome"], t["message"], props, t["na_reason"])
        metrics, bad = _metrics(props)
        if bad and status in ("pass", "na", "warn"):  # a number that is no measurement never passes
            status, msg = "incomplete", f"not a measurement: {'; '.join(bad)}"
        items.append(Item(t["nodeid"], cid, area, level, status, msg, t["node"], why,
                          props.get("expected", ""), props.get("actual", ""), metrics,
                          t["duration"], eff.waiver(cid, area, must) or ""))
    return items


def _status(eff: Effective, cid: str, outcome: str, msg: str, props: dict[str, str],
            na_reason: str | None = None) -> tuple[str, str]:
    """A test's outcome as a gate status, and the message that says why. A skip is not applicable when the
    policy lists its reason id (the row's ``na_reason``, or its ``conformance.na`` property)."""
    kind = props.get("kind", "product")
    if outcome in ("passed", "xpassed"):
        return "pass", msg
    if outcome == "failed":
        # a broken lab (kind environment) cannot judge the candidate: incomplete, not failed
        return ("incomplete" if kind == "environment" else "fail"), (f"{msg} [kind {kind}]" if kind != "product" else msg)
    if outcome == "error":
        return ("fail" if kind == "product" and props.get("what") else "incomplete"), f"errored: {msg}"
    na = eff.not_applicable_reason(cid, msg, na_reason or props.get("conformance.na"))  # skipped, xfailed
    return ("na", f"skipped: {msg}") if na else ("incomplete", f"skipped, not a listed not-applicable reason: {msg}")


def _metrics(props: dict[str, str]) -> tuple[dict[str, float], list[str]]:
    """The perf./accuracy. properties that are measurements (finite, >= 0), and what the others hold."""
    metrics, bad = {}, []
    for k, v in props.items():
        if k.startswith(("perf.", "accuracy.")):
            try:
                metrics[k] = numbers.measured(float(v), k)
            except ValueError as exc:
                bad.append(str(exc) if "could not convert" not in str(exc) else f"{k}: {v!r} is not a number")
    return metrics, bad


def version_items(eff: Effective, scenario: str, doc: dict[str, Any], plan_nodes: list[str] | None = None) -> list[Item]:
    """One item per policy version rule. The gate decides on what should have answered (#35): a version is
    judged on every plan node, so a node that did not answer (``unanswered``, or absent from ``nodes``) or that
    answered without the component leaves the rule INCOMPLETE, never a PASS read off the nodes that did."""
    summary = doc.get("summary") or {}
    guide = versions.guide_of(scenario)
    items = []
    for rule in eff.versions:
        expected = guide.get(rule.component) if rule.expect == "guide" else rule.expect
        key = f"versions.{rule.component}"
        actual = summary.get(rule.component)
        if expected is None:
            items.append(Item(key, key, "versions", rule.level, "na", f"the guide pins no {rule.component} version; "
                              f"recorded {actual or 'nothing'}", actual=str(actual or "")))
            continue
        status, msg = _version_status(rule.component, actual, expected, doc, plan_nodes or [])
        if status == "fail" and not str(actual).startswith("mixed: "):
            msg += f" ({rule.reason})"
        items.append(Item(key, key, "versions", rule.level, status, msg, None, rule.reason or "policy versions",
                          expected, str(actual or "")))
    return items


def _version_status(component: str, actual: Any, expected: str, doc: dict[str, Any],
                    plan_nodes: list[str]) -> tuple[str, str]:
    if not doc:
        return "incomplete", "no versions.json: the nodes' versions were not read"
    if actual is None:
        return "incomplete", f"{component} not found on any node"
    if str(actual).startswith("mixed: "):
        return "fail", f"{component} differs between nodes: {actual[7:]}"
    if not versions.matches(str(actual), expected):
        return "fail", f"{component} is {actual}, the policy expects {expected}"
    unread = _unread(component, doc, plan_nodes)
    if unread:
        return "incomplete", (f"{component} {actual} on the nodes that answered, but {len(unread)} of "
                              f"{len(plan_nodes) or len(unread)} node(s) not read: {'; '.join(unread[:5])}"
                              + (" ..." if len(unread) > 5 else ""))
    return "pass", f"{component} {actual}"


def _unread(component: str, doc: dict[str, Any], plan_nodes: list[str]) -> list[str]:
    """The plan nodes whose ``component`` was not read, each with why."""
    nodes = doc.get("nodes") or {}
    unanswered = doc.get("unanswered") or {}
    if isinstance(unanswered, list):
        unanswered = {n: f"{n}: did not answer" for n in unanswered}
    out = []
    for name in plan_nodes or sorted(set(nodes) | set(unanswered)):
        if name in unanswered:
            out.append(str(unanswered[name]))
        elif name not in nodes:
            out.append(f"{name}: not in {versions.FILE}")
        elif not (nodes.get(name) or {}).get(component):
            out.append(f"{name}: answered without {component}")
    return out


def deviation_items(eff: Effective, plan: dict[str, Any]) -> list[Item]:
    items = []
    for dev in plan.get("deviations") or []:
        did = str(dev.get("id", "?"))
        reason = eff.deviation_accepted(did)
        key = f"deviations.{did}"
        if reason:
            items.append(Item(key, key, "deviations", eff.unaccepted_deviation, "pass", f"accepted: {reason}"))
        else:
            items.append(Item(key, key, "deviations", eff.unaccepted_deviation, "fail",
                              f"deviation {did} is not accepted by the policy: {dev.get('what', '')}",
                              why_level="policy unaccepted_deviation"))
    return items


def static_items(eff: Effective, rows: list[StaticRow]) -> list[Item]:
    return [Item(r["id"], r["id"], "static", eff.static, r["status"], r["message"], why_level="policy static",
                 duration=r["duration"]) for r in rows]


# ------------------------------------------------------------------------------------ verdict


def decide(scenario: str, items: list[Item], run_dir: str | None = None, vers: dict | None = None) -> Verdict:
    blocking = [i for i in items if i.level == "block"]
    fails = [i for i in blocking if i.status == "fail"]
    incomplete = [i for i in blocking if i.status == "incomplete"]
    verdict = FAIL if fails else INCOMPLETE if incomplete else PASS
    reasons = [f"{scenario}: {i.key}: {i.message}" for i in fails + incomplete]
    return Verdict(scenario, verdict, reasons, items, run_dir, vers or {})


def evaluate_run(eff: Effective, run_dir: str | Path, static_rows: list[StaticRow] | None = None,
                 cycle_note: str = "") -> Verdict:
    """One run directory (plus the release's static rows) under the scenario's effective policy."""
    run = report.load(run_dir)
    items = static_items(eff, static_rows or [])
    if run.tests:
        items += check_items(eff, run)
    else:
        status = run.state.get("status")
        what = cycle_note or f"run status {status or 'unknown'}"
        if run.source.endswith(report.JUNIT_NOT_READ):
            what += report.JUNIT_NOT_READ
        # a readiness gate that failed is the deployment failing, not a missing measurement
        items.append(Item("live.results", "live.results", "live", "block",
                          "fail" if status == "failed" else "incomplete",
                          f"no conformance results: {what}"))
    if run.tests and run.exitstatus not in (None, 0, 1):
        items.append(Item("live.pytest", "live.pytest", "live", "block", "incomplete",
                          f"the conformance suite stopped early (pytest exit {run.exitstatus})"))
    items += _missing_checks(run)
    vers = versions.load(run_dir)
    plan_problem = _plan_problem(Path(run_dir), run.plan, eff.scenario)
    if plan_problem:  # without the plan, the version and deviation items cannot be judged: never PASS
        items.append(Item("live.plan", "live.plan", "live", "block", "incomplete", plan_problem))
    else:
        items += version_items(eff, eff.scenario, vers, [str(n.get("name")) for n in run.plan["nodes"]])
        items += deviation_items(eff, run.plan)
    if not vers:
        items.append(Item("live.versions", "live.versions", "live", "block", "incomplete",
                          f"no readable {versions.FILE}: the versions the nodes ran were not recorded"))
    return decide(eff.scenario, items, str(run_dir), vers.get("summary") or {})


def _plan_problem(run_dir: Path, plan: dict[str, Any], scenario: str) -> str:
    """Why plan.json cannot be judged ('' when it can): missing, unreadable or not this scenario's plan."""
    if not (run_dir / "plan.json").is_file():
        return "no plan.json: the planned versions and deviations cannot be judged"
    if not plan:
        return "plan.json is unreadable (half-written or not JSON): versions and deviations cannot be judged"
    if plan.get("scenario") != scenario or not isinstance(plan.get("nodes"), list) or not plan["nodes"] \
            or not isinstance(plan.get("deviations", []), list):
        return f"plan.json is not a plan of {scenario} (scenario, nodes or deviations missing or malformed)"
    return ""


def _missing_checks(run: report.Run) -> list[Item]:
    """Checks the suite collected that left no result (a crashed worker, a cut-short session), and
    checks deselected from the run (-k, --deselect): the verdict is on what should have run."""
    collected, deselected = run.collected, run.deselected
    ran = {t["nodeid"] for t in run.tests}
    missing = [c for c in collected or [] if c not in ran]
    items = []
    if missing:
        items.append(Item("live.missing", "live.missing", "live", "block", "incomplete",
                          f"{len(missing)} collected check(s) left no result: {', '.join(missing[:5])}"
                          + (" ..." if len(missing) > 5 else "")))
    if deselected:
        items.append(Item("live.deselected", "live.deselected", "live", "block", "incomplete",
                          f"{deselected} check(s) were deselected (-k/--deselect): not a full run"))
    return items


def overall(verdicts: list[Verdict]) -> str:
    kinds = {v.verdict for v in verdicts}
    return FAIL if FAIL in kinds else INCOMPLETE if INCOMPLETE in kinds or not verdicts else PASS


def overall_label(verdicts: list[Verdict]) -> str:
    """The release's verdict as its reports say it: a PASS with waived MUST checks counts them (per scenario)."""
    return label(overall(verdicts), sum(len(v.waived_must()) for v in verdicts))
