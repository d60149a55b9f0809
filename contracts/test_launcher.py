"""Launcher contract: every rendered ``launch_online_dp.py`` command line is accepted by the real
launcher's argument parser (the scenario's vllm-ascend release, from the registry's sdist).

The real script parses its arguments at import and, when they are accepted, stops with
"Template file ./run_dp_template.sh does not exist." (exit 1) in a directory without the
template; argparse rejects with exit 2 and "usage:". Nothing is started.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from k3lab.launch.simimage import vllm_ascend
from k3lab.model import catalog, siminventory
from k3lab.render import artefacts as render

ACCEPTED = "Template file ./run_dp_template.sh does not exist."


def _launchers():
    out = []
    for sid in catalog.SCENARIOS:
        plan = render.build(sid, siminventory.default(sid)).plan
        for proc in plan.processes():
            if proc.kind == "launcher":
                out.append(pytest.param(plan, proc, id=f"{sid}:{proc.node}"))
    return out


def accepts(version: str, argv: list[str], cwd) -> subprocess.CompletedProcess:
    """Run the real launcher on ``argv`` (after ``python launch_online_dp.py``) in an empty directory."""
    script = vllm_ascend.path(version, vllm_ascend.LAUNCHER)
    return subprocess.run([sys.executable, str(script), *argv], cwd=cwd, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("plan, proc", _launchers())
def test_rendered_launcher_command_is_accepted(plan, proc, tmp_path):
    assert proc.argv[:2] == ["python", "launch_online_dp.py"], proc.argv
    version = vllm_ascend.version_for(plan.seed)
    done = accepts(version, proc.argv[2:], tmp_path)
    assert (done.returncode, done.stdout.strip()) == (1, ACCEPTED), (
        f"vllm-ascend {version} launch_online_dp.py rejects {' '.join(proc.argv[2:])}:\n{done.stderr}")


def test_every_launcher_scenario_is_covered():
    covered = {p.values[0].scenario for p in _launchers()}
    assert covered == {"a3_pd", "a3_pd_1m", "a3_pd_pooled", "a5_pd", "a5_pd_1m", "a5_pd_pooled", "k3_a3_pd"}


def test_drift_guide_pp_size_is_rejected(tmp_path):
    """The K3 guide's own --pp-size 1 (dropped by the kit, deviation k3-pp-size) fails this contract."""
    plan = render.build("k3_a3_pd", siminventory.default("k3_a3_pd")).plan
    proc = next(p for p in plan.processes() if p.kind == "launcher")
    done = accepts(vllm_ascend.K3, [*proc.argv[2:], "--pp-size", "1"], tmp_path)
    assert done.returncode == 2 and "unrecognized arguments: --pp-size 1" in done.stderr
