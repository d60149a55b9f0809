"""``k3lab triage DIR``, and the diagnosis as the terminal shows it when a run fails.

DIR is a run directory (``runs/<id>``) or a folder of logs collected by hand, one folder per node.
Exit codes: 0 no error in the logs, 1 a diagnosis (a known cause, or the first error line when no cause
matched), 2 bad input (missing, not a directory, unreadable, no readable log in it). ``.gz`` logs are read;
files not read (not a log, binary, unreadable) are listed with why.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from k3lab import errors, formats
from k3lab.diagnosis.codes import describe
from k3lab.diagnosis.engine import Diagnosis, Finding, diagnose

SHOW_FILES = 6  # files named in "where it looked" before "and N more"


def _where_looked(d: Diagnosis) -> str:
    names = [f for _, f, _ in d.looked]
    shown = ", ".join(names[:SHOW_FILES]) + (f" and {len(names) - SHOW_FILES} more" if len(names) > SHOW_FILES else "")
    nodes = len({n for n, _, _ in d.looked})
    return f"{len(names)} file(s) on {nodes} node folder(s) of {d.root}" + (f": {shown}" if shown else "")


def _finding_lines(f: Finding, rank: int) -> list[str]:
    c = f.cause
    where = f" on {f.node}" if f.node and f.node != "-" else ""
    head = "cause" if rank == 1 else f"also ({rank})"
    lines = [f"{head}: {c.id}{where}: {c.title} [{c.component}]"]
    for e in f.evidence[:2 if rank == 1 else 1]:
        node = "" if e.node in e.file.split("/") else f"{e.node} "
        lines.append(f"  evidence: {node}{e.where()}: {e.text}")
    others = [n for n in f.nodes[1:] if n != "-"]
    if others:
        lines.append(f"  also on: {', '.join(others)} ({f.count} line(s) in all)")
    if rank == 1:
        lines.append(f"  remedy: {c.remedy}")
        lines.append(f"  source: {next((s for s in c.sources if '://' in s), c.sources[0])}")
    return lines


def _likely_lines(d: Diagnosis) -> list[str]:
    """The cause read from the meaning of a first error, not from a signature: said as likely, never as the cause."""
    if not d.likely:
        return []
    f = d.likely[0]
    where = f" on {f.node}" if f.node and f.node != "-" else ""
    return [f"likely {f.cause.id}{where} (by the meaning of the first error: {f.evidence[0].text}): "
            f"{f.cause.title} [{f.cause.component}]", f"  remedy: {f.cause.remedy}"]


def text(d: Diagnosis, limit: int = 3) -> list[str]:
    """The diagnosis as terminal lines: the top cause with node, evidence, remedy and source; then the next."""
    gate = d.gate or {}
    lines = []
    if gate:
        lines.append(f"diagnosis of {d.root.name}: gate {gate.get('stage', '?')} failed on {gate.get('node') or '?'}")
    if not d.findings:
        lines.append(f"diagnosis: no known cause matched in {_where_looked(d)}; read the engine and proxy logs there "
                     "and the guide's FAQ")
    for i, e in enumerate(d.first_errors):
        node = "" if e.node in e.file.split("/") else f"{e.node} "
        lines.append(f"  {'first error, cause unknown' if i == 0 else 'then'}: {node}{e.where()}: {e.text}")
        if meaning := describe(e.text):
            lines.append(f"    code {meaning}")
    lines += _likely_lines(d)
    for i, f in enumerate(d.findings[:limit], 1):
        lines += _finding_lines(f, i)
    lines += [f"note: {n}" for n in d.notes[:5]]
    if d.skipped:
        more = f" and {len(d.skipped) - SHOW_FILES} more" if len(d.skipped) > SHOW_FILES else ""
        lines.append(f"skipped: {', '.join(d.skipped[:SHOW_FILES])}{more}")
    return lines


def _no_log(d: Diagnosis) -> str | None:
    """Why the directory cannot be diagnosed at all: no log was read and nothing else points anywhere."""
    if d.looked or d.findings or d.gate:
        return None
    why = f"; skipped {len(d.skipped)} file(s): {', '.join(d.skipped[:SHOW_FILES])}" if d.skipped else " (no file in it)"
    return f"{d.root}: no readable log{why}; give a run directory or a folder of logs, one folder per node"


def _print(d: Diagnosis, every: bool) -> None:
    formats.say("\n".join(text(d, limit=len(d.findings) if every else 3)))  # log lines and file names: shown, never run
    if d.findings:
        formats.say(f"looked at {_where_looked(d)}")


def cmd_triage(args: argparse.Namespace) -> int:
    d = diagnose(Path(args.dir))
    if (why := _no_log(d)) is not None:
        raise errors.InputError(why)
    formats.emit(args, d.as_dict(), lambda _: _print(d, args.all))
    return errors.CHECKS_FAILED if d.failed else errors.OK
