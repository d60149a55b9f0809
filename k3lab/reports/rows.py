"""The reports' records: a check's result as every report reads it, and a scenario's verdict as JSON."""
from __future__ import annotations

from typing import Any, TypedDict


class Check(TypedDict):
    """One check's result as every report reads it: a conformance-results.json row (k3lab.model.runs.ResultRow)
    redacted, its metadata filled from its properties and its node from its parameter."""

    nodeid: str
    area: str
    id: str  # "" when the row names none (a collection error)
    must: str
    node: str | None  # the plan node it is about; None: deployment-wide
    outcome: str
    duration: float
    properties: dict[str, str]
    message: str
    na_reason: str | None  # a skip's reason id (k3lab.model.checks.NA_REASONS)


class VerdictDoc(TypedDict):
    """A scenario's verdict as JSON (gate.json, release.json's scenarios, compare's input)."""

    scenario: str
    verdict: str  # PASS, FAIL, INCOMPLETE
    label: str  # as the reports say it (waived MUST checks counted)
    reasons: list[str]
    waived_must: list[str]
    run_dir: str | None
    versions: dict[str, Any]  # component -> version read from the nodes (versions.json's summary)
    items: list[dict[str, Any]]  # each Item's fields (dataclasses.asdict)
