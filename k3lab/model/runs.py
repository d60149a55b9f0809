"""The files a run and a release leave behind, as models beside :class:`~k3lab.model.plan.Plan`.

``run-state.json`` (written by :mod:`k3lab.launch.lifecycle`), ``conformance-results.json`` (the
suite's plugin) and ``release.json`` (:mod:`k3lab.tools.release`) are read back by ``down``/``status``,
the suite, the reports, the gate, ``compare``, ``baseline`` and the benchmarks. Each is validated on read,
carries a version, and a corrupted, truncated or foreign file is an :class:`~k3lab.errors.InputError`
(exit 2) naming the file and the field, never a ``KeyError`` three modules later.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from k3lab.errors import InputError

if TYPE_CHECKING:
    from k3lab.model.plan import Plan

PLAN = "plan.json"
RUN_STATE = "run-state.json"
RESULTS = "conformance-results.json"
RELEASE = "release.json"
GATE_FAILURE = "gate-failure.json"  # where the bring-up stopped: stage, node, process, log tail (the diagnosis reads it)
VERSION = 1  # the newest version of each file this kit writes and reads

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
M = TypeVar("M", bound=BaseModel)


class _Artefact(BaseModel):
    # later kits may add keys; what this kit reads is checked, what it does not know is kept aside
    model_config = ConfigDict(extra="allow")


def _finite(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a finite number >= 0, got {value!r}")
    return value


class RunState(_Artefact):
    """What ``up``/``check`` leave in ``runs/<run>/run-state.json``: where every node's container is."""

    # every key has a default: a state written part-way (a failed bring-up, an attach) is still read, and
    # each key that is there must have its type
    version: int = Field(VERSION, ge=1, le=VERSION)  # files of kits before versions were 1
    run: str = ""
    status: str = ""
    scenario: str = ""
    target: Literal["sim", "lab", ""] = ""
    plan: str = ""
    run_dir: str = ""
    containers: dict[str, str] = Field(default_factory=dict)
    network: str | None = None
    endpoints: dict[str, str] = Field(default_factory=dict)
    ssh: dict[str, str | None] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    attached: bool = False
    left: dict[str, str] = Field(default_factory=dict)  # nodes a teardown could not reach: node -> endpoint

    @field_validator("timings")
    @classmethod
    def _timings(cls, v: dict[str, float]) -> dict[str, float]:
        return {k: _finite(x) for k, x in v.items()}

    def endpoint_of(self, node: str, default: str) -> str:
        return self.endpoints.get(node, default)


class ResultRow(_Artefact):
    """One check's outcome as the suite's plugin folds it (setup, call and teardown together)."""

    nodeid: str
    area: str = "other"
    id: str | None = None
    must: str = ""
    node: str | None = None
    param: str | None = None
    outcome: Outcome
    duration: float = 0.0
    properties: dict[str, str] = Field(default_factory=dict)
    message: str = ""

    @field_validator("duration")
    @classmethod
    def _duration(cls, v: float) -> float:
        return _finite(v)


class Results(_Artefact):
    """``conformance-results.json``: the suite's rows, its exit status and the versions it ran with."""

    schema_: int = Field(VERSION, alias="schema", ge=1, le=VERSION)
    exitstatus: int | None = None
    started: str = ""
    finished: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    collected: list[str] | None = None  # node ids the suite collected (None: a file of an older kit)
    deselected: int = Field(0, ge=0)
    tests: list[ResultRow]

    @field_validator("tests")
    @classmethod
    def _one_row_each(cls, v: list[ResultRow]) -> list[ResultRow]:
        """The plugin folds a check's phases into one row per node id; two rows for one check (a failed and a
        passed one, from a merged or edited file) cannot both be its outcome: refused, never the last one read."""
        seen: dict[str, list[str]] = {}
        for row in v:
            seen.setdefault(row.nodeid, []).append(row.outcome)
        dup = {k: o for k, o in seen.items() if len(o) > 1}
        if dup:
            first = next(iter(dup))
            raise ValueError(f"{len(dup)} check(s) with more than one row, e.g. {first!r}: {len(dup[first])} rows "
                             f"({', '.join(dup[first])}); a results file holds one row per check")
        return v


