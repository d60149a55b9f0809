"""One broken host never blocks or leaks: per-host deadlines, the host named (node and host), the rest proceed.

No Docker: the pools hand out fakes whose engines answer, refuse (sshd down) or never answer (a SIGSTOPped
dockerd). The live rows on the emulated lab are L-LAB-* of the fault matrix (k3lab.tools.labfaults).
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from k3lab.cli import commands, main
from k3lab.launch import backends, endpoints
from k3lab.launch.endpoints import ClientPool, HostUnreachable, NodeHost, each_host
from k3lab.model import runs
from k3lab.tools import faults

HUNG = threading.Event()  # never set: a call that waits on it is a host that never answers


class _Container:
    def __init__(self, name, removed):
        self.name, self.removed = name, removed
        self.labels, self.status = {"k3lab.run": "r1"}, "running"

    def remove(self, force):
        self.removed.append(self.name)


class _Engine:
    """A node's engine: answers, refuses like a stopped sshd, or hangs like a SIGSTOPped dockerd."""

    def __init__(self, endpoint, mode, removed):
        self.endpoint, self.mode, self.removed = endpoint, mode, removed
        self.containers, self.networks = self, self

    def list(self, all=False, filters=None, ignore_removed=False):
        if self.mode == "hung":
            HUNG.wait(30)
        if self.mode == "refused":
            raise ConnectionRefusedError(111, "Connection refused")
        if filters is None or all is False and ignore_removed is False:  # networks.list
            return []
        return [_Container(f"vllm@{self.endpoint}", self.removed)]


class _Pool(ClientPool):
    def __init__(self, modes):
        super().__init__()
        self.modes, self.removed = modes, []

    def get(self, endpoint):
        self._refuse_unreachable(endpoint)
        return _Engine(endpoint, self.modes.get(endpoint, "ok"), self.removed)


EPS = {"p0": "ssh://root@10.0.0.1", "p1": "ssh://root@10.0.0.2", "d0": "tcp://10.0.0.3:2375",
       "d1": "ssh://root@10.0.0.4"}


def test_each_host_returns_by_the_deadline_with_the_silent_host_named():
    t = time.monotonic()
    answers, failures = each_host(lambda x: HUNG.wait(30) if x == "hung" else x * 2, {"a": "ok", "b": "hung"}, 0.5)
    assert time.monotonic() - t < 5
    assert answers == {"a": "okok"} and isinstance(failures["b"], TimeoutError)
    assert "no answer within" in str(failures["b"])


def test_teardown_removes_the_run_from_every_host_that_answers(capsys):
    pool = _Pool({EPS["p1"]: "refused", EPS["d0"]: "hung"})
    t = time.monotonic()
    removed, left = backends.teardown(pool, "r1", EPS, deadline=1)
    assert time.monotonic() - t < 5, "a hung engine held the teardown"
    assert sorted(pool.removed) == sorted(removed) == [f"vllm@{EPS['p0']}", f"vllm@{EPS['d1']}"]
    assert left == {"p1": EPS["p1"], "d0": EPS["d0"]}
    err = capsys.readouterr().err
    assert "p1 (10.0.0.2): ConnectionRefusedError" in err and "d0 (10.0.0.3): TimeoutError: no answer within 1 s" in err


def test_a_failed_endpoint_fails_at_once_afterwards():
    pool = ClientPool()
    pool.failed("ssh://root@10.0.0.9", TimeoutError("timed out"))
    with pytest.raises(HostUnreachable, match=r"10.0.0.9 did not answer earlier: TimeoutError: timed out") as exc:
        pool.get("ssh://root@10.0.0.9")
    assert exc.value.exit_code == 3


def test_a_node_whose_engine_stops_answering_fails_its_checks_named_and_fast():
    class _Api:
        calls = 0

        def exec_create(self, *a, **k):
            _Api.calls += 1
            raise endpoints.requests.exceptions.ReadTimeout("Read timed out. (read timeout=120)")

    class _P(ClientPool):
        def get(self, endpoint):
            self._refuse_unreachable(endpoint)
            return type("C", (), {"api": _Api()})()

    host = NodeHost("d3", "tcp://10.0.0.9:2375", "vllm", _P())
    for _ in range(2):
        with pytest.raises(AssertionError, match=r"d3 \(10.0.0.9\): endpoint tcp://10.0.0.9:2375 does not answer"):
            host.exec(["true"])
    assert _Api.calls == 1, "the second check waited on the dead host again"


def test_an_http_error_is_the_engine_answering_not_a_dead_host():
    import docker

    assert not endpoints.unreachable_error(docker.errors.NotFound("no such container"))
    assert endpoints.unreachable_error(ConnectionRefusedError(111, "refused"))


