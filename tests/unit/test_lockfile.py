"""The same verdict from the same inputs next month (#37 item 4): requirements/ci.lock pins every dependency
of the kit, its extras and CI's tools, each pin inside the range pyproject.toml allows; every dependency
whose private API the kit reaches into has an upper bound; nox installs everything through the lock."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCK = {canonicalize_name(name): version for name, version in
        re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (ROOT / "requirements" / "ci.lock").read_text(), re.M)}
EXTRAS = ("sim", "test", "docs", "k8s")
# dependency -> the module that reaches into its internals (what its upper bound protects)
PRIVATE = {"docker": "k3lab/launch/endpoints.py", "paramiko": "k3lab/launch/endpoints.py",
           "pytest-testinfra": "k3lab/launch/hoststage.py", "syrupy": "tests/golden_ext.py"}


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    tools = (ROOT / "requirements" / "tools.in").read_text().splitlines()
    reqs += [Requirement(line) for line in tools if line.strip() and not line.startswith("#")]
    return reqs


@pytest.mark.parametrize("req", _requirements(), ids=str)
def test_the_lock_pins_every_dependency_inside_its_range(req):
    name = canonicalize_name(req.name)
    assert name in LOCK, f"{req.name} is not pinned in requirements/ci.lock (nox -s lock)"
    assert req.specifier.contains(LOCK[name], prereleases=True), \
        f"requirements/ci.lock pins {req.name}=={LOCK[name]}, outside pyproject's {req.specifier}"


@pytest.mark.parametrize("name, module", sorted(PRIVATE.items()))
def test_a_dependency_used_through_private_api_has_an_upper_bound(name, module):
    assert (ROOT / module).is_file()
    req = next(r for r in _requirements() if canonicalize_name(r.name) == name)
    assert any(spec.operator in ("<", "<=", "~=", "==") for spec in req.specifier), \
        f"{name} {req.specifier}: {module} uses its private API, so a major release must be a deliberate upgrade"


def test_nox_installs_through_the_lock():
    nox = (ROOT / "noxfile.py").read_text()
    installs = re.findall(r"session\.install\((.*?)\)", nox, re.S)
    unlocked = [call for call in installs if "LOCK" not in call and '"uv"' not in call and "--upgrade" not in call]
    assert unlocked == [], "a nox session installs without requirements/ci.lock"
