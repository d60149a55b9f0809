"""Lab preflight checks against fake endpoints: each check's fault case and its healthy case."""
from __future__ import annotations

import socket

import docker
import paramiko
import pytest
import requests

from k3lab.launch import endpoints, hoststage, labpreflight, lifecycle
from k3lab.model.plan import Container, Mount, NodePlan, PortUse


def _node(endpoint="ssh://root@10.0.0.1", address="127.0.0.1"):
    c = Container(name="vllm-k3", image="img:1", shm_size="1g", privileged=True, network_mode="host", devices=[],
                  mounts=[Mount(source="/etc/hccn.conf", target="/etc/hccn.conf"), Mount(source="/m", target="/m")],
                  command=["sleep", "infinity"])
    return NodePlan(name="p0", role="prefill", rank=0, address=address, nic="eth0", endpoint=endpoint, platform="A3",
                    device_count=16, container=c, artefacts=[], processes=[])


class _Other:
    def __init__(self, labels):
        self.labels, self.status, self.attrs = labels, "running", {"Config": {"Image": "ubuntu"}}


class _Containers:
    def __init__(self, existing=None, missing_sources=()):
        self.existing, self.missing, self.created = existing or {}, set(missing_sources), []

    def get(self, name):
        if name in self.existing:
            return self.existing[name]
        raise docker.errors.NotFound("no")

    def create(self, image, mounts, **kw):
        for m in mounts:
            if m["Source"] in self.missing:
                raise docker.errors.APIError("400", explanation=f'invalid mount config for type "bind": bind source '
                                             f'path does not exist: {m["Source"]}')
        self.created.append(kw["name"])
        return type("P", (), {"remove": lambda self, force: None})()


class _Images:
    def __init__(self, present=True):
        self.present, self.pulled = present, []

    def get(self, name):
        if not self.present:
            raise docker.errors.ImageNotFound("no")

    def pull(self, repo, tag):
        self.pulled.append((repo, tag))
        raise docker.errors.APIError("500", explanation="no registry here")


class _Client:
    def __init__(self, containers=None, images=None, ping_exc=None):
        self.containers, self.images, self.ping_exc = containers or _Containers(), images or _Images(), ping_exc
        self.api = type("A", (), {"trust_env": False})()

    def ping(self):
        if self.ping_exc:
            raise self.ping_exc
        return True


class _Pool:
    def __init__(self, client):
        self.client, self._clients, self.ssh = client, {"ep": client}, endpoints.SshOptions()

    def get(self, endpoint):
        return self.client


def test_unknown_host_key_is_reported_naming_the_host():
    exc = paramiko.SSHException("Server '10.0.0.1' not found in known_hosts")
    f = labpreflight.check_endpoint(_node(), _Pool(_Client(ping_exc=exc)))
    assert f[0].check == "LPF-ENDPOINT" and "p0 (10.0.0.1)" in f[0].message and "not known" in f[0].message


def test_endpoint_that_does_not_answer(monkeypatch):
    monkeypatch.setattr(hoststage, "shell_noise", lambda endpoint, ssh: "")  # SSH answers, the shell is clean
    f = labpreflight.check_endpoint(_node(), _Pool(_Client(ping_exc=ConnectionRefusedError("refused"))))
    assert f[0].check == "LPF-ENDPOINT" and "does not answer" in f[0].message
    assert labpreflight.check_endpoint(_node(), _Pool(_Client())) == []


def test_a_shell_that_prints_is_named_not_a_dead_engine(monkeypatch):
    # what docker-py raises when ~/.bashrc echoes a banner before dial-stdio's HTTP (seen on the emulated lab)
    garbled = requests.exceptions.ConnectionError("('Connection aborted.', BadStatusLine('Welcome to p0\\n'))")
    monkeypatch.setattr(hoststage, "shell_noise", lambda endpoint, ssh: "Welcome to p0\nhave a nice day\n")
    f = labpreflight.check_endpoint(_node(), _Pool(_Client(ping_exc=garbled)))
    assert [x.check for x in f] == ["LPF-SSH-SHELL"]
    assert "p0 (10.0.0.1)" in f[0].message and "'Welcome to p0'" in f[0].message and "30 byte(s)" in f[0].message
    assert "case $- in *i*)" in f[0].message  # the remedy
    # a hostile banner is quoted, never passed on raw (terminal escapes)
    monkeypatch.setattr(hoststage, "shell_noise", lambda endpoint, ssh: "\x1b[2J\x1b]0;owned\x07" + "x" * 500)
    f = labpreflight.check_endpoint(_node(), _Pool(_Client(ping_exc=garbled)))
    assert "\x1b" not in f[0].message and "\x07" not in f[0].message and len(f[0].message) < 800


