"""A run's reports from its artefacts, with the gate's verdict: ``k3lab report RUN`` and every cycle.

The verdict a run's summary.md and report.html show is the gate's (PASS, FAIL or INCOMPLETE under the
gate policy, k3lab.reports.gate), the same word ``k3lab compare`` and ``k3lab release`` show for the
same run. ``gate.json`` keeps that verdict with its items and reasons beside the reports.
"""
from __future__ import annotations

import json
from pathlib import Path

from k3lab import formats, outputs
from k3lab.errors import InputError
from k3lab.model import policy as policies
from k3lab.reports import gate, report
from k3lab.reports.rows import VerdictDoc


def rebuild(run_dir: str | Path, policy_path: str | None = None) -> dict[str, Path]:
    """summary.md, report.html and gate.json of RUN_DIR, judged under the policy (default: the kit's)."""
    return _judge(run_dir, policy_path)[0]


def _judge(run_dir: str | Path, policy_path: str | None) -> tuple[dict[str, Path], VerdictDoc]:
    """The reports written and the verdict they show (the caller needs not read gate.json back)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a run directory (runs/<run>/, see k3lab status)")
    run = report.load(run_dir)
    if not run.scenario:
        raise InputError(f"{run_dir}: no plan.json or run-state.json names the scenario; not a run directory")
    verdict = gate.evaluate_run(policies.load(policy_path).for_scenario(run.scenario), run_dir)
    doc = verdict.to_json()
    outputs.write_file(run_dir / "gate.json", json.dumps(doc, indent=2) + "\n", flag="report")
    return {**report.write_reports(run_dir, doc, run), "gate": run_dir / "gate.json"}, doc


def cmd_report(args) -> int:
    """``k3lab report RUN [--policy FILE]``: the reports' paths, then the gate's verdict line; exits by the
    verdict as ``k3lab release`` does (PASS 0, FAIL 1, INCOMPLETE 3), so a script can gate on it."""
    written, verdict = _judge(args.run, args.policy)
    reasons = verdict.get("reasons") or []
    doc = {"run": str(args.run), "reports": {kind: str(path) for kind, path in written.items()},
           "verdict": verdict["verdict"], "label": verdict.get("label") or verdict["verdict"],
           "waived_must": verdict.get("waived_must") or [], "scenario": verdict["scenario"], "reasons": reasons}

    def text(d: dict) -> None:
        formats.say("\n".join(f"{kind}: {path}" for kind, path in d["reports"].items()))
        first = f": {len(d['reasons'])} reason(s); first: {d['reasons'][0]}" if d["reasons"] else ""
        formats.say(f"{d['label']} {d['scenario']}{first}")  # a reason quotes the run's messages
        for w in d["waived_must"]:
            formats.say(f"  waived MUST check {w}")

    formats.emit(args, doc, text)
    return gate.EXIT[verdict["verdict"]]
