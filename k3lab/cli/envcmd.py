"""``k3lab env``: every setting the kit reads from the environment, its value and where it came from.

The rows are :func:`k3lab.settings.table` (the one list of settings); the API key's value is never
printed. It needs no Docker and reads nothing but the environment and the working directory.
"""
from __future__ import annotations

import argparse
from typing import TypedDict

from k3lab import formats, settings


class EnvDoc(TypedDict):
    """``k3lab env --format json``."""

    settings: list[settings.SettingRow]
    runs: str  # where runs go, resolved
    releases: str


def document() -> EnvDoc:
    s = settings.current()
    return EnvDoc(settings=settings.table(s), runs=str(s.runs.resolve()), releases=str(s.releases.resolve()))


def _print(doc: EnvDoc) -> None:
    rows = doc["settings"]
    width = max(len(r["variable"]) for r in rows)
    for group in dict.fromkeys(r["group"] for r in rows):
        print(f"{settings.GROUPS[group]}:")
        for r in (r for r in rows if r["group"] == group):
            value = "(unset)" if r["value"] is None else r["value"] + (" s" if r["unit"] == "s" else "")
            source = "environment" if r["source"] == settings.ENVIRONMENT else f"default {r['default']}"
            print(f"  {r['variable']:{width}}  {value}  [{source}]")
    print(f"runs go to {doc['runs']}; releases to {doc['releases']}")


def cmd_env(args: argparse.Namespace) -> int:
    formats.emit(args, document(), _print)
    return 0
