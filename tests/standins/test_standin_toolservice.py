"""The tool service: hccn_tool and npu-smi answered by node-init give exactly the in-process answers.

Each case runs the real shim twice, once through a running service and once without it (the
in-process fallback), and compares stdout, stderr and the exit status byte for byte.
"""
from __future__ import annotations

import fcntl
import socket
from pathlib import Path

import pytest

from tests.standins._standin import ROOTFS, base_env, free_port, port_open, procs, py, run, wait_until, write_node  # noqa: F401 (procs: fixture)

HCCN_TOOL = str(ROOTFS / "usr/local/Ascend/driver/tools/hccn_tool")
NPU_SMI = str(ROOTFS / "usr/local/bin/npu-smi")
DEVICES = [{"id": 0, "ip": "127.0.0.1", "netmask": "255.255.0.0", "gateway": "127.0.0.254"},
           {"id": 1, "ip": "127.0.0.3", "netmask": "255.255.0.0"}]
FAULTS = {"devices": {"1": {"net_health": "Receive timeout", "tls_switch": 1, "no_ip": True, "health": "Alarm"}}}


@pytest.fixture
def service(tmp_path, procs):
    """A tool service on a free port, as node-init starts it; yields the shim environment."""
    write_node(tmp_path, platform="A3", devices=DEVICES, server_index=1, faults=FAULTS)
    port, port_file = free_port(1), tmp_path / "tool-service"
    env = base_env(tmp_path, K3SIM_HCCN_LOCK=str(tmp_path / "hccn.lock"))
    procs(py("import pathlib, sys, time; from k3sim import toolservice; "
             f"toolservice.start(pathlib.Path({str(port_file)!r}), {port}); time.sleep(120)"), env)
    wait_until(lambda: port_file.exists() and port_open(port), timeout=10)
    return {**env, "K3SIM_TOOL_SERVICE": str(port_file)}, env


@pytest.mark.parametrize("argv", [
    [HCCN_TOOL, "-i", "0", "-link", "-g"],
    [HCCN_TOOL, "-i", "1", "-net_health", "-g"],
    [HCCN_TOOL, "-i", "1", "-tls", "-g"],
    [HCCN_TOOL, "-i", "1", "-ip", "-g"],           # exit 13, "no ip preset"
    [HCCN_TOOL, "-i", "0", "-vnic", "-g"],
    [HCCN_TOOL, "-i", "9", "-link", "-g"],         # invalid device: exit 255
    [HCCN_TOOL, "-i", "0", "-nonsense", "-g"],     # usage
    [HCCN_TOOL, "-i", "0", "-ping", "-g", "address", "127.0.0.3"],
    [HCCN_TOOL],
    [NPU_SMI, "info"],
    [NPU_SMI, "info", "-t", "spod-info", "-i", "0", "-c", "0"],
    [NPU_SMI, "info", "-t", "health", "-i", "1"],
    [NPU_SMI, "bogus", "it's got 'quotes' and spaces"],
    [NPU_SMI],
])
def test_service_answers_as_the_tool_in_process(service, argv):
    through_service, in_process = service
    got, want = run(argv, through_service), run(argv, in_process)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    assert got.stdout  # every case prints something: an empty pair would prove nothing


def test_calls_leave_no_socket_behind_in_the_nodes_tcp_table(service):
    """A real tool opens no TCP socket; the service's calls must not fill /proc/net/tcp, which the
    suite's port checks read, with one TIME_WAIT entry per call."""
    through_service, _ = service
    port = int(Path(through_service["K3SIM_TOOL_SERVICE"]).read_text())
    for _ in range(20):
        assert run([HCCN_TOOL, "-i", "0", "-link", "-g"], through_service).stdout == "link status: UP\n"
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    ends = [(r[1], r[2]) for r in rows if r[3] == "06"]  # TIME_WAIT
    assert not [e for e in ends if any(int(x.rsplit(":", 1)[1], 16) == port for x in e)]


def test_busy_answer_comes_through_the_service(service, tmp_path):
    through_service, _ = service
    with open(tmp_path / "hccn.lock", "w") as lock:  # another hccn_tool call holds the device tool
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run([HCCN_TOOL, "-i", "0", "-link", "-g"], through_service)
    assert (done.returncode, done.stdout) == (1, "hccn_tool is busy, please try again.\n")


def test_absent_service_falls_back_to_the_tool(tmp_path):
    write_node(tmp_path, platform="A3", devices=DEVICES, faults={})
    stale = tmp_path / "tool-service"
    stale.write_text(f"{free_port(1)}\n")  # a port file left behind, nothing listening
    done = run([HCCN_TOOL, "-i", "0", "-link", "-g"], base_env(tmp_path, K3SIM_TOOL_SERVICE=str(stale)))
    assert (done.returncode, done.stdout, done.stderr) == (0, "link status: UP\n", "")


@pytest.mark.parametrize("request_bytes, message", [
    (b"rm\x000\x00", "unknown tool 'rm'"),
    (b"hccn_tool\x00x\x00", "malformed request"),
])
def test_bad_requests_get_an_error_not_a_dead_service(service, request_bytes, message):
    through_service, _ = service
    port = int(Path(through_service["K3SIM_TOOL_SERVICE"]).read_text())
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request_bytes)
        conn.shutdown(socket.SHUT_WR)
        reply = conn.makefile("rb")  # as a shim reads: the header, then the counted bytes
        rc, nout, nerr = map(int, reply.readline().split())
        rest = reply.read(nout + nerr)
    assert (rc, nout) == (1, 0) and message in rest.decode() and len(rest) == nerr
    assert run([NPU_SMI, "info"], through_service).returncode == 0  # still serving


def test_node_init_and_the_shims_agree_on_the_port_file():
    default = "/run/k3lab-sim/tool-service"
    node_init = (ROOTFS.parent / "k3sim" / "node_init.py").read_text()
    assert f'"K3SIM_TOOL_SERVICE", "{default}"' in node_init and "toolservice.start(TOOL_PORT_FILE)" in node_init
    for shim in (HCCN_TOOL, NPU_SMI):
        assert "${K3SIM_TOOL_SERVICE:-" + default + "}" in Path(shim).read_text()


def test_a_lab_hosts_service_serves_until_sigterm_and_removes_its_port_file(tmp_path, procs):
    """``python -m k3sim.toolservice PORT_FILE``, as each emulated lab host runs it (k3lab.launch.labemu)."""
    import sys

    write_node(tmp_path, platform="A3", devices=DEVICES, faults={})
    port, port_file = free_port(1), tmp_path / "tool-service"
    env = base_env(tmp_path, K3SIM_TOOL_PORT=str(port), K3SIM_HCCN_LOCK=str(tmp_path / "hccn.lock"))
    proc = procs([sys.executable, "-m", "k3sim.toolservice", str(port_file)], env)
    wait_until(lambda: port_file.exists() and port_open(port), timeout=10)
    done = run([HCCN_TOOL, "-i", "0", "-link", "-g"], {**env, "K3SIM_TOOL_SERVICE": str(port_file)})
    assert (done.returncode, done.stdout) == (0, "link status: UP\n")
    assert proc.stop() == 0 and not port_file.exists()


def test_the_lab_hosts_port_file_is_the_shims_second_choice():
    labemu = (Path(__file__).parents[2] / "k3lab" / "launch" / "labemu.py").read_text()
    assert "-m k3sim.toolservice /etc/k3lab-sim/tool-service" in labemu
    for shim in (HCCN_TOOL, NPU_SMI):
        assert "file=/etc/k3lab-sim/tool-service" in Path(shim).read_text()
