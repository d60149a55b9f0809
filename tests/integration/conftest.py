"""Integration tests drive the real kit against the local Docker engine (the sim target)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


def require(ok: bool, what: str) -> None:
    """Skip a test whose host lacks ``what`` locally; in CI (which installs everything) fail instead."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what}: CI must provide it (.ci/run installs it)", pytrace=False)
    pytest.skip(f"{what} (skipped locally; CI fails instead)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """One Docker engine: integration tests run one at a time, on one xdist worker (before xdist groups)."""
    ours = [item for item in items if "integration" in str(item.fspath)]
    for item in ours:
        item.add_marker(pytest.mark.xdist_group(name="docker"))
    if ours and not docker_ok():
        # CI starts its own engine: a missing one there is a broken run, not a reason to skip
        if os.environ.get("CI"):
            raise pytest.UsageError("integration tests: no running Docker engine (CI must start one, see .ci/run)")
        skip = pytest.mark.skip(reason="needs a running Docker engine (skipped locally; CI fails instead)")
        for item in ours:
            item.add_marker(skip)


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


def leftovers() -> tuple[str, str]:
    c = subprocess.run(["docker", "ps", "-aq", "--filter", "label=k3lab.run"], capture_output=True, text=True).stdout
    n = subprocess.run(["docker", "network", "ls", "-q", "--filter", "label=k3lab.run"], capture_output=True,
                       text=True).stdout
    return c.strip(), n.strip()


@pytest.fixture
def clean_engine():
    """Each test starts and must end with no k3lab container or network."""
    subprocess.run(["k3lab", "down", "--all"], capture_output=True, timeout=120, env=os.environ)
    yield
    left = leftovers()
    subprocess.run(["k3lab", "down", "--all"], capture_output=True, timeout=120, env=os.environ)
    assert left == ("", ""), f"left behind: containers {left[0]!r} networks {left[1]!r}"
