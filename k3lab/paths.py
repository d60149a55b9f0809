"""Where the kit's shipped data lives: inside the package, in a wheel and in a checkout alike.

In a checkout, ``k3lab/fixtures``, ``k3lab/golden``, ``k3lab/conformance`` and ``k3lab/launchers`` are
symlinks to the design card's top-level folders; the wheel holds copies. Paths are not resolved, so
pytest collects the suite under its package name (``k3lab.conformance.*``) either way.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).parent
FIXTURES = PACKAGE / "fixtures"
GOLDEN = PACKAGE / "golden"
CONFORMANCE = PACKAGE / "conformance"
POLICIES = PACKAGE / "model" / "policies"
