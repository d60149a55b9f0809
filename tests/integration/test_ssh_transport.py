"""The SSH code path for real: a local sshd, host keys verified, the sim run driven over ssh://."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from k3lab.model import siminventory
from tests.integration.conftest import require

pytestmark = [pytest.mark.xdist_group(name="docker"), pytest.mark.sim]
ROOT = Path(__file__).resolve().parents[2]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path):
    require(os.path.exists(SSHD) and os.geteuid() == 0, "needs openssh-server and root")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    (tmp_path / "authorized_keys").write_text((home / ".ssh" / "id_ed25519.pub").read_text())
    os.chmod(tmp_path / "authorized_keys", 0o600)
    os.chmod(tmp_path, 0o755)
    port = free_port()
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-p", str(port), "-o", "ListenAddress=127.0.0.1", "-h",
                             str(tmp_path / "host_key"), "-o", f"AuthorizedKeysFile={tmp_path / 'authorized_keys'}",
                             "-o", "PermitRootLogin=prohibit-password", "-o", "StrictModes=no",
                             "-o", "PidFile=none", "-o", "MaxSessions=64"], stderr=subprocess.PIPE)
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    host_pub = (tmp_path / "host_key.pub").read_text().split()
    known = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n"
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {home / '.ssh' / 'id_ed25519'}\n")
    yield {"port": port, "home": home, "known_hosts": known}
    proc.terminate()
    proc.wait(timeout=10)


def inventory(tmp_path, port) -> Path:
    inv = siminventory.default("k3_a3_mixed").model_dump(mode="json")
    for node in inv["nodes"]:
        node["endpoint"] = f"ssh://root@127.0.0.1:{port}"
    path = tmp_path / "ssh-inventory.yaml"
    path.write_text(yaml.safe_dump(inv))
    return path


def test_unknown_host_key_is_refused(sshd, tmp_path, runs_dir, clean_engine):
    env = {**os.environ, "HOME": str(sshd["home"])}  # no known_hosts entry yet
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "up", "k3_a3_mixed", "-i",
                          str(inventory(tmp_path, sshd["port"])), "--target", "sim"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "not found in known_hosts" in out or "known_hosts" in out or "SSHException" in out, out[-2000:]


def test_sim_run_over_ssh(sshd, tmp_path, runs_dir, clean_engine):
    (sshd["home"] / ".ssh" / "known_hosts").write_text(sshd["known_hosts"])
    env = {**os.environ, "HOME": str(sshd["home"])}
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "cycle", "k3_a3_mixed", "-i",
                          str(inventory(tmp_path, sshd["port"])), "--target", "sim", "--", "-q", "-k",
                          "models or health or container_running"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


def test_lab_backend_over_ssh(sshd, tmp_path, runs_dir, clean_engine, monkeypatch):
    """The lab backend (documented docker run, each node's own endpoint) driven over ssh://.

    This machine's runtime refuses --privileged and has no /dev/davinci* or driver files, so the
    container spec drops those three and mounts the host's programs instead; everything else
    (endpoint per node, host network, shm, labels, staging, exec, teardown by label) is the lab path.
    """
    from k3lab.launch.scope import RunScope
    from k3lab.launch.simimage import image
    from k3lab.launch.targets.lab import LabTarget
    from k3lab.model import inventory
    from k3lab.model.plan import Mount
    from k3lab.render import artefacts as render

    (sshd["home"] / ".ssh" / "known_hosts").write_text(sshd["known_hosts"])
    monkeypatch.setenv("HOME", str(sshd["home"]))
    inv = inventory.load(ROOT / "fixtures" / "inventories" / "k3_a3_mixed.yaml").model_dump(mode="json")
    for node in inv["nodes"]:
        node["endpoint"] = f"ssh://root@127.0.0.1:{sshd['port']}"
        node["container_name"] = f"k3lab-labtest-{node['name']}"
    plan = render.build("k3_a3_mixed", inventory.parse(inv), target="lab", run_label="labtest").plan
    ref = image.ensure()
    for node in plan.nodes:
        c = node.container
        c.image, c.privileged, c.devices = ref, False, []
        c.mounts = [Mount(source=m["Source"], target=m["Target"], read_only=True) for m in image.host_mounts()]
    scope = RunScope("labtest")
    backend = LabTarget(plan, "labtest", scope)
    try:
        backend.parallel(backend.create, plan.nodes)
        backend.parallel(lambda n: backend.put(n, {"/root/k3lab/hello.txt": (n.name.encode(), 0o644)}), plan.nodes)
        backend.parallel(backend.start, plan.nodes)
        for node in plan.nodes:
            res = backend.exec(node.name, ["cat", "/root/k3lab/hello.txt"])
            assert (res.rc, res.check()) == (0, node.name)
            attrs = backend.containers[node.name].attrs
            assert attrs["HostConfig"]["NetworkMode"] == "host" and attrs["HostConfig"]["ShmSize"] == 1 << 30
            assert attrs["Config"]["Labels"]["k3lab.run"] == "labtest"
    finally:
        assert scope.registered(), "creating a container registers its removal"
        assert scope.close() == {}
    assert backend.removed == len(plan.nodes)
