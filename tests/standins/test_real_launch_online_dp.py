"""The real launch_online_dp.py the simulator runs (fetched from the registry's vllm-ascend sdists):
the CLI, the seven positional arguments of run_dp_template.sh and the quirks the kit relies on
(``k3lab.render.artefacts._launcher_children`` predicts the same calls)."""
from __future__ import annotations

import sys

import pytest

from k3lab.launch.simimage import vllm_ascend
from k3lab.render.artefacts import _launcher_children
from tests.standins._standin import base_env, run

RECORD = 'echo "$@" >> calls.log\n'


@pytest.fixture(params=[vllm_ascend.K3, vllm_ascend.K31])
def launcher(request) -> str:
    return str(vllm_ascend.path(request.param, vllm_ascend.LAUNCHER))


@pytest.fixture
def launch(tmp_path, launcher):
    def go(*args, template=RECORD):
        if template is not None:
            (tmp_path / "run_dp_template.sh").write_text(template)
        return run([sys.executable, launcher, *args], base_env(tmp_path), cwd=tmp_path)
    return go


def test_renders_one_template_call_per_local_rank(tmp_path, launch):
    done = launch("--dp-size", "4", "--tp-size", "2", "--dp-size-local", "2", "--dp-rank-start", "2",
                  "--dp-address", "10.0.0.1", "--dp-rpc-port", "12321", "--vllm-start-port", "7100")
    assert done.returncode == 0, done.stderr
    assert sorted((tmp_path / "calls.log").read_text().splitlines()) == [
        "0,1 7100 4 2 10.0.0.1 12321 2", "2,3 7101 4 3 10.0.0.1 12321 2"]
    assert [" ".join(c) for c in _launcher_children(4, 2, 2, 2, "10.0.0.1", "12321", 7100)] == [
        "0,1 7100 4 2 10.0.0.1 12321 2", "2,3 7101 4 3 10.0.0.1 12321 2"]


def test_defaults_fill_the_local_size_and_ports(tmp_path, launch):
    done = launch("--dp-size", "2", "--dp-address", "10.0.0.1", "--dp-rpc-port", "13000")
    assert done.returncode == 0
    assert sorted((tmp_path / "calls.log").read_text().splitlines()) == [
        "0 9000 2 0 10.0.0.1 13000 1", "1 9001 2 1 10.0.0.1 13000 1"]


def test_missing_template_exits_1(tmp_path, launch):
    done = launch("--dp-size", "1", "--dp-address", "10.0.0.1", "--dp-rpc-port", "1", template=None)
    assert (done.returncode, done.stdout) == (1, "Template file ./run_dp_template.sh does not exist.\n")


def test_pp_size_is_not_an_option(tmp_path, launch):
    done = launch("--dp-size", "8", "--tp-size", "16", "--pp-size", "1", "--dp-address", "10.0.0.1")
    assert done.returncode == 2
    assert "error: unrecognized arguments: --pp-size 1" in done.stderr
    assert not (tmp_path / "calls.log").exists()


def test_required_options(tmp_path, launch):
    done = launch("--dp-size", "8")
    assert done.returncode == 2 and "the following arguments are required: --dp-address" in done.stderr
    done = launch("--dp-size", "eight", "--dp-address", "10.0.0.1")
    assert done.returncode == 2 and "argument --dp-size: invalid int value: 'eight'" in done.stderr


def test_omitted_rpc_port_hits_the_int_default_bug(tmp_path, launch):
    done = launch("--dp-size", "1", "--dp-address", "10.0.0.1")
    assert done.returncode == 0  # the parent never checks its children
    assert "TypeError: expected str, bytes or os.PathLike object, not int" in done.stderr
    assert not (tmp_path / "calls.log").exists()


def test_failing_template_does_not_fail_the_launcher(tmp_path, launch):
    done = launch("--dp-size", "1", "--dp-address", "10.0.0.1", "--dp-rpc-port", "1", template="exit 3\n")
    assert done.returncode == 0 and "CalledProcessError" in done.stderr
