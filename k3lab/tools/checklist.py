"""``k3lab checks``: every check of the kit, its stage, id, area, MUST statement and remedy, with the
fault rows that prove it can fail (k3lab/tools/faults.py); no Docker.

Every check can fail: a check no fault row fails is listed as such, a gap to close. ``--format json``
is the catalogue kept as ``golden/checks.json`` (``k3lab checks --format json > golden/checks.json``
after adding, removing or renaming a check; tests/unit/test_checks_registry.py compares them), with
the not-applicable reason ids a gate policy may list.
"""
from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from k3lab import formats
from k3lab.model import checks


def catalogue() -> dict[str, Any]:
    """The whole catalogue as one JSON document (the golden file's content)."""
    from k3lab.preflight import registry
    from k3lab.tools import faults

    every = registry.every_check()
    proofs: dict[str, list[str]] = {c.id: [] for c in every}
    for f in faults.CATALOG.values():
        for cid in sorted({checks.base_id(e) for e in f.expect} & proofs.keys()):
            proofs[cid].append(f.id)
    return {"checks": [{**c.row(), "faults": proofs[c.id]} for c in every],
            "na_reasons": [{"id": r.id, "means": r.means, "not_applicable": r.applies}
                           for r in checks.NA_REASONS.values()]}


def cmd_checks(args: argparse.Namespace) -> int:
    formats.emit(args, catalogue(), _print)
    return 0


def _print(doc: dict[str, Any]) -> None:
    rows = doc["checks"]
    for c in rows:
        print(f"{c['stage']:11} {c['id']:58} {c['area']:14} {c['severity']}")
        print(f"{'':12}MUST: {c['must']}")
        print(f"{'':12}remedy: {c['remedy']}")
        print(f"{'':12}proven by: {', '.join(c['faults']) if c['faults'] else '(no fault row)'}")
    stages = Counter(c["stage"] for c in rows)
    unproven = [c["id"] for c in rows if not c["faults"]]
    print(f"\n{len(rows)} checks ({', '.join(f'{n} {s}' for s, n in stages.items())}); "
          f"{len(rows) - len(unproven)} proven by a fault row, {len(unproven)} by none")
    print("\nnot-applicable reason ids (a gate policy's not_applicable: {check: GLOB, id: ID}):")
    for r in doc["na_reasons"]:
        note = "" if r["not_applicable"] else "  [means not checked: the default policy never lists it]"
        print(f"  {r['id']:20} {r['means']}{note}")
