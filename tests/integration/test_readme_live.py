"""The README's and the docs' Docker commands: the ones one sim cycle answers run here as written, with the exit code
the README promises; the rest are listed with the test or session that exercises them. A Docker
command added to the README and listed nowhere fails test_every_docker_command_is_accounted_for."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.conftest import docker_ok, require
from tests.unit.test_readme import ALL, ROOT, _argv, needs_docker

# README command -> the exit code it promises (release: 1 FAIL, 3 INCOMPLETE)
RUN = {
    "k3lab cycle a3_pd_1m": 0,
    "k3lab cycle a3_pd_1m -- --long-requests": 0,
    "k3lab release --out releases/cand -s a3_pd_1m --inject a3_pd_1m=L-TOOL-FORCED": 1,
    "k3lab release --out releases/envt -s a3_pd_1m --inject a3_pd_1m=L-DEVICE-ALARM": 3,
}
# README command -> where it is exercised instead (a lab inventory needs root's emulated lab, or hours)
ELSEWHERE = {
    "k3lab cycle a3_pd_1m -i lab.yaml": "tests/integration/test_labemu.py (emulated lab, root); nox -s lab_a3_pd_1m",
    "K3LAB_API_KEY=... k3lab cycle a3_pd_1m -i lab.yaml": "tests/integration/test_labemu.py; the API-key fault rows",
    "k3lab cycle a3_pd_1m -i lab.yaml --pull missing": "tests/unit/launch/test_labpreflight.py (pull policy); labemu",
    "k3lab check a3_pd_1m -i lab.yaml [-- PYTEST ARGS]": "tests/integration/test_lifecycle.py (attach mode)",
    "k3lab labemu up --scenario a3_pd_1m --out lab.yaml": "tests/integration/test_labemu.py; nox -s lab_a3_pd_1m",
    "k3lab labemu up --scenario k3_a3_mixed --weights /mnt/weights --out lab.yaml":
        "tests/integration/test_labemu_weights.py (emulated lab, root: weights outside /root/.cache, cycle green)",
    "k3lab labemu status": "tests/integration/test_labemu.py",
    "k3lab labemu down": "tests/integration/test_labemu.py; nox -s lab_a3_pd_1m",
    "k3lab down --all": "tests/integration/conftest.py (clean_engine, around every integration test); .ci/run after "
                        "the fault matrix; its k8s part: tests/unit/launch/test_k8s_target.py",
    "k3lab labemu repair": "the fault matrix's H-* rows (k3lab/tools/faults.py, root): break one host, repair it",
    "k3lab bench --out build/bench.json": "nox -s bench (the live cycles, the emulated lab as root)",
    "k3lab faults": "nox -s faults (.ci/run: the whole matrix gates CI)",
    "k3lab faults --id H-NO-CONFIG": "nox -s faults (.ci/run), whose H-* rows run on the emulated lab as root",
    "k3lab release --out releases/good": "nox -s release (all twelve live cycles)",
    "k3lab release": "nox -s release",
    "k3lab release --target lab -i a3_pd_1m=lab.yaml -s a3_pd_1m --policy lab-policy.yaml": "a hardware lab",
    "k3lab cycle k3_a3_mixed -- --kvv --kvv-toolkit fixtures/kvvkit --kvv-python VENV/bin/python -k kvv":
        "tests/unit/render/test_kvv_module.py (offline); needs an inspect-ai venv",
}
DOCKER = [c for c in ALL if needs_docker(_argv(c))]


def test_every_docker_command_is_accounted_for():
    assert [c for c in DOCKER if c not in RUN and c not in ELSEWHERE] == []
    assert [c for c in list(RUN) + list(ELSEWHERE) if c not in ALL] == []  # no stale entries either


@pytest.mark.parametrize("code", list(RUN))
def test_readme_docker_command_runs_as_written(code, tmp_path):
    require(docker_ok(), "a Docker engine")
    env = {**os.environ, "K3LAB_RUNS": str(tmp_path / "runs"), "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", *_argv(code)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == RUN[code], (code, res.stderr[-3000:])
    assert "Traceback" not in res.stderr