def test_only_an_ssh_endpoint_has_a_shell_to_ask():
    assert hoststage.shell_noise("tcp://10.0.0.1:2375", endpoints.SshOptions()) == ""


def test_image_absent_with_pull_never_and_failed_pull():
    f = labpreflight.check_image(_node(), _Pool(_Client(images=_Images(False))), "never")
    assert f[0].check == "LPF-IMAGE" and "not present" in f[0].message
    images = _Images(False)
    f = labpreflight.check_image(_node(), _Pool(_Client(images=images)), "missing")
    assert images.pulled == [("img", "1")] and "no registry here" in f[0].message
    assert labpreflight.check_image(_node(), _Pool(_Client()), "never") == []


def test_missing_mount_sources_are_all_listed():
    pool = _Pool(_Client(containers=_Containers(missing_sources=["/etc/hccn.conf", "/m"])))
    f = labpreflight.check_mounts(_node(), pool, "r1")
    assert f[0].check == "LPF-MOUNT-SOURCE" and "/etc/hccn.conf, /m" in f[0].message
    assert labpreflight.check_mounts(_node(), _Pool(_Client()), "r1") == []


def test_foreign_container_name_is_an_error_and_own_run_is_fine():
    foreign = _Pool(_Client(containers=_Containers({"vllm-k3": _Other({})})))
    f = labpreflight.check_name(_node(), foreign, "r1")
    assert f[0].check == "LPF-NAME" and "not started by k3lab" in f[0].message
    leftover = _Pool(_Client(containers=_Containers({"vllm-k3": _Other({"k3lab.run": "r0"})})))
    assert "k3lab down r0" in labpreflight.check_name(_node(), leftover, "r1")[0].message
    own = _Pool(_Client(containers=_Containers({"vllm-k3": _Other({"k3lab.run": "r1"})})))
    assert labpreflight.check_name(_node(), own, "r1") == []


def test_taken_host_port_is_reported():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    plan = type("P", (), {"expect": type("E", (), {"ports": {"p0": [PortUse(port=port, purpose="api"),
                                                                   PortUse(port=1, last=3, purpose="r", listens=False)]}})()})()
    try:
        f = labpreflight.check_ports(plan, _node())
    finally:
        s.close()
    assert f[0].check == "LPF-PORTS" and str(port) in f[0].message


def test_proxy_variables_never_read_by_deployment_clients(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://192.0.2.1:3128")
    assert labpreflight.check_proxy(_Pool(_Client())) == []
    monkeypatch.setattr(endpoints.HTTP, "trust_env", True)
    f = labpreflight.check_proxy(_Pool(_Client()))
    assert f[0].check == "LPF-PROXY" and "HTTPS_PROXY" in f[0].message


def test_gates_ignore_a_proxy_set_on_the_kit_host(monkeypatch):
    """A dead proxy in the environment: a gate on a deployment address still reaches it directly."""
    import http.server
    import threading

    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:9")
    monkeypatch.setenv("http_proxy", "http://192.0.2.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        from k3lab.model.plan import Gate

        gate = Gate(kind="http", node="p0", target=f"http://127.0.0.1:{srv.server_port}/")
        assert lifecycle.gate_ok(None, gate)
    finally:
        srv.shutdown()


def test_pull_policy_validated():
    with pytest.raises(ValueError):
        labpreflight.run(None, None, "r", pull="sometimes")


def test_an_inventory_mounts_missing_source_is_named():
    """Issue #36 item 1: a mounts entry whose source is not on the node (the shared filesystem not mounted)."""
    node = _node()
    node.container.mounts.append(Mount(source="/mnt/weights", target="/mnt/weights", read_only=True))
    pool = _Pool(_Client(containers=_Containers(missing_sources=["/mnt/weights"])))
    f = labpreflight.check_mounts(node, pool, "r1")
    assert f[0].check == "LPF-MOUNT-SOURCE" and "missing on the host: /mnt/weights." in f[0].message
    assert "mounts entry" in f[0].message  # the remedy
