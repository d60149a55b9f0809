"""One log on one node, diagnosed: the shape the wording tests share (tmp_path/logs/n0/engine.log)."""
from __future__ import annotations

from pathlib import Path

from k3lab.diagnosis.engine import Diagnosis, diagnose


def diagnose_text(tmp_path: Path, text: str) -> Diagnosis:
    node = tmp_path / "logs" / "n0"
    node.mkdir(parents=True)
    (node / "engine.log").write_text(text)
    return diagnose(tmp_path / "logs")


def top_cause(tmp_path: Path, text: str) -> str:
    """The top cause's id, "" when none is named."""
    d = diagnose_text(tmp_path, text)
    return d.top.cause.id if d.top else ""


def assert_clean(d: Diagnosis) -> None:
    """Nothing flagged: no cause and no first error."""
    assert d.findings == [] and d.first_errors == [], ([f.cause.id for f in d.findings], d.first_errors)


def named(tmp_path: Path, text: str) -> list[str]:
    """The ids of the causes a signature names, in rank order."""
    return [f.cause.id for f in diagnose_text(tmp_path, text).findings]


def likely_only(tmp_path: Path, text: str) -> list[str]:
    """The ids of the causes the meaning layer names; no signature may name one."""
    d = diagnose_text(tmp_path, text)
    assert d.findings == [], [f.cause.id for f in d.findings]
    return [f.cause.id for f in d.likely]