class GateItem(_Artefact):
    """One gate input of a scenario's verdict (:class:`k3lab.reports.gate.Item` as stored)."""

    key: str
    id: str
    area: str
    level: str
    status: str
    message: str = ""
    node: str | None = None
    why_level: str = ""
    expected: str = ""
    actual: str = ""
    metrics: dict[str, float] = Field(default_factory=dict)


class ReleaseRow(_Artefact):
    """A scenario's verdict in a release."""

    scenario: str
    verdict: Literal["PASS", "FAIL", "INCOMPLETE"]
    reasons: list[str] = Field(default_factory=list)
    run_dir: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    items: list[GateItem] = Field(default_factory=list)


class Release(_Artefact):
    """``release.json``: every scenario's verdict and how the release ran."""

    schema_: int = Field(VERSION, alias="schema", ge=1, le=VERSION)
    kind: str
    target: str = "?"
    live: bool | None = None  # False: --static-only (render, preflight, golden); None: a release that does not say
    overall: Literal["PASS", "FAIL", "INCOMPLETE"] | None = None
    scenarios: list[ReleaseRow]

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v != "k3lab-release":
            raise ValueError("not a k3lab release document")
        return v


class Versions(_Artefact):
    """``versions.json`` (k3lab.launch.versions.probe): what each node ran, their summary, and the nodes
    that did not answer; every key has a default (a partial probe is still read), each present key its type."""

    schema_: int = Field(VERSION, alias="schema", ge=1, le=VERSION)
    source: str = ""
    guide: dict[str, str | None] = Field(default_factory=dict)
    nodes: dict[str, dict[str, str | None]] = Field(default_factory=dict)
    summary: dict[str, str | None] = Field(default_factory=dict)
    unanswered: dict[str, str] | list[str] = Field(default_factory=dict)


def _field(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    return f"field {where}: {err['msg']}"


# a run's largest artefact (results of a full suite with evidence properties) is a few hundred KiB
MAX_BYTES = 16 << 20


def read(model: type[M], path: str | Path, max_bytes: int = MAX_BYTES) -> M:
    """Read and validate one artefact file; every failure is an InputError naming the file and field."""
    from k3lab.model import safeyaml  # its bounded reader; yaml stays out of the static commands' start-up

    p = Path(path)
    try:  # regular file, size and depth caps: an InputError naming the file and the reason
        data = safeyaml.read_json(p, p.name, max_bytes)
    except ValueError as exc:
        raise InputError(f"{p}: unreadable {p.name}: not valid JSON ({exc})") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{p}: {_field(exc)}") from None


def plan(run_dir: str | Path) -> Plan:
    """The run's plan.json: the one reader of it (bounded like the other artefacts, validated as a Plan)."""
    from k3lab.model.plan import Plan

    return read(Plan, Path(run_dir) / PLAN)


class _NodeName(_Artefact):
    name: str


class PlanOutline(_Artefact):
    """What a reader of any kit's plan.json may rely on (the node names, in plan order): the diagnosis reads
    folders of older kits and partial runs, whose plans need not validate as this kit's :class:`Plan`."""

    nodes: list[_NodeName] = Field(default_factory=list)


def plan_nodes(run_dir: str | Path) -> list[str]:
    return [n.name for n in read(PlanOutline, Path(run_dir) / PLAN).nodes]


def run_state(run_dir: str | Path) -> RunState:
    return read(RunState, Path(run_dir) / RUN_STATE, 1 << 20)


def results(run_dir: str | Path) -> Results:
    return read(Results, Path(run_dir) / RESULTS)


def release(out: str | Path) -> Release:
    return read(Release, Path(out) / RELEASE)


def versions(run_dir: str | Path) -> Versions:
    return read(Versions, Path(run_dir) / "versions.json")
