"""Values of command-line arguments, checked: KEY=VALUE options, scenario ids, inventories.

Shared by the CLI and the command modules below it, which must not import the CLI (one-way layers).
Kept light: the CLI imports it at start-up.
"""
from __future__ import annotations

from k3lab.errors import UsageError


def closest(word: str, choices, cutoff: float = 0.6) -> str | None:
    """The kit's one did-you-mean: the known choice closest to ``word``, if any is close enough."""
    import difflib  # only on the error path: keeps start-up small

    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=cutoff)
    return found[0] if found else None


def hint(word: str, choices, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the closest choice, or nothing."""
    found = closest(word, choices, cutoff)
    return f"; did you mean {found!r}?" if found else ""


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
    tgt = target or ("lab" if inventory is not None else "sim")
    if tgt == "lab" and inventory is None:
        raise UsageError(f"--target lab needs the lab's inventory (-i lab.yaml; k3lab init {scenario} "
                         f"--out lab.yaml writes one)")
    return tgt


def load_inventory(scenario: str, path: str | None):
    from k3lab.model import inventory, siminventory

    if path is not None:
        return inventory.load(path), str(path)
    return siminventory.default(scenario), siminventory.name()

