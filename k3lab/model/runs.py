"""The files a run and a release leave behind, as models beside :class:`~k3lab.model.plan.Plan`.

``run-state.json`` (written by :mod:`k3lab.launch.lifecycle`), ``conformance-results.json`` (the
suite's plugin) and ``release.json`` (:mod:`k3lab.tools.release`) are read back by ``down``/``status``,
the suite, the reports, the gate, ``compare``, ``baseline`` and the benchmarks. Each is validated on read,
carries a version, and a corrupted, truncated or foreign file is an :class:`~k3lab.errors.InputError`
(exit 2) naming the file and the field, never a ``KeyError`` three modules later.
"""
from __future__ import annotations

import itertools
import math
import os
import time
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
    target: Literal["sim", "lab", "k8s", ""] = ""
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


def inside(path: Path) -> None:
    """An InputError when ``path`` is a symlink whose target leaves its folder (the run directory): a
    reader of a run never quotes a file a link placed there points at."""
    if path.is_symlink():
        target = path.resolve()
        if path.parent.resolve() not in target.parents:
            raise InputError(f"{path}: is a symlink to {target}, outside the run directory; not read")


def within(run_dir: str | Path, rel: str) -> Path:
    """``run_dir/rel`` when no folder or file on the way down is a symlink (evidence/ included); else an
    InputError naming the link: a reader of a run never follows one out of it."""
    path = Path(run_dir)
    for part in Path(rel).parts:
        path = path / part
        if path.is_symlink():
            raise InputError(f"{path}: is a symlink (to {os.readlink(path)}) in the run directory; not followed")
    return path


def read_doc(path: str | Path, max_bytes: int = MAX_BYTES) -> object:
    """The one reader of a run's JSON files: never through a symlink out of the run directory, a regular
    file within size and depth caps (an InputError naming the file and why); not JSON is a ValueError."""
    from k3lab.model import safeyaml  # its bounded reader; yaml stays out of the static commands' start-up

    p = Path(path)
    inside(p)
    return safeyaml.read_json(p, p.name, max_bytes)


def read(model: type[M], path: str | Path, max_bytes: int = MAX_BYTES) -> M:
    """Read and validate one artefact file; every failure is an InputError naming the file and field."""
    p = Path(path)
    try:  # regular file, size and depth caps: an InputError naming the file and the reason
        data = read_doc(p, max_bytes)
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


# a run's evidence tree: a node folder per plan node, a few files each; bounds for a hostile one
WALK_FILES = 10_000
WALK_DEPTH = 6
WALK_SECONDS = 10.0


def walk(run_dir: str | Path, sub: str, max_files: int = WALK_FILES, max_depth: int = WALK_DEPTH,
         max_seconds: float = WALK_SECONDS) -> tuple[list[str], list[str]]:
    """(files, skipped): the regular files under ``run_dir/sub`` as run-dir-relative POSIX paths, sorted, and
    what was not read, each with why. The one walker of a run directory: no symlink is followed (``sub``
    itself included), at most ``max_files`` files, ``max_depth`` folders down and ``max_seconds``."""
    root = Path(run_dir)
    base = root / sub
    if base.is_symlink():
        return [], [f"{sub} (a symlink to {os.readlink(base)}: not followed)"]
    if not base.is_dir():
        return [], []
    files: list[str] = []
    skipped: list[str] = []
    deadline = time.monotonic() + max_seconds
    stack = [(base, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as it:  # never more names than the cap: a huge folder is not listed whole
                entries = sorted(itertools.islice(it, max_files + 1), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(f"{Path(folder).relative_to(root).as_posix()} (unreadable: {exc.strerror})")
            continue
        for e in entries:
            rel = Path(e.path).relative_to(root).as_posix()
            if len(files) >= max_files or time.monotonic() > deadline:
                return sorted(files), [*skipped, f"{sub}: more than {len(files)} files or {max_seconds:.0f}s; the rest not listed"]
            if e.is_symlink():
                skipped.append(f"{rel} (a symlink: not followed)")
            elif e.is_dir(follow_symlinks=False):
                if depth + 1 < max_depth:
                    stack.append((Path(e.path), depth + 1))
                else:
                    skipped.append(f"{rel} (more than {max_depth} folders deep)")
            elif e.is_file(follow_symlinks=False):
                files.append(rel)
    return sorted(files), skipped
