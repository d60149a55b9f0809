"""``k3lab completion bash|zsh|fish``: shell completion through argcomplete, from the CLI's own parser.

The script each shell gets is argcomplete's (``argcomplete.shellcode``): on TAB it runs ``k3lab`` with
``_ARGCOMPLETE`` set, and :func:`complete` answers from the parser itself, so commands, options and
option choices cannot drift from the commands. Beyond the parser's choices: scenario ids (a SCENARIO
argument, ``--scenario``/``-s``), fault ids (``--id``, ``cycle --inject``), run ids (``down``, ``status``)
and file names for the rest. Install: ``eval "$(k3lab completion bash)"`` in ~/.bashrc, the same with
``zsh`` in ~/.zshrc (after ``compinit``), ``k3lab completion fish | source`` in fish's config.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def script(shell: str) -> str:
    import argcomplete

    return argcomplete.shellcode(["k3lab"], shell=shell)


def _run_ids(**_: Any) -> list[str]:
    from k3lab import settings

    runs = settings.load().runs
    return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def _completers(command: str, action: argparse.Action) -> Callable[..., list[str]] | None:
    """What completes ``action``'s values beyond its choices, or None (argcomplete's default: file names)."""
    from k3lab.model import catalog
    from k3lab.tools import faults

    if action.dest in ("scenario", "scenarios"):
        return lambda **_: list(catalog.SCENARIOS)
    if action.dest == "id":
        return lambda **_: list(faults.CATALOG)
    if action.dest == "inject" and command == "cycle":
        return lambda **_: [f.id for f in faults.CATALOG.values() if f.kind == "live"]
    if action.dest == "run" and command in ("down", "status"):
        return _run_ids
    return None


def complete(ap: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (``_ARGCOMPLETE`` in the environment) and exit."""
    import argcomplete

    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            found = None if action.choices else _completers(name, action)
            if found is not None:
                completing: Any = action  # argcomplete reads the attribute it documents: action.completer
                completing.completer = found
    argcomplete.autocomplete(ap)
