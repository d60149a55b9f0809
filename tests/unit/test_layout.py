"""Folder names state the layers (issue #31 item 8): no two code folders share a name, and tests/unit
mirrors the package (tests/unit/launch/ tests k3lab/launch/, and so on).

Data trees are exempt: golden/ has one folder per scenario node (p0, d0, ... repeat across scenarios),
the simulator's rootfs copies a real node's paths, and the corpora keep their sources' own names.
"""
from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]
DATA = ("golden/", "launchers/sim/rootfs/", "fixtures/", "tests/corpus/", "tests/fixtures/")


def _folders() -> set[PurePosixPath]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out: set[PurePosixPath] = set()
    for f in files:
        if f.startswith(DATA):
            continue
        out.update(p for p in PurePosixPath(f).parents if str(p) != ".")
    return out


def test_no_two_code_folders_share_a_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for folder in _folders():
        if folder.parent == PurePosixPath("tests/unit"):  # the mirror of the package shares its names by design
            continue
        by_name[folder.name].append(str(folder))
    shared = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"folders that share a name (rename one so the name states its layer): {shared}"


def test_unit_tests_mirror_the_package():
    package = {p.name for p in (ROOT / "k3lab").iterdir() if (p / "__init__.py").is_file()}
    unit = {p.name for p in (ROOT / "tests" / "unit").iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert unit <= package, f"tests/unit folders with no k3lab subpackage of that name: {sorted(unit - package)}"
    assert package <= unit, f"k3lab subpackages with no tests/unit folder: {sorted(package - unit)}"
    for folder in unit:
        assert (ROOT / "tests" / "unit" / folder / "__init__.py").is_file(), f"tests/unit/{folder}: no __init__.py"
