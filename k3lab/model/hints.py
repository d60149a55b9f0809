"""The kit's one did-you-mean (CLI words, scenario ids, options, inventory and policy keys and values).

A leaf module: everything that names a misspelt input imports it, and it imports nothing of the kit.
"""
from __future__ import annotations


def closest(word: str, choices, cutoff: float = 0.6) -> str | None:
    """The known choice closest to ``word``, if any is close enough."""
    import difflib  # only on the error path: keeps start-up small

    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=cutoff)
    return found[0] if found else None


def hint(word: str, choices, cutoff: float = 0.6) -> str:
    """``"; did you mean 'x'?"`` for the closest choice, or nothing."""
    found = closest(word, choices, cutoff)
    return f"; did you mean {found!r}?" if found else ""
