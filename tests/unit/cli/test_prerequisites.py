"""Prerequisites checked up front (#33 item 2): a command that needs Docker, sshd, ``ip netns``, root or
the [sim] extra says which is missing and how to install it, in one line, exit 3, before it starts anything.

Every missing piece is simulated: ``DOCKER_HOST=unix:///nonexistent`` is a real endpoint that fails (no
engine needed), a module is hidden through ``sys.modules``, a binary through its path or PATH. The
handlers that would start something are replaced by ones that fail the test, so a check that let a
command through never reaches this machine's engine or namespaces.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from k3lab import errors
from k3lab.cli import commands
from k3lab.cli import main as cli
from k3lab.launch import labemu, prereq
from k3lab.tools import bench

NO_ENGINE = "unix:///nonexistent"


def _must_not_start(*_a, **_k):
    raise AssertionError("a command with a missing prerequisite started")


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("K3LAB_EMU_DIR", str(tmp_path / "emu"))
    for name in ("up", "attach", "down_all", "teardown"):
        monkeypatch.setattr(commands, name, _must_not_start)
    monkeypatch.setattr(bench, "measure", _must_not_start)
    for name in ("up", "down", "status", "repair", "break_host"):
        monkeypatch.setattr(labemu, name, _must_not_start)


def run(capsys, *argv: str) -> tuple[int, str, float]:
    t = time.monotonic()
    code = cli.main(list(argv))
    elapsed = time.monotonic() - t
    return code, capsys.readouterr().err, elapsed


def assert_missing(code: int, err: str, elapsed: float, *needles: str) -> None:
    assert code == errors.ENVIRONMENT, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    assert elapsed < 2.0, f"{elapsed:.2f}s"


# down --all has no prerequisite up front: it asks each target (tests/unit/launch/test_k8s_target.py)
@pytest.mark.parametrize("argv", [["up", "a3_pd_1m"], ["cycle", "a3_pd_1m"], ["status"],
                                  ["down", "20260101-000000-abcd"], ["bench"]])
def test_no_engine_is_exit_3_with_the_install_command(capsys, argv):
    code, err, elapsed = run(capsys, *argv)
    assert_missing(code, err, elapsed, f"k3lab {argv[0]}", NO_ENGINE, "apt-get install docker.io")


def test_up_without_the_sim_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # an import of it fails; find_spec says absent
    code, err, elapsed = run(capsys, "up", "a3_pd_1m")
    # both missing pieces in the one line: the operator installs them at once
    assert_missing(code, err, elapsed, "[sim] extra", "fastapi", "pip install 'k3lab[sim]'", "apt-get install docker.io")


def test_an_engine_that_never_answers_fails_within_the_deadline(capsys, monkeypatch, tmp_path):
    """A socket that accepts and never answers (a hung dockerd): the ping's deadline, not the SDK's 120 s."""
    path = tmp_path / "hung.sock"
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(str(path))
        srv.listen(8)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        monkeypatch.setattr(prereq, "ENGINE_DEADLINE_S", 0.5)
        code, err, elapsed = run(capsys, "up", "a3_pd_1m")
    assert_missing(code, err, elapsed, "no answer within 0.5 s", "apt-get install docker.io")


def test_bad_input_comes_before_a_missing_engine(capsys):
    code, err, _ = run(capsys, "up", "a3_pd_1mm")
    assert code == errors.USAGE and "did you mean" in err
    code, err, _ = run(capsys, "down", "RUN", "--all")
    assert code == errors.USAGE and "not both" in err


def test_static_commands_need_no_engine(capsys, tmp_path):
    assert cli.main(["preflight", "a3_pd_1m", "-q"]) == errors.OK
    assert cli.main(["render", "a3_pd_1m", "--out", str(tmp_path / "r")]) == errors.OK


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def test_labemu_up_without_sshd(capsys, monkeypatch, tmp_path, as_root):
    monkeypatch.setattr(prereq, "SSHD", tmp_path / "sshd")
    code, err, elapsed = run(capsys, "labemu", "up")
    assert_missing(code, err, elapsed, "k3lab labemu up", "sshd", "apt-get install openssh-server")


def test_labemu_without_ip(capsys, monkeypatch, as_root):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "ip" else which(name, *a, **k))
    code, err, elapsed = run(capsys, "labemu", "status")
    assert_missing(code, err, elapsed, "k3lab labemu status", "apt-get install iproute2")


def test_labemu_with_an_ip_without_netns(capsys, monkeypatch, tmp_path, as_root):
    """busybox's ip: no netns subcommand."""
    fake = tmp_path / "bin" / "ip"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "ip: unknown command netns" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    code, err, elapsed = run(capsys, "labemu", "down")
    assert_missing(code, err, elapsed, "network namespaces", "unknown command netns", "apt-get install iproute2")


def test_labemu_needs_root(capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    code, err, elapsed = run(capsys, "labemu", "status")
    assert_missing(code, err, elapsed, "root", "sudo")


def test_labemu_up_without_dockerd_or_the_sim_extra(capsys, monkeypatch, as_root):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "dockerd" else which(name, *a, **k))
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    code, err, elapsed = run(capsys, "labemu", "up")
    assert_missing(code, err, elapsed, "dockerd", "apt-get install docker.io", "uvicorn", "pip install 'k3lab[sim]'")


def test_release_without_an_engine(capsys, tmp_path):
    code, err, elapsed = run(capsys, "release", "-s", "a3_pd_1m", "--out", str(tmp_path / "rel"))
    assert_missing(code, err, elapsed, "k3lab release", "apt-get install docker.io")
    assert not (tmp_path / "rel").exists()


def test_the_real_cli_exits_3_in_one_line(tmp_path):
    """End to end in a fresh interpreter: the imports the check runs before are part of the time."""
    env = {**os.environ, "DOCKER_HOST": NO_ENGINE, "K3LAB_RUNS": str(tmp_path / "runs")}
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "up", "a3_pd_1m"], capture_output=True, text=True,
                         env=env, timeout=60)
    elapsed = time.monotonic() - t
    assert res.returncode == errors.ENVIRONMENT and "apt-get install docker.io" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "runs").exists()
    assert elapsed < 10, f"{elapsed:.2f}s"  # under 1 s on an idle machine; the bound leaves room for a loaded CI


@pytest.mark.parametrize("argv, words", [
    (["up", "a3_pd_1m", "--stages-only"], "--stages-only proves a lab's hosts and hardware"),
    (["up", "a3_pd_1m", "--stages-only", "--keep"], "--keep has nothing to keep"),
])
def test_a_usage_error_comes_before_a_missing_engine(capsys, argv, words):
    """Bad input is exit 2 whatever the machine lacks: fixing the engine first would only meet the usage error."""
    code, err, _ = run(capsys, *argv)
    assert code == errors.USAGE and words in err, err
