"""Every check of the kit in one list, each a :class:`k3lab.model.checks.CheckInfo`: the static
preflight (PF-*), the lab preflight (LPF-*), the host stage (HST-*), and the live suite's hardware and
conformance checks (read from their marks, the suite not imported). ``k3lab checks`` prints it;
``golden/checks.json`` keeps it, so adding, removing or renaming a check shows in review.
"""
from __future__ import annotations

from k3lab.model.checks import STAGES, CheckInfo, base_id, duplicates, suite_checks


def every_check() -> list[CheckInfo]:
    """In stage order (static, lab, host, hardware, conformance), each stage in its declaration order.
    A ValueError when two checks share an id: an id names one check everywhere."""
    from k3lab.preflight import checks, hostchecks, labchecks

    found = [*checks.CHECKS, *labchecks.LIVE_CHECKS, *hostchecks.HOST_CHECKS, *suite_checks()]
    dup = duplicates(found)
    if dup:
        raise ValueError(f"check ids declared more than once: {', '.join(dup)}")
    return sorted(found, key=lambda c: STAGES.index(c.stage))


def by_id() -> dict[str, CheckInfo]:
    return {c.id: c for c in every_check()}


def stage_of(key: str, known: dict[str, CheckInfo] | None = None) -> str | None:
    """The stage of the check a key names (``id`` or ``id[param]``); None when no check has that id
    (a readiness gate ``gate:<stage>``, a diagnosis, a lab-row promise)."""
    check = (known if known is not None else by_id()).get(base_id(key))
    return check.stage if check else None
