"""The wheel ships every module of the kit and the top-level data folders (pyproject lists them by hand)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_kit_package_is_in_the_wheel():
    listed = set(_setuptools()["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "k3lab").rglob("__init__.py")}
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"


def test_every_data_file_beside_the_modules_is_shipped():
    """Non-Python files inside the package (schemas, catalogues, policies, templates) need package-data."""
    data = _setuptools()["package-data"]
    missing = []
    for f in (ROOT / "k3lab").rglob("*"):
        if f.is_dir() or f.suffix in (".py", ".pyc") or "__pycache__" in f.parts:
            continue
        rel = f.relative_to(ROOT)
        owners = [".".join(rel.parts[:i]) for i in range(len(rel.parts) - 1, 0, -1)]
        if not any(Path(*rel.parts[len(o.split(".")):]).match(g) for o in owners for g in data.get(o, [])):
            missing.append(str(rel))
    assert missing == [], f"not in [tool.setuptools.package-data]: {missing}"


def test_the_top_level_folders_are_shipped_as_data():
    mapped = _setuptools()["package-dir"]
    assert {v for k, v in mapped.items() if k.startswith("k3lab.data.")} == {"conformance", "fixtures", "golden",
                                                                             "launchers"}
