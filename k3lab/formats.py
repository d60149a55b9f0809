"""The one output convention of the listing and status commands: ``--format text|json``.

JSON goes to stdout, one document per command, with stable keys; its shape is the JSON Schema
``k3lab/schemas/<command>.json`` shipped with the kit (tests/unit/test_formats.py validates every
command's output against it). Text is for people; logs and progress go to stderr in both.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from k3lab.errors import printable

FORMATS = ("text", "json")
SCHEMAS = Path(__file__).resolve().parent / "schemas"


def add(p: argparse.ArgumentParser, *, json_alias: bool = False, choices: tuple[str, ...] = FORMATS) -> None:
    """``--format`` on a command's parser; ``json_alias`` keeps an older ``--json`` flag as ``--format json``
    (deprecated: accepted, not advertised beyond its help line)."""
    p.add_argument("--format", choices=choices, default=choices[0],
                   help=f"output on stdout: {' | '.join(choices)} (default {choices[0]}; the JSON's shape is "
                        f"k3lab/schemas/{p.prog.split()[-1]}*.json)")
    if json_alias:
        p.add_argument("--json", dest="format", action="store_const", const="json", help="deprecated spelling of --format json")


def say(text: str = "", *, file: TextIO | None = None, end: str = "\n", flush: bool = False) -> None:
    """Print a line (or lines) of text for people: every character from outside the kit shown, never run
    (escape sequences, controls, bidi overrides, lone surrogates; :func:`k3lab.errors.printable`)."""
    print(printable(text), file=file or sys.stdout, end=end, flush=flush)


def emit(args: argparse.Namespace, doc: Any, text: Callable[[Any], None]) -> None:
    """``doc`` as JSON on stdout with --format json, else ``text(doc)`` prints it for people."""
    if getattr(args, "format", "text") == "json":
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        text(doc)


def schema(command: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{command}.json").read_text())


# ----------------------------------------------------------------------------------- logs

VERBOSITY = 0  # -q: -1 (errors and results only), -v: 1 (more detail); set once by the CLI


def set_verbosity(level: int) -> None:
    global VERBOSITY
    VERBOSITY = level


def log(prefix: str, msg: str, level: int = 0) -> None:
    """A progress line on stderr (stdout carries only the command's result), unless -q hides it."""
    if level <= VERBOSITY:
        import time

        print(printable(f"[{prefix} {time.strftime('%H:%M:%S')}] {msg}"), file=sys.stderr, flush=True)


def ticker(prefix: str, every_s: float = 2.0) -> Callable[[str], None]:
    """``tick(msg)`` logs ``msg`` as a progress line when ``every_s`` seconds passed since the last one: a long
    loop calls it at each item and stderr shows it is alive at least every ``every_s`` without a line per item."""
    import time

    last = [time.monotonic()]

    def tick(msg: str) -> None:
        if time.monotonic() - last[0] >= every_s:
            last[0] = time.monotonic()
            log(prefix, msg)

    return tick
