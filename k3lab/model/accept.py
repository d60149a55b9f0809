"""Accepted findings: a warning a lab takes on purpose, by check id and node, with a reason.

An inventory (``accept:``) or a gate policy (``accepted_findings:``, in ``defaults`` or a scenario's
section) lists them. Under ``--strict`` (preflight, cycle, release) an open warning fails the command
with exit 1; an accepted one does not, and every report lists it with its reason. Only warnings can
be accepted: an error stays an error (its acceptance is reported as having no effect).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator


class AcceptedFinding(BaseModel):
    # as the inventory's models: strict types, validators built on first use (not at import)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    check: str = Field(min_length=1, max_length=64, pattern=r"^[A-Z][A-Z0-9-]*$",
                       description="finding id (k3lab preflight --list)", examples=["PF-ADDR-PLACEHOLDER"])
    nodes: list[str] = Field(default_factory=list, max_length=256,
                             description="nodes the acceptance covers; empty: every node", examples=[["p0", "p1"]])
    reason: str = Field(min_length=1, max_length=500, description="why the lab accepts this finding (mandatory; "
                        "every report shows it)", examples=["lab switch rack 4: addresses assigned on site"])

    @field_validator("reason")
    @classmethod
    def _reason(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a reason is mandatory: say why this finding is accepted")
        return v.strip()

    def covers(self, check: str, nodes: Sequence[str]) -> bool:
        return check == self.check and (not self.nodes or (bool(nodes) and set(nodes) <= set(self.nodes)))


class _Finding(Protocol):  # preflight's Finding (a layer above), read-only
    @property
    def check(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Outcome:
    """Findings split by what they mean for a command's exit status."""
    errors: list[Any]  # findings that always fail
    warnings: list[Any]  # open warnings: fail only under --strict
    accepted: list[tuple[Any, AcceptedFinding]]  # warnings accepted, with the acceptance that covers them
    ignored: list[AcceptedFinding]  # acceptances that matched an error (no effect: errors cannot be accepted)

    def failed(self, strict: bool) -> bool:
        return bool(self.errors) or (strict and bool(self.warnings))


def apply(findings: Iterable[_Finding], acceptances: Iterable[AcceptedFinding]) -> Outcome:
    accs = list(acceptances)
    out = Outcome([], [], [], [])
    for f in findings:
        acc = next((a for a in accs if a.covers(f.check, f.nodes)), None)
        if f.severity == "error":
            out.errors.append(f)
            if acc is not None and acc not in out.ignored:
                out.ignored.append(acc)
        elif acc is not None:
            out.accepted.append((f, acc))
        else:
            out.warnings.append(f)
    return out
