"""The lab target on an emulated multi-host lab (k3lab labemu): one engine, sshd and namespace per host.

Proves what only several engines can: checks read the right host, lab preflight names the host of
each fault, an interrupted up leaves nothing on any host, attach mode finds a deployment started by
hand from the rendered scripts and names the host whose container stopped.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
import yaml

from k3lab.launch import labemu
from tests.integration.conftest import require

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
ROOT = Path(__file__).resolve().parents[2]
K3LAB = [sys.executable, "-m", "k3lab.cli.main"]
SCENARIO = "k3_a3_mixed"  # four hosts



def default_sigint() -> None:
    # A background job starts with SIGINT ignored, and Python keeps ignoring it: restore the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def k3lab(*args, timeout=600, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*K3LAB, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require(os.geteuid() == 0 and bool(shutil.which("nsenter")) and os.path.exists("/usr/sbin/sshd"),
            "needs root, nsenter and openssh-server")
    out = tmp_path_factory.mktemp("labemu") / "lab.yaml"
    res = k3lab("labemu", "up", "--scenario", SCENARIO, "--out", str(out), timeout=600)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        state = json.loads((labemu._state_dir() / "state.json").read_text())
        yield {"inventory": out, "hosts": [labemu.Host(h["index"]) for h in state["hosts"]],
               "nodes": [h["node"] for h in state["hosts"]]}
    finally:
        done = k3lab("labemu", "down", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                    if n.startswith(labemu.NS_PREFIX)]
        assert subprocess.run(["ip", "link", "show", labemu.BRIDGE], capture_output=True).returncode != 0


def engine(host: labemu.Host) -> docker.DockerClient:
    return docker.DockerClient(base_url=f"unix://{host.sock}", timeout=60)


def all_containers(lab) -> dict[str, list[str]]:
    return {h.name: [c.name for c in engine(h).containers.list(all=True)] for h in lab["hosts"]}


def test_ssh_sessions_use_the_hosts_own_root_startup_files(lab):
    """An emulated host's root gets a fresh install's ~/.bashrc, not this machine's (which may start
    pyenv on every SSH session); the machine's own file is untouched."""
    import paramiko

    inv = yaml.safe_load(lab["inventory"].read_text())
    node = next(n for n in inv["nodes"] if n["endpoint"].startswith("ssh://"))
    client = paramiko.SSHClient()
    client.load_host_keys(inv["lab"]["known_hosts"])
    client.connect(node["local_ip"], username="root", key_filename=inv["lab"]["identity_file"],
                   look_for_keys=False, allow_agent=False, timeout=20)
    try:
        got = {}
        for name in labemu.DOTFILES:
            _, out, _ = client.exec_command(f"cat ~/{name} 2>/dev/null || echo ABSENT", timeout=20)
            got[name] = out.read().decode()
    finally:
        client.close()
    for name in labemu.DOTFILES:
        if Path("/root", name).exists():
            assert got[name] == labemu.fresh_dotfile(name), f"{node['name']}: ~/{name} is not the host's own"
        else:
            assert got[name] == "ABSENT\n"  # nothing is created on this machine


def test_an_ssh_endpoint_stays_within_sshds_default_session_limit(lab):
    """The emulated hosts run sshd with its defaults (MaxSessions 10 channels per connection), as a lab
    node does; docker-py keeps a pool, hence an open channel, per request URL: many distinct URLs over
    one connection must not run out of sessions (docker-py#2246)."""
    from k3lab.launch.endpoints import SshOptions, docker_client

    inv = yaml.safe_load(lab["inventory"].read_text())
    assert not [h for h in lab["hosts"] if "MaxSessions" in (h.root / "etc/ssh/k3emu_sshd_config").read_text()]
    node = next(n for n in inv["nodes"] if n["endpoint"].startswith("ssh://"))
    client = docker_client(node["endpoint"], SshOptions(inv["lab"]["known_hosts"], inv["lab"]["identity_file"]))
    try:
        for i in range(30):  # 30 URLs, 30 pools were there no bound
            with pytest.raises(docker.errors.NotFound):
                client.api.inspect_container(f"k3lab-absent-{i}")
        assert client.ping()
    finally:
        client.close()


