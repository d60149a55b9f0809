"""One table says which commands need no Docker engine (k3lab.cli.main.NO_DOCKER): bare k3lab's help, the
README and docs/index.md show the words it generates, and every command in it is one the CLI has."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from k3lab.cli import main as cli

ROOT = Path(__file__).resolve().parents[3]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_table_names_commands_and_their_arguments():
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for cmd, only in cli.NO_DOCKER.items():
        assert cmd in sub, cmd
        opts = {s for a in sub[cmd]._actions for s in a.option_strings}
        assert set(only or ()) <= opts, (cmd, only)


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_pages_say_what_the_table_says(page):
    text = _flat((ROOT / page).read_text())
    assert _flat(cli.no_docker_text()) in text, (
        f"{page}: the sentences on Docker are not k3lab.cli.main.no_docker_text(); write them as:\n"
        f"{cli.no_docker_text()}")


def test_bare_k3lab_prints_them(capsys):
    assert cli.main([]) == 0
    want = re.sub(r"`([^`]*)`", r"\1", cli.no_docker_text())
    assert _flat(want) in _flat(capsys.readouterr().out)


@pytest.mark.parametrize("argv, docker", [
    (["list"], False), (["faults", "--list"], False), (["faults", "--static-only", "--id", "X"], False),
    (["faults"], True), (["bench", "--no-live"], False), (["bench"], True), (["release", "--static-only"], False),
    (["release"], True), (["-v", "up", "a3_pd_1m"], True), (["labemu", "status"], True), (["triage", "runs/x"], False),
    ([], False), (["--version"], False),
])
def test_needs_docker(argv, docker):
    assert cli.needs_docker(argv) is docker
