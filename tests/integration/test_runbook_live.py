"""The RUNBOOK by hand (issue #36 item 3): on the emulated lab, the commands RUNBOOK.md gives are run
verbatim, as an operator would paste them (step 1's blocks, step 2's start commands stage by stage with
their "Wait for" probes, step 3's check and teardown), and give a healthy deployment.

Only the operator's own set-up is the test's: an ssh client configured for the lab (an ``ssh`` on PATH
that adds ``-F`` with the emulated lab's key and known_hosts, as ``~/.ssh/config`` would on a lab).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3lab.launch import labemu
from k3lab.render import runbook
from tests.integration.conftest import require
from tests.integration.test_labemu import k3lab

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
SCENARIO = "k3_a3_mixed"  # four hosts, two stages
WAIT_S = 300  # per "Wait for" probe: the stand-in engines start in seconds


def _section(text: str, title: str) -> str:
    """The text of the ``## {title}...`` section, up to the next ``## `` heading."""
    m = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"RUNBOOK.md has no section '## {title}'"
    return m.group(1)


def _blocks(section: str) -> list[str]:
    return [b.strip() for b in re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S)]


def _waits(section: str) -> list[tuple[str, str | None]]:
    """Each "Wait for" probe of a stage: its command and the answer it must print (None: exit 0 is enough)."""
    out = []
    for cmd in re.findall(r"^  `([^`]+)`\s*$", section, re.M):
        want = re.search(r"#\s*(\d{3})\s*$", cmd)
        out.append((cmd, want.group(1) if want else None))
    return out


def _bash(cmd: str, cwd: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _wait(cmd: str, want: str | None, cwd: Path, env: dict) -> None:
    deadline, last = time.monotonic() + WAIT_S, None
    while time.monotonic() < deadline:
        last = _bash(cmd, cwd, env, timeout=30)
        if last.returncode == 0 and (want is None or last.stdout.strip() == want):
            return
        time.sleep(1)
    raise AssertionError(f"'Wait for' never passed in {WAIT_S}s: {cmd}\n{last and last.stdout + last.stderr}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require(os.geteuid() == 0 and bool(shutil.which("nsenter")) and os.path.exists("/usr/sbin/sshd")
            and bool(shutil.which("docker")), "needs root, nsenter, openssh-server and the docker CLI")
    root = tmp_path_factory.mktemp("runbook-live")
    res = k3lab("labemu", "up", "--scenario", SCENARIO, "--out", str(root / "lab.yaml"), timeout=600)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        yield root
    finally:
        done = k3lab("labemu", "down", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr


def _operator_env(root: Path) -> dict:
    """The operator's shell: an ssh client set up for the lab's hosts (their key and known_hosts)."""
    state = labemu._state_dir()
    (root / "bin").mkdir(exist_ok=True)
    (root / "ssh_config").write_text(
        "Host 10.213.0.*\n  User root\n"
        f"  IdentityFile {state / 'client' / 'id_ed25519'}\n  UserKnownHostsFile {state / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n")
    ssh = root / "bin" / "ssh"
    ssh.write_text(f"#!/bin/sh\nexec /usr/bin/ssh -F {root / 'ssh_config'} \"$@\"\n")
    ssh.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env["PATH"] = f"{root / 'bin'}:{env['PATH']}"
    return env


def test_runbook_commands_verbatim_give_a_healthy_deployment(lab, runs_dir):
    inv = lab / "lab.yaml"
    rendered = k3lab("render", SCENARIO, "-i", str(inv), "--out", str(lab / "r"), timeout=300)
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    here, env = lab / "r", _operator_env(lab)
    text = (here / "RUNBOOK.md").read_text()

    # step 1: every node's block as printed (docker run, then the scripts copied in)
    step1 = _blocks(_section(text, "Step 1"))
    assert len(step1) == 4, step1
    for block in step1:
        res = _bash(block, here, env, timeout=300)
        assert res.returncode == 0, f"{block}\n{res.stdout}{res.stderr}"

    # step 2: each stage's start commands, then its "Wait for" probes, in the RUNBOOK's order
    starts = runbook.start_commands(text)
    step2 = _section(text, "Step 2")
    stage_texts = re.split(r"^### Stage \d+", step2, flags=re.M)[1:]
    assert len(stage_texts) == max(s.stage for s in starts) == 2
    for number, stage_text in enumerate(stage_texts, start=1):
        for start in (s for s in starts if s.stage == number):
            res = _bash(start.command, here, env)
            assert res.returncode == 0, f"{start.command}\n{res.stdout}{res.stderr}"
        waits = _waits(stage_text)
        assert waits, f"stage {number}: no 'Wait for' probe"
        for cmd, want in waits:
            _wait(cmd, want, here, env)

    try:
        # step 3: the check it names (the suite against what the RUNBOOK started; it starts and stops nothing)
        check_cmd = re.search(r"`(k3lab check [^`]+)`", _section(text, "Step 3")).group(1)
        assert check_cmd == f"k3lab check {SCENARIO} -i {inv}"
        kit = Path(sys.executable).parent  # the k3lab of the interpreter running the tests
        check = _bash(check_cmd, here, {**env, "PATH": f"{kit}:{env['PATH']}", "K3LAB_RUNS": str(runs_dir)},
                      timeout=1800)
        assert check.returncode == 0, check.stdout[-4000:] + check.stderr[-2000:]
    finally:
        # step 3's teardown, verbatim; nothing of the deployment is left on any host
        for block in _blocks(_section(text, "Step 3")):
            _bash(block, here, env, timeout=300)
    for h in (labemu.Host(i) for i in range(4)):
        ps = subprocess.run(["docker", "-H", f"unix://{h.sock}", "ps", "-aq"], capture_output=True, text=True)
        assert not ps.stdout.strip(), f"{h.name}: containers left after the RUNBOOK's teardown"
