"""Options for the kit's own tests (the conformance suite's come from its plugin, k3lab.conform.plugin)."""
from __future__ import annotations


def pytest_addoption(parser):
    group = parser.getgroup("k3lab")
    group.addoption("--sim", action="store_true", default=False, help="run tests that need Docker and the sim image")