def test_lab_preflight_names_the_host_of_each_fault(lab, tmp_path, runs_dir):
    """A foreign container with the guide's name and a taken API port on node0, an unknown host key on
    node1, a missing mount source on node2, the image absent (--pull never) on node3: one finding each,
    on its host, and nothing started."""
    h0, h1, h2, h3 = lab["hosts"]
    inv = yaml.safe_load(lab["inventory"].read_text())
    assert inv["nodes"][1]["endpoint"].startswith("ssh://")
    known = Path(inv["lab"]["known_hosts"]).read_text().splitlines()
    partial = tmp_path / "known_hosts"
    partial.write_text("\n".join(line for line in known if not line.startswith(h1.ip + " ")) + "\n")
    inv["lab"]["known_hosts"] = str(partial)
    path = tmp_path / "faulty.yaml"
    path.write_text(yaml.safe_dump(inv))
    hccn = h2.root / "etc" / "hccn.conf"
    hccn.rename(hccn.with_suffix(".away"))
    image = "quay.io/ascend/vllm-ascend:kimi-k3-a3"
    engine(h3).images.remove(image)
    foreign = engine(h0).containers.create(engine(h0).images.get(image).id, command=["sleep", "1"], name="vllm-ascend")
    holder = subprocess.Popen(["nsenter", f"--net=/run/netns/{h0.ns}", sys.executable, "-c",
                               "import socket,time; s=socket.socket(); s.bind(('0.0.0.0',8000)); s.listen(); time.sleep(300)"])
    try:
        for _ in range(50):
            try:
                socket.create_connection((h0.ip, 8000), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        res = k3lab("up", SCENARIO, "-i", str(path), "--pull", "never", timeout=300)
        err = res.stdout + res.stderr
        assert res.returncode != 0 and "nothing was started" in err, err[-3000:]
        lines = [ln for ln in err.splitlines() if ln.startswith("ERROR LPF-")]
        got = sorted({ln.split("]")[0] for ln in lines})
        assert got == ["ERROR LPF-ENDPOINT [node1", "ERROR LPF-IMAGE [node3", "ERROR LPF-MOUNT-SOURCE [node2",
                       "ERROR LPF-NAME [node0", "ERROR LPF-PORTS [node0"], err[-3000:]
        assert "/etc/hccn.conf" in next(ln for ln in lines if "MOUNT-SOURCE" in ln)
        assert "not started by k3lab" in next(ln for ln in lines if "LPF-NAME" in ln)
        assert "8000" in next(ln for ln in lines if "LPF-PORTS" in ln)
        assert "not known" in next(ln for ln in lines if "LPF-ENDPOINT" in ln)
        # nothing started, and the operator's container is untouched
        assert all_containers(lab) == {h0.name: ["vllm-ascend"], h1.name: [], h2.name: [], h3.name: []}
        # with the host's key known and the faults gone, the same preflight passes (healthy case below)
    finally:
        holder.kill()
        holder.wait()
        foreign.remove(force=True)
        hccn.with_suffix(".away").rename(hccn)
        subprocess.run(["docker", "-H", f"unix://{h0.sock}", "save", image, "-o", str(tmp_path / "img.tar")], check=True)
        subprocess.run(["docker", "-H", f"unix://{h3.sock}", "load", "-i", str(tmp_path / "img.tar")], check=True,
                       capture_output=True)


def test_interrupted_up_leaves_nothing_on_any_host(lab, runs_dir):
    proc = subprocess.Popen([*K3LAB, "up", SCENARIO, "-i", str(lab["inventory"])], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    seen = ""
    try:
        deadline = time.monotonic() + 420  # lab preflight, host stage and hardware stage come first
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            seen += line
            if "stage heads: ready" in line or not line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "stage heads: ready" in seen, seen
    assert proc.returncode != 0
    assert all(not names for names in all_containers(lab).values()), all_containers(lab)


def _hand_start(lab, render_dir: Path) -> None:
    """What an operator does from the rendered scripts on each node: docker_run.sh, copy files, start stages."""
    plan = json.loads((render_dir / "plan.json").read_text())
    hosts = dict(zip(lab["nodes"], lab["hosts"]))
    cli = shutil.which("docker")

    def on(node: str, *argv: str, check=True) -> subprocess.CompletedProcess:
        env = {**os.environ, "DOCKER_HOST": f"unix://{hosts[node].sock}"}
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=check, timeout=120)

    for n in plan["nodes"]:
        on(n["name"], "bash", str(render_dir / n["name"] / "docker_run.sh"))
        name = n["container"]["name"]
        for art in n["artefacts"]:
            if art["path"].startswith("/"):
                on(n["name"], cli, "exec", name, "mkdir", "-p", os.path.dirname(art["path"]))
                on(n["name"], cli, "cp", str(render_dir / n["name"] / art["name"]), f"{name}:{art['path']}")
    procs = {p["id"]: (n, p) for n in plan["nodes"] for p in n["processes"]}
    for stage in plan["stages"]:
        for pid in stage["processes"]:
            n, p = procs[pid]
            on(n["name"], cli, "exec", "-d", "-w", p["cwd"], n["container"]["name"], "bash", "-c",
               f'mkdir -p "$(dirname {p["log"]})" && exec bash {p["script"]} >> {p["log"]} 2>&1')
        for gate in stage["gates"]:
            if gate["kind"] != "http":
                continue
            deadline = time.monotonic() + 120
            import requests

            s = requests.Session()
            s.trust_env = False
            while True:
                try:
                    if s.get(gate["target"], timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                assert time.monotonic() < deadline, f"hand-started deployment: {gate['target']} never answered"
                time.sleep(0.5)


def test_attach_mode_checks_a_hand_started_deployment(lab, tmp_path, runs_dir):
    rendered = tmp_path / "rendered"
    res = k3lab("render", SCENARIO, "-i", str(lab["inventory"]), "--target", "lab", "--out", str(rendered))
    assert res.returncode == 0, res.stderr
    try:
        _hand_start(lab, rendered)
        ok = k3lab("check", SCENARIO, "-i", str(lab["inventory"]), timeout=900)
        assert ok.returncode == 0, ok.stdout[-4000:] + ok.stderr[-2000:]
        assert "passed" in ok.stdout and " failed" not in ok.stdout
        run_dirs = sorted(runs_dir.iterdir())
        assert (run_dirs[-1] / "summary.md").exists() and (run_dirs[-1] / "junit.xml").exists()
        h2 = lab["hosts"][2]
        engine(h2).containers.get("vllm-ascend").stop(timeout=1)
        bad = k3lab("check", SCENARIO, "-i", str(lab["inventory"]), "--", "-k", "container_running", timeout=600)
        assert bad.returncode != 0
        assert f"node2 ({h2.ip}): container vllm-ascend is exited" in bad.stdout, bad.stdout[-3000:]
        # attach never tears down: the other hosts' containers still run
        assert all(engine(h).containers.get("vllm-ascend").status == "running"
                   for h in lab["hosts"] if h is not h2)
    finally:
        for h in lab["hosts"]:
            for c in engine(h).containers.list(all=True):
                c.remove(force=True)


def test_hardware_fault_on_one_host_is_reported_for_that_host_only(lab, runs_dir):
    up = k3lab("up", SCENARIO, "-i", str(lab["inventory"]), "--keep", timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    run_dir = Path(up.stdout.strip().splitlines()[-1])
    try:
        h1 = lab["hosts"][1]
        done = engine(h1).containers.get("vllm-ascend").exec_run(["k3sim-fault", "set", "devices.3.health", "Alarm"])
        assert done.exit_code == 0, done.output
        res = subprocess.run([sys.executable, "-m", "pytest", "conformance", f"--run-dir={run_dir}", "-p",
                              "no:cacheprovider", "-q", "-k", "npu_smi", "-rf"], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)
        failed = sorted(ln.split("::")[-1].split(" ")[0] for ln in res.stdout.splitlines() if ln.startswith("FAILED"))
        assert failed == ["test_npu_smi_devices_healthy[node1]"], res.stdout[-3000:]
    finally:
        # the fault is the host's (its node file), as a real NPU's state outlives a container: undo it
        engine(lab["hosts"][1]).containers.get("vllm-ascend").exec_run(["k3sim-fault", "clear", "devices.3"])
        down = k3lab("down", run_dir.name, timeout=300)
        assert down.returncode == 0, down.stderr
    assert all(not names for names in all_containers(lab).values())


# phase, how it fails, command, expected exit code: the failure-path matrix (#31) on several hosts
LAB_ROWS = [
    ("host-stage", "exception", "up", 4),       # the host stage's helper containers exist
    ("containers", "sigterm", "cycle", 130),    # containers on every host
    ("hardware-stage", "gate", "cycle", 1),
    ("stage-workers", "sigint", "cycle", 130),
]


@pytest.mark.parametrize("phase, mode, command, code", LAB_ROWS, ids=[f"{p}-{m}-{c}" for p, m, c, _ in LAB_ROWS])
def test_a_failing_phase_leaves_nothing_on_any_host(lab, runs_dir, phase, mode, command, code):
    from tests.integration.test_failure_paths import run_failing, state_of

    extra = ["--", "-p", "no:cacheprovider", "-k", "test_health"] if command == "cycle" else []
    res = run_failing(phase, mode, command, SCENARIO, "-i", str(lab["inventory"]), *extra)
    out = res.stdout + res.stderr
    assert f"phasefail: {phase} done, now {mode}" in out, out
    assert res.returncode == code, out
    assert all(not names for names in all_containers(lab).values()), all_containers(lab)
    assert all(not engine(h).networks.list(filters={"label": "k3lab.run"}) for h in lab["hosts"])
    state = state_of(runs_dir)
    assert (state["status"], state["left"]) == ("down", {}), state
