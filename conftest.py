"""Options and fixtures shared by conformance/ and tests/."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # the kit runs from a clean clone without installing too
    sys.path.insert(0, str(ROOT))


def pytest_addoption(parser):
    group = parser.getgroup("k3lab")
    group.addoption("--run-dir", default=None, help="run directory of a deployment that is up (conformance)")
    group.addoption("--sim", action="store_true", default=False, help="run tests that need Docker and the sim image")
