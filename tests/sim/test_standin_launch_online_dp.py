"""launch_online_dp.py: the released CLI, its seven positional arguments, its quirks, and stop forwarding."""
from __future__ import annotations

import signal
import sys

from tests.sim._standin import ROOTFS, base_env, procs, run, wait_until  # noqa: F401 (procs: fixture)

LAUNCHER = str(ROOTFS / "vllm-workspace/vllm-ascend/examples/external_online_dp/launch_online_dp.py")
RECORD = 'echo "$@" >> calls.log\n'


def launch(tmp_path, *args, template=RECORD):
    if template is not None:
        (tmp_path / "run_dp_template.sh").write_text(template)
    return run([sys.executable, LAUNCHER, *args], base_env(tmp_path), cwd=tmp_path)


def test_renders_one_template_call_per_local_rank(tmp_path):
    done = launch(tmp_path, "--dp-size", "4", "--tp-size", "2", "--dp-size-local", "2", "--dp-rank-start", "2",
                  "--dp-address", "10.0.0.1", "--dp-rpc-port", "12321", "--vllm-start-port", "7100")
    assert done.returncode == 0, done.stderr
    assert sorted((tmp_path / "calls.log").read_text().splitlines()) == [
        "0,1 7100 4 2 10.0.0.1 12321 2", "2,3 7101 4 3 10.0.0.1 12321 2"]


def test_defaults_fill_the_local_size_and_ports(tmp_path):
    done = launch(tmp_path, "--dp-size", "2", "--dp-address", "10.0.0.1", "--dp-rpc-port", "13000")
    assert done.returncode == 0
    assert sorted((tmp_path / "calls.log").read_text().splitlines()) == [
        "0 9000 2 0 10.0.0.1 13000 1", "1 9001 2 1 10.0.0.1 13000 1"]


def test_missing_template_exits_1(tmp_path):
    done = launch(tmp_path, "--dp-size", "1", "--dp-address", "10.0.0.1", "--dp-rpc-port", "1", template=None)
    assert (done.returncode, done.stdout) == (1, "Template file ./run_dp_template.sh does not exist.\n")


def test_pp_size_is_not_an_option(tmp_path):
    done = launch(tmp_path, "--dp-size", "8", "--tp-size", "16", "--pp-size", "1", "--dp-address", "10.0.0.1")
    assert done.returncode == 2
    assert "error: unrecognized arguments: --pp-size 1" in done.stderr
    assert not (tmp_path / "calls.log").exists()


def test_required_options(tmp_path):
    done = launch(tmp_path, "--dp-size", "8")
    assert done.returncode == 2 and "the following arguments are required: --dp-address" in done.stderr
    done = launch(tmp_path, "--dp-size", "eight", "--dp-address", "10.0.0.1")
    assert done.returncode == 2 and "argument --dp-size: invalid int value: 'eight'" in done.stderr


def test_omitted_rpc_port_hits_the_int_default_bug(tmp_path):
    done = launch(tmp_path, "--dp-size", "1", "--dp-address", "10.0.0.1")
    assert done.returncode == 0  # the parent never checks its children
    assert "TypeError: expected str, bytes or os.PathLike object, not int" in done.stderr
    assert not (tmp_path / "calls.log").exists()


def test_failing_template_does_not_fail_the_launcher(tmp_path):
    done = launch(tmp_path, "--dp-size", "1", "--dp-address", "10.0.0.1", "--dp-rpc-port", "1", template="exit 3\n")
    assert done.returncode == 0 and "CalledProcessError" in done.stderr


def test_sigterm_stops_the_engines(tmp_path, procs):
    (tmp_path / "run_dp_template.sh").write_text('sleep 30 &\necho $! > "engine-$4.pid"\nwait\n')
    proc = procs([sys.executable, LAUNCHER, "--dp-size", "2", "--dp-address", "10.0.0.1", "--dp-rpc-port", "1"],
                 base_env(tmp_path), cwd=tmp_path)
    pid_files = [tmp_path / "engine-0.pid", tmp_path / "engine-1.pid"]
    wait_until(lambda: all(p.exists() and p.read_text().strip() for p in pid_files))
    engines = [int(p.read_text()) for p in pid_files]
    proc.stop(signal.SIGTERM, timeout=3)
    wait_until(lambda: not any(running(pid) for pid in engines), timeout=3)


def running(pid):
    """Alive and not a zombie waiting for whoever inherited it to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
