"""The one way a stage's findings become a go/no-go: judged against the inventory's acceptances, printed
(ERROR / WARNING / ACCEPTED lines on stderr), and nothing starts on an error (or, ``--strict``, a warning)."""
from __future__ import annotations

import sys

from k3lab.errors import ChecksFailed
from k3lab.preflight import checks as preflight


def say(outcome) -> None:
    for f in outcome.errors:
        print(f"ERROR {f.check} [{', '.join(f.nodes)}]: {f.message}", file=sys.stderr)
    for f in outcome.warnings:
        print(f"WARNING {f.check} [{', '.join(f.nodes)}]: {f.message}", file=sys.stderr)
    for f, a in outcome.accepted:
        print(f"ACCEPTED {f.check} [{', '.join(f.nodes)}]: accepted: {a.reason}", file=sys.stderr)


def refuse(findings, acceptances, strict: bool, what: str):
    """The judged outcome of ``findings``; ChecksFailed (exit 1) naming ``what`` when it fails."""
    outcome = preflight.judge(findings, acceptances)
    say(outcome)
    if outcome.failed(strict):
        raise ChecksFailed(f"{what} failed with {len(outcome.errors)} error(s)"
                           f"{f' and {len(outcome.warnings)} warning(s) under --strict' if strict else ''}; "
                           f"nothing was started")
    return outcome
