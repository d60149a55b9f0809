"""Node access per endpoint: host objects answer like testinfra and name their host; clients ignore proxies."""
from __future__ import annotations

import paramiko
import pytest

from k3lab.launch import endpoints
from k3lab.launch.endpoints import ClientPool, NodeHost, SshOptions, hosts_from_state


class _Api:
    def __init__(self, endpoint, log):
        self.endpoint, self.log, self.execs = endpoint, log, {}

    def exec_create(self, container, argv, environment=None, workdir=None):
        self.log.append((self.endpoint, container))
        self.execs[str(len(self.execs))] = argv
        return {"Id": str(len(self.execs) - 1)}

    def exec_start(self, exec_id, demux):
        argv = self.execs[exec_id]
        if "fail" in argv[-1]:
            return b"", b"boom\n"
        if argv[2:] == ["cat", "/missing"]:
            return b"", b"No such file"
        return b"out\n", b""

    def exec_inspect(self, exec_id):
        argv = self.execs[exec_id]
        return {"ExitCode": 3 if "fail" in argv[-1] else 1 if argv[2:] == ["cat", "/missing"] else 0}


class _Client:
    def __init__(self, endpoint, log):
        self.api = _Api(endpoint, log)


class _Pool(ClientPool):
    def __init__(self):
        super().__init__()
        self.log = []
        self.clients = {}

    def get(self, endpoint):
        return self.clients.setdefault(endpoint, _Client(endpoint, self.log))


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


class _LocalShellHost(NodeHost):
    """A NodeHost whose exec runs the command on this machine (the batch's shell is what is tested)."""

    def exec(self, argv, env=None, workdir=None, timeout=None):
        import subprocess

        with self._lock:
            self.round_trips += 1
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return endpoints.CommandResult(" ".join(argv), done.returncode, done.stdout, done.stderr, self.name)


def test_batch_answers_each_command_as_if_run_alone_in_one_round_trip():
    host = _LocalShellHost("p0", "ssh://root@10.0.0.1", "c", _Pool())
    got = host.batch({"a": "echo one; echo two", "b": "echo err >&2; exit 7", "c": "printf 'no newline'",
                      "d": "cat", "e": "echo '@@fake 0 rc 0'; true", "f": "exit 0"})
    assert host.round_trips == 1
    assert (got["a"].rc, got["a"].stdout, got["a"].stderr) == (0, "one\ntwo\n", "")
    assert (got["b"].rc, got["b"].stdout, got["b"].stderr) == (7, "", "err\n")
    assert got["c"].stdout == "no newline"
    assert (got["d"].rc, got["d"].stdout) == (0, "")  # stdin closed: nothing waits for input
    assert (got["e"].rc, got["e"].stdout) == (0, "@@fake 0 rc 0\n")
    assert got["f"].rc == 0 and got["f"].host == "p0 (10.0.0.1)"


def test_batch_asks_unanswered_commands_again_once():
    host = NodeHost("p0", "ssh://root@10.0.0.1", "c", _Pool())
    got = host.batch({"a": "true", "b": "true"})  # the fake engine answers 'out\n' with no frames
    assert got["a"].rc == -1 and "no answer" in got["a"].stderr
    assert host.round_trips == 2


def test_batch_answer_lost_in_transit_is_asked_again():
    host = _LocalShellHost("p0", "ssh://root@10.0.0.1", "c", _Pool())
    real = host.exec
    calls = []

    def lossy(argv, **kw):
        res = real(argv, **kw)
        if not calls:  # the first exec's output loses everything after the first command's frame
            res.stdout = res.stdout[:res.stdout.index(" 0 end\n") + 7]
        calls.append(argv)
        return res

    host.exec = lossy
    got = host.batch({"a": "echo A", "b": "echo B", "c": "echo C"})
    assert [got[k].stdout for k in "abc"] == ["A\n", "B\n", "C\n"]
    assert len(calls) == 2 and "echo A" not in calls[1][-1]
