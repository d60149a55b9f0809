"""The live suite's modules (``conformance/``), loaded by path for the kit's own tests.

The suite is collected by pytest and imported by nothing, so it has no package name; tests that read its
checks load a module once under ``conformance.<stem>`` (the name the import-graph test gives it).
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from k3lab import paths


def load(stem: str) -> ModuleType:
    name = f"conformance.{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, paths.CONFORMANCE / f"{stem}.py")
        assert spec is not None and spec.loader is not None, stem
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
