"""conformance/test_containers.py's Docker reading (sim, lab), behind the view the checks now take: the same
facts and messages as before, on containers as docker-py describes them (``attrs`` as ``docker inspect``
prints them; no engine runs here). The k8s reading is tests/unit/launch/test_k8sview.py."""
from __future__ import annotations

from types import SimpleNamespace

import docker
import pytest

from tests import suite

checks = suite.load("test_containers")


def _container(status: str = "running", restarts: int = 0, address: str = "172.28.0.10", shm: int = 1 << 30):
    return SimpleNamespace(name="k3lab-r1-node0", status=status, labels={"k3lab.node": "node0"}, attrs={
        "RestartCount": restarts, "HostConfig": {"ShmSize": shm},
        "NetworkSettings": {"Networks": {"k3lab-r1": {"IPAddress": address}}}})


class _Engine:
    def __init__(self, container) -> None:
        self.containers = self
        self.container = container

    def get(self, name: str):
        if self.container is None:
            raise docker.errors.NotFound(f"No such container: {name}")
        return self.container


def _view(container, node=None):
    node = node or SimpleNamespace(name="node0", address="172.28.0.10", container=SimpleNamespace(shm_size="1g"))
    state = SimpleNamespace(containers={"node0": "k3lab-r1-node0"}, endpoint_of=lambda n, default: default)
    return node, checks.DockerView(node, state, {"node0": _Engine(container)})


def test_a_running_container_passes_and_one_that_exited_or_restarted_fails_as_before():
    node, view = _view(_container())
    checks.test_container_running(node, view)
    with pytest.raises(AssertionError, match=r"node0 \(local engine\): container k3lab-r1-node0 is exited, expected running"):
        _view(_container(status="exited"))[1].check_running()
    with pytest.raises(AssertionError, match=r"node0 \(local engine\): container restarted 2 time\(s\); check its logs"):
        _view(_container(restarts=2))[1].check_running()
    with pytest.raises(AssertionError, match="container k3lab-r1-node0 does not exist"):
        _view(None)[1].check_running()


def test_the_sims_container_against_the_plan_as_before():
    plan = SimpleNamespace(target="sim")
    node, view = _view(_container())
    checks.test_container_matches_plan(node, plan, view)
    with pytest.raises(AssertionError, match=r"node0 \(local engine\): shm 67108864 bytes, planned 1g"):
        _view(_container(shm=64 << 20))[1].check_matches_plan(plan)
    with pytest.raises(AssertionError, match=r"address 172.28.0.99, planned 172.28.0.10"):
        _view(_container(address="172.28.0.99"))[1].check_matches_plan(plan)
