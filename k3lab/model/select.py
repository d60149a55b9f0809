"""Values of command-line arguments, checked: KEY=VALUE options, scenario ids, inventories.

Shared by the CLI and the command modules below it, which must not import the CLI (one-way layers).
Kept light: the CLI imports it at start-up.
"""
from __future__ import annotations

from k3lab import paths
from k3lab.errors import UsageError
from k3lab.model import targetkinds
from k3lab.model.hints import hint


def did_you_mean(word: str, choices, what: str) -> str:
    choices = list(choices)
    hint_ = hint(word, choices)
    known = f" (known: {', '.join(choices)})" if len(choices) <= 16 else ""
    return f"unknown {what} {word!r}{hint_}{known}"


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--option takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def scenario_id(value: str) -> str:
    from k3lab.model import catalog

    if value not in catalog.SCENARIOS:
        raise UsageError(did_you_mean(value, catalog.SCENARIOS, "scenario") + "; see k3lab list")
    return value


def target(scenario: str, target: str | None, inventory: str | None) -> str:
    """The target a command runs for: ``--target``, else lab with an inventory and sim without one.
    A lab needs its inventory: without one the sim's bridge addresses would pass for a lab's."""
    tgt = target or (targetkinds.WITH_INVENTORY if inventory is not None else targetkinds.DEFAULT)
    if targetkinds.kind(tgt).needs_inventory and inventory is None:
        raise UsageError(f"--target {tgt} needs the lab's inventory (-i lab.yaml; k3lab init {scenario} "
                         f"--out lab.yaml writes one)")
    return tgt


def load_inventory(scenario: str, path: str | None):
    from k3lab.model import inventory, siminventory

    if path is not None:  # '-': standard input, recorded as <stdin> (plan.json, RUNBOOK.md)
        return inventory.load(path), paths.source_name(path)
    return siminventory.default(scenario), siminventory.name()

