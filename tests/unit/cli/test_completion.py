"""`k3lab completion bash` completes commands, options, their values, scenario ids and fault ids."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from k3lab.cli import main as cli

CASES = {
    "k3lab re": {"render", "release", "report"},
    "k3lab cycle a3_pd": {"a3_pd", "a3_pd_1m", "a3_pd_pooled"},
    "k3lab faults --id S-ADDR": {"S-ADDR-PLACEHOLDER", "S-ADDR-LOOPBACK"},
    "k3lab preflight --for": {"--format"},
    "k3lab preflight --format ''": {"text", "json"},
    "k3lab release -s k3_a3_mixed_t": {"k3_a3_mixed_toolcall"},
}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion(tmp_path, capsys):
    assert cli.main(["completion", "bash"]) == 0
    (tmp_path / "k3lab.bash").write_text(capsys.readouterr().out)
    probe = [f"source {tmp_path / 'k3lab.bash'}"]
    for line in CASES:
        probe += [f"COMP_WORDS=({line}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=(); _k3lab",
                  'echo "${COMPREPLY[*]}"']
    res = subprocess.run(["bash", "-c", "\n".join(probe)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    for (line, want), got in zip(CASES.items(), res.stdout.splitlines()):
        assert set(got.split()) == want, line
