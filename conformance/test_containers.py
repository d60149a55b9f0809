"""Containers: every planned container exists, runs, has not restarted, and matches the plan."""
from __future__ import annotations

import docker

from conformance.plugin import conformance

KIND = "environment"  # default class of a failure here


def _container(state, node):
    return docker.from_env().containers.get(state["containers"][node.name])


@conformance(area="containers", must="Every planned node container MUST be running and MUST NOT have restarted.")
def test_container_running(node, state):
    c = _container(state, node)
    assert c.status == "running", f"{node.name}: container {c.name} is {c.status}, expected running"
    restarts = c.attrs["RestartCount"]
    assert restarts == 0, f"{node.name}: container restarted {restarts} time(s); check its logs"


@conformance(area="containers", must="Each container MUST have the planned shm size, privileges, network, devices and mounts.")
def test_container_matches_plan(node, state, plan):
    c = _container(state, node)
    hc = c.attrs["HostConfig"]
    want_shm = {"1g": 1 << 30}.get(node.container.shm_size)
    assert hc["ShmSize"] == want_shm, f"{node.name}: shm {hc['ShmSize']} bytes, planned {node.container.shm_size}"
    if plan.target == "lab":
        assert hc["Privileged"] is True, f"{node.name}: not privileged"
        assert hc["NetworkMode"] == "host", f"{node.name}: network {hc['NetworkMode']}, planned host"
        targets = {m["Destination"].rstrip("/") for m in c.attrs["Mounts"]}
        missing = [m.target for m in node.container.mounts if m.target.rstrip("/") not in targets]
        assert not missing, f"{node.name}: missing mounts {missing}"
    else:
        nets = c.attrs["NetworkSettings"]["Networks"]
        addr = next(iter(nets.values()))["IPAddress"]
        assert addr == node.address, f"{node.name}: address {addr}, planned {node.address}"
    assert c.labels.get("k3lab.node") == node.name
