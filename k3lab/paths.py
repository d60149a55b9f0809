"""Where the kit's shipped data lives, in a checkout and in a wheel alike.

The kit's code is the package ``k3lab`` and nothing else. What is not importable code stays in the
design card's top-level folders: ``conformance/`` (the live suite pytest collects), ``launchers/sim/``
(what runs inside the simulator's image), ``fixtures/`` and ``golden/`` (data). In a checkout they sit
beside the package; the wheel ships them as package data under ``k3lab/data/`` with the same names
(``pyproject.toml``), so one rule finds them in both.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# the wheel's copy first; a checkout has no k3lab/data and finds the folders beside the package
DATA = PACKAGE / "data" if (PACKAGE / "data").is_dir() else PACKAGE.parent
FIXTURES = DATA / "fixtures"
GOLDEN = DATA / "golden"
CONFORMANCE = DATA / "conformance"  # the suite: conftest.py, test_*.py, the opt-in modules
SIM = DATA / "launchers" / "sim"  # the simulator image's contents: the k3sim package and rootfs/
POLICIES = PACKAGE / "model" / "policies"

STDIN = "-"  # an input path that means standard input (``-i -``)
STDIN_NAME = "<stdin>"  # what messages, plan.json and RUNBOOK.md call it


def source_name(path: object) -> str:
    """How messages and the plan name an input: its path, or ``<stdin>``."""
    return STDIN_NAME if str(path) == STDIN else str(path)
