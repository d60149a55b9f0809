"""Node access per endpoint: host objects answer like testinfra and name their host; clients ignore proxies."""
from __future__ import annotations

import paramiko
import pytest

from launchers import endpoints
from launchers.endpoints import ClientPool, NodeHost, SshOptions, hosts_from_state


class _Exec:
    def __init__(self, code, out, err=b""):
        self.exit_code, self.output = code, (out, err)


class _Container:
    def __init__(self, log):
        self.log = log

    def exec_run(self, argv, **kw):
        self.log.append(argv)
        cmd = argv[-1]
        if "fail" in cmd:
            return _Exec(3, b"", b"boom\n")
        if argv[2:] == ["cat", "/missing"]:
            return _Exec(1, b"", b"No such file")
        return _Exec(0, b"out\n")


class _Client:
    def __init__(self, endpoint, log):
        self.endpoint = endpoint
        self.containers = self
        self.log = log

    def get(self, name):
        self.log.append((self.endpoint, name))
        return _Container(self.log)


class _Pool(ClientPool):
    def __init__(self):
        super().__init__()
        self.log = []

    def get(self, endpoint):
        return _Client(endpoint, self.log)


def test_hosts_use_each_nodes_own_endpoint():
    pool = _Pool()
    state = {"containers": {"p0": "vllm-k3", "d0": "vllm-k3"},
             "endpoints": {"p0": "ssh://root@10.0.0.1", "d0": "tcp://10.0.0.2:2375"}}
    hosts = hosts_from_state(state, pool)
    hosts["p0"].run("true")
    hosts["d0"].run("true")
    assert ("ssh://root@10.0.0.1", "vllm-k3") in pool.log and ("tcp://10.0.0.2:2375", "vllm-k3") in pool.log


def test_run_returns_testinfra_shaped_result_and_counts_round_trips():
    host = NodeHost("p0", "ssh://root@10.0.0.1", "c", _Pool())
    res = host.run("echo %s", "a b")
    assert (res.rc, res.stdout, res.succeeded, res.exit_status) == (0, "out\n", True, 0)
    assert res.command == "echo 'a b'"
    assert host.check_output("x") == "out"
    assert host.round_trips == 2


def test_check_output_failure_names_the_host():
    host = NodeHost("d3", "ssh://root@10.0.0.9", "c", _Pool())
    with pytest.raises(AssertionError, match=r"d3 \(10.0.0.9\).*exited 3: boom"):
        host.check_output("fail")


def test_file_reads_content_or_reports_absent():
    host = NodeHost("p0", "unix:///var/run/docker.sock", "c", _Pool())
    assert host.file("/etc/x").content_string == "out\n"
    assert host.file("/missing").exists is False


def test_clients_ignore_proxy_variables(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.1:3128")
    client = endpoints.docker_client("tcp://127.0.0.1:2375")
    assert client.api.trust_env is False


def test_kit_known_hosts_replaces_the_users(tmp_path, monkeypatch):
    """Only the kit's known_hosts counts, and an unknown key is rejected, never added."""
    key = paramiko.Ed25519Key.from_private_key_file  # noqa: F841 (paramiko present)
    known = tmp_path / "known_hosts"
    known.write_text("")
    captured = {}

    def fake_connect(self):
        captured["keys"] = self.ssh_client.get_host_keys()
        captured["system"] = self.ssh_client._system_host_keys
        captured["policy"] = self.ssh_client._policy
        captured["params"] = dict(self.ssh_params)

    monkeypatch.setattr(endpoints._KitSSHAdapter, "_connect", fake_connect)
    endpoints._KitSSHAdapter("ssh://root@10.0.0.1", SshOptions(str(known), "/k/id"))
    assert len(captured["system"]) == 0
    assert isinstance(captured["policy"], paramiko.RejectPolicy)
    assert captured["params"]["key_filename"] == "/k/id"


def test_describe():
    assert endpoints.describe("ssh://root@10.1.2.3") == "10.1.2.3"
    assert endpoints.describe("tcp://10.1.2.3:2375") == "10.1.2.3"
    assert endpoints.describe("unix:///var/run/docker.sock") == "local engine"
