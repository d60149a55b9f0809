"""`k3lab completion bash|zsh|fish`: argcomplete's scripts, which each shell accepts, and the answers the CLI
gives them: commands, options, their values, scenario, fault and run ids."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from k3lab.cli import main as cli

ROOT = Path(__file__).resolve().parents[3]
CASES = {
    "k3lab re": {"render", "release", "report"},
    "k3lab cycle a3_pd": {"a3_pd", "a3_pd_1m", "a3_pd_pooled"},
    "k3lab faults --id S-ADDR": {"S-ADDR-PLACEHOLDER", "S-ADDR-LOOPBACK"},
    "k3lab preflight --for": {"--format"},
    "k3lab preflight --format ": {"text", "json"},
    "k3lab release -s k3_a3_mixed_t": {"k3_a3_mixed_toolcall"},
    "k3lab completion ": {"bash", "zsh", "fish", "-h", "--help", "-q", "--quiet", "-v", "--verbose"},
    "k3lab down r": {"run-1", "run-2"},
}
# how each shell checks a script without running it
SYNTAX = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


def _script(shell: str, capsys) -> str:
    assert cli.main(["completion", shell]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("shell", sorted(SYNTAX))
def test_each_shell_accepts_its_script(shell, tmp_path, capsys):
    text = _script(shell, capsys)
    assert "k3lab" in text and "_ARGCOMPLETE" in text
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    path = tmp_path / f"k3lab.{shell}"
    path.write_text(text)
    res = subprocess.run([*SYNTAX[shell], str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_an_unknown_shell_is_a_usage_error(capsys):
    assert cli.main(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


@pytest.fixture
def on_path(tmp_path) -> dict[str, str]:
    """``k3lab`` on PATH running this checkout, and a runs directory with two runs."""
    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "k3lab"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m k3lab.cli.main "$@"\n')
    exe.chmod(0o755)
    for run in ("run-1", "run-2"):
        (tmp_path / "runs" / run).mkdir(parents=True)
    return {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "K3LAB_RUNS": str(tmp_path / "runs"), "HOME": str(tmp_path)}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_through_the_cli(tmp_path, capsys, on_path):
    (tmp_path / "k3lab.bash").write_text(_script("bash", capsys))
    probe = [f"source {tmp_path / 'k3lab.bash'}"]
    for line in CASES:
        words = line.split() + ([""] if line.endswith(" ") else [])
        probe += [f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
                  f"COMP_CWORD={len(words) - 1}; COMPREPLY=(); _python_argcomplete k3lab {words[-1]!r} {words[-2]!r}",
                  'echo "${COMPREPLY[*]}"']
    res = subprocess.run(["bash", "-c", "\n".join(probe)], capture_output=True, text=True, timeout=300, env=on_path)
    assert res.returncode == 0, res.stderr
    for (line, want), got in zip(CASES.items(), res.stdout.splitlines(), strict=True):
        assert set(got.split()) == want, line
