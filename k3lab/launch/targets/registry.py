"""The registry of targets: ``--target NAME`` to the class that brings a run up there.

Its own module so that a target module can register itself without importing the package that loads it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from k3lab.errors import UsageError

if TYPE_CHECKING:
    from k3lab.launch.targets.base import Target

REGISTRY: dict[str, type[Target]] = {}


def register(cls: type[Target]) -> type[Target]:
    """Class decorator: ``cls.name`` becomes a target of ``--target``."""
    REGISTRY[cls.name] = cls
    return cls


def lookup(name: str) -> type[Target]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown target {name!r}; known: {', '.join(sorted(REGISTRY))}") from None