def _state(tmp_path, **extra):
    run = tmp_path / "r1"
    run.mkdir()
    doc = {"version": 1, "run": "r1", "status": "up", "target": "lab", "endpoints": EPS, **extra}
    (run / runs.RUN_STATE).write_text(json.dumps(doc))
    return run / runs.RUN_STATE


def test_down_names_the_unreachable_nodes_exits_3_and_a_rerun_finishes(tmp_path, monkeypatch, capsys):
    path = _state(tmp_path)
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path))
    pools = [_Pool({EPS["p1"]: "refused"}), _Pool({})]
    monkeypatch.setattr(commands, "ClientPool", lambda ssh: pools.pop(0))
    assert main.main(["down", "r1"]) == 3
    err = capsys.readouterr().err
    assert "p1 (10.0.0.2)" in err and "again" in err
    state = runs.run_state(path.parent)
    assert state.status == "down-incomplete" and state.left == {"p1": EPS["p1"]}
    assert main.main(["down", "r1"]) == 0  # repaired: only what is left is asked again
    state = runs.run_state(path.parent)
    assert state.status == "down" and state.left == {}


def test_status_names_a_host_that_does_not_answer(tmp_path, monkeypatch, capsys):
    _state(tmp_path)
    monkeypatch.setenv("K3LAB_RUNS", str(tmp_path))
    monkeypatch.setattr(commands, "ClientPool", lambda ssh: _Pool({EPS["d0"]: "refused"}))
    assert main.main(["status", "r1"]) == 3
    out = capsys.readouterr()
    assert "d0 (10.0.0.3): no answer" in out.out and "d0 (10.0.0.3)" in out.err


def test_lab_rows_state_their_deadline_and_break_one_named_node():
    from k3lab.tools import labfaults

    for f in faults.LAB:
        assert f.kind == "lab" and f.lab in labfaults.BREAK and "2 min" in f.mode
        assert f.expect == labfaults.EXPECT


def test_a_lab_row_reports_each_miss_under_its_promise():
    from k3lab.tools import labfaults

    row = labfaults._Row(labfaults._Target("d3", type("H", (), {"ip": "10.213.0.14"})(), "tcp://10.213.0.14:2375"))
    row.step("down", 250.0, 210.0, "k3lab: run r not removed from d3 (10.213.0.14)", 3, 3)
    row.step("check", 30.0, 420.0, "nothing named", 0, None)
    got = row.observed()
    assert labfaults.TIMELY not in got and labfaults.NAMED not in got and labfaults.CLEAN in got
    assert "(down: 250 s > 210 s)" in got and any("check: exit 0" in g for g in got)


def test_real_sockets_that_never_answer_end_by_the_answer_timeout(monkeypatch, capsys):
    """A listening socket that accepts and never answers is what a SIGSTOPped dockerd (tcp://) and a hung
    sshd (ssh://, no banner) look like; a closed port is a stopped sshd. The kit's own timeouts end each."""
    monkeypatch.setenv("K3LAB_ANSWER_TIMEOUT", "1")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshakes; nobody ever reads
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
    eps = {"d3": f"tcp://127.0.0.1:{silent.getsockname()[1]}", "p1": f"ssh://root@127.0.0.1:{silent.getsockname()[1]}",
           "p2": f"ssh://root@127.0.0.1:{closed.getsockname()[1]}"}
    pool = ClientPool()
    t = time.monotonic()
    try:
        removed, left = backends.teardown(pool, "r1", eps, deadline=20)
    finally:
        silent.close()
        closed.close()
    assert time.monotonic() - t < 10, "a silent socket held the teardown past its timeouts"
    assert removed == [] and left == eps and set(pool.unreachable) == set(eps.values())
    err = capsys.readouterr().err
    assert all(f"{n} (127.0.0.1)" in err for n in eps) and "Traceback" not in err


def test_lab_exec_names_a_host_that_stops_answering_and_fails_at_once_after(monkeypatch):
    from k3lab.render import artefacts as render

    plan = render.build("a3_pd", faults.siminventory.default("a3_pd"), target="lab").plan
    from k3lab.launch.scope import RunScope
    from k3lab.launch.targets import base, lab

    backend = lab.LabTarget(plan, "r1", RunScope("r1"))
    calls = []

    def silent(*a, **k):
        calls.append(1)
        raise endpoints.requests.exceptions.ReadTimeout("Read timed out. (read timeout=120)")

    monkeypatch.setattr(backend.pool, "get", lambda ep: ClientPool._refuse_unreachable(backend.pool, ep))
    monkeypatch.setattr(base, "docker_exec", silent)
    backend.containers["d1"] = type("C", (), {"client": type("K", (), {"api": None})(), "id": "x"})()
    where = f"d1 ({endpoints.describe(plan.node('d1').endpoint)})"
    for _ in range(2):
        with pytest.raises(HostUnreachable, match=re.escape(where)):
            backend.exec("d1", ["true"])
    assert len(calls) == 1
