"""The run as data: a list of phases, run by one loop that times each, says what it does and stops at
the first failure.

A phase is a name, the timing key the reports and benchmarks read (``run-state.json`` ``timings``), and a
function of no arguments (it closes over the run). It fails by returning False (a verdict: the suite
failed) or by raising: a :class:`~k3lab.errors.ChecksFailed`
(a gate, a stage's checks), an environment error, an interrupt. The loop records one
:class:`PhaseResult` per phase that ran, the failing one included, and re-raises, so teardown (the run's
:class:`~k3lab.launch.scope.RunScope`) and the exit code stay with the caller. The phases are listed by
:func:`k3lab.launch.lifecycle.up` from the target (:mod:`k3lab.launch.targets`): the lab adds its lab
preflight, host stage and hardware stage, the sim adds nothing.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Literal

from k3lab.errors import ChecksFailed, RunInterrupted
from k3lab.launch.scope import Interrupted

Status = Literal["passed", "failed", "error", "interrupted"]


@dataclass(frozen=True)
class Phase:
    name: str
    fn: Callable[[], object]
    timing: str = ""  # key in the run's timings; default "<name>_s"

    @property
    def timing_key(self) -> str:
        return self.timing or f"{self.name.replace('-', '_')}_s"


@dataclass(frozen=True)
class PhaseResult:
    name: str
    status: Status
    seconds: float
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _status(exc: BaseException) -> Status:
    if isinstance(exc, (KeyboardInterrupt, Interrupted, RunInterrupted)):
        return "interrupted"
    return "failed" if isinstance(exc, ChecksFailed) else "error"


@dataclass
class Pipeline:
    """Runs phases in order into ``timings`` and ``results``; ``announce(name)`` before each (progress)."""

    timings: dict[str, float]
    announce: Callable[[str], None] = lambda name: None
    results: list[PhaseResult] = field(default_factory=list)

    def run(self, phases: Iterable[Phase]) -> None:
        for phase in phases:
            self.announce(phase.name)
            t = time.monotonic()
            try:
                outcome = phase.fn()
            except BaseException as exc:
                self._record(phase, _status(exc), t, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                raise
            if outcome is False:  # a phase whose failure is a verdict (the suite), not an error: recorded, then stop
                self._record(phase, "failed", t)
                return
            self._record(phase, "passed", t)

    def _record(self, phase: Phase, status: Status, started: float, detail: str = "") -> None:
        seconds = time.monotonic() - started
        self.timings[phase.timing_key] = seconds
        self.results.append(PhaseResult(phase.name, status, round(seconds, 3), detail[:300]))

    def failed(self) -> PhaseResult | None:
        return next((r for r in self.results if r.status != "passed"), None)
