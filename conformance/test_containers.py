"""Containers: every planned container exists, runs, has not restarted, and matches the plan.

Each container is read through its own node's Docker endpoint: on a lab every node has a
container of the same name, so the local engine would answer for the wrong host. A target that
describes its nodes itself hands its own view (the ``containers`` fixture; k8s: the pods' status and
spec through the Kubernetes API, k3lab.launch.targets.k8sview) with the same two checks.
"""
from __future__ import annotations

import docker
import pytest

from k3lab.launch.endpoints import describe
from k3lab.model import targetkinds

KIND = "environment"  # default class of a failure here


def _where(node, state) -> str:
    return f"{node.name} ({describe(state.endpoint_of(node.name, 'unix://'))})"


class DockerView:
    """A node's container on its own Docker endpoint (sim, lab): the two checks' Docker reading."""

    def __init__(self, node, state, docker_clients) -> None:
        self.node, self.state, self.docker_clients = node, state, docker_clients

    def check_running(self) -> None:
        __tracebackhide__ = True
        _docker_running(self.node, self.state, self.docker_clients)

    def check_matches_plan(self, plan) -> None:
        __tracebackhide__ = True
        _docker_matches_plan(self.node, self.state, plan, self.docker_clients)


@pytest.fixture
def view(node, state, containers, docker_clients):
    """The node's container(s) as its target describes them (None from the target: on its Docker endpoint)."""
    return containers[node.name] if containers is not None else DockerView(node, state, docker_clients)


def _container(state, node, docker_clients):
    name = state.containers[node.name]
    try:
        return docker_clients[node.name].containers.get(name)
    except docker.errors.NotFound:
        raise AssertionError(f"{_where(node, state)}: container {name} does not exist") from None


@pytest.mark.conformance(
    id="containers.test_container_running", area="containers",
    must="Every planned node container MUST be running and MUST NOT have restarted.",
    remedy="read the container's log on its node (docker logs NAME; on k8s kubectl logs --previous POD) for why it exited or restarted, fix that, then bring the run up again.")
def test_container_running(node, view):
    view.check_running()


def _docker_running(node, state, docker_clients) -> None:
    __tracebackhide__ = True
    c = _container(state, node, docker_clients)
    where = _where(node, state)
    assert c.status == "running", f"{where}: container {c.name} is {c.status}, expected running"
    restarts = c.attrs["RestartCount"]
    assert restarts == 0, f"{where}: container restarted {restarts} time(s); check its logs"


@pytest.mark.conformance(
    id="containers.test_container_matches_plan", area="containers",
    must="Each container MUST have the planned shm size, privileges, network, devices and mounts (a k8s pod also its image, command, environment and NPU limit).",
    remedy="start the container only through k3lab up (it applies the plan's shm, privileges, network, devices and mounts); remove a container created by hand.")
def test_container_matches_plan(node, plan, view):
    view.check_matches_plan(plan)


def _docker_matches_plan(node, state, plan, docker_clients) -> None:
    __tracebackhide__ = True
    c = _container(state, node, docker_clients)
    where = _where(node, state)
    hc = c.attrs["HostConfig"]
    want_shm = {"1g": 1 << 30}.get(node.container.shm_size)
    assert hc["ShmSize"] == want_shm, f"{where}: shm {hc['ShmSize']} bytes, planned {node.container.shm_size}"
    if targetkinds.kind(plan.target).real_hosts:  # host network, devices and mounts as the guide's docker run
        _assert_lab_container(c, node, where)
    else:
        nets = c.attrs["NetworkSettings"]["Networks"]
        addr = next(iter(nets.values()))["IPAddress"]
        assert addr == node.address, f"{where}: address {addr}, planned {node.address}"
    assert c.labels.get("k3lab.node") == node.name, f"{where}: label k3lab.node={c.labels.get('k3lab.node')}"


def _assert_lab_container(c, node, where: str) -> None:
    """Privileges, network, devices and mounts as planned (the sim's containers have none of them)."""
    __tracebackhide__ = True  # a failure shows the check, not this helper
    hc = c.attrs["HostConfig"]
    assert bool(hc["Privileged"]) == node.container.privileged, \
        f"{where}: privileged={hc['Privileged']}, planned {node.container.privileged}"
    assert hc["NetworkMode"] == node.container.network_mode, \
        f"{where}: network {hc['NetworkMode']}, planned {node.container.network_mode}"
    devices = {d["PathOnHost"] for d in hc.get("Devices") or []}
    missing_dev = [d for d in node.container.devices if d not in devices]
    assert not missing_dev, f"{where}: missing devices {missing_dev}"
    targets = {m["Destination"].rstrip("/") for m in c.attrs["Mounts"]}
    missing = [m.target for m in node.container.mounts if m.target.rstrip("/") not in targets]
    assert not missing, f"{where}: missing mounts {missing}"
