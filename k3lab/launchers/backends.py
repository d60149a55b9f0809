"""How the kit reaches nodes: the local Docker engine (sim) or each node's own endpoint (lab).

A backend creates one container per planned node, stages files through the Docker API, runs
commands with ``docker exec`` and removes everything by the run label. What to run and check is
the plan's business, not the backend's (testinfra keeps the same split).
"""
from __future__ import annotations

import io
import ipaddress
import os
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import PurePosixPath

import docker
from docker.types import IPAMConfig, IPAMPool, Mount

from k3lab import paths
from k3lab.launchers.endpoints import (
    HOST_DEADLINE_S,
    LOCAL_ENDPOINT,
    ClientPool,
    CommandResult,
    HostUnreachable,
    SshOptions,
    describe,
    docker_client,
    docker_exec,
    each_host,
    local_client,
    reason,
    unreachable_error,
)
from k3lab.model.plan import NodePlan, Plan

LABEL = "k3lab.run"
FIXTURES = paths.FIXTURES
# Per-host budgets of the kit-side operations (each host in parallel). Force-removing a node's
# container kills its processes: seconds on a healthy host; 90 s leaves room for a slow one.
TEARDOWN_DEADLINE_S = float(os.environ.get("K3LAB_TEARDOWN_DEADLINE", "90"))


def tar_of(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for path, (data, mode) in sorted(files.items()):
            rel = path.lstrip("/")
            parts = PurePosixPath(rel).parents
            for parent in reversed(list(parts)[:-1]):
                if str(parent) not in dirs:
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                    tar.addfile(info)
                    dirs.add(str(parent))
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Backend:
    target = "abstract"
    # per-host deadline of the kit-side reads (evidence, versions): a lab's hosts can break one by one;
    # the sim's one engine is the kit's own (None: as long as it takes)
    host_deadline: float | None = None

    def __init__(self, plan: Plan, run_id: str) -> None:
        self.plan = plan
        self.run_id = run_id
        self.containers: dict[str, docker.models.containers.Container] = {}
        self.left: dict[str, str] = {}  # nodes the last teardown could not reach: node -> endpoint

    # --- per-target
    def client(self, node: NodePlan) -> docker.DockerClient:
        raise NotImplementedError

    def container_kwargs(self, node: NodePlan) -> dict:
        raise NotImplementedError

    def prepare(self) -> None:
        """Target-wide setup before containers (image, network)."""

    def cleanup_target(self) -> None:
        """Target-wide teardown after containers."""

    def stage_extra(self, node: NodePlan) -> dict[str, tuple[bytes, int]]:
        return {}

    def after_start(self) -> None:
        """Target hook once every container runs, before the first stage."""

    # --- shared
    def labels(self, node: NodePlan) -> dict[str, str]:
        return {**node.container.labels, LABEL: self.run_id}

    def create(self, node: NodePlan) -> None:
        client = self.client(node)
        kwargs = self.container_kwargs(node)
        self.containers[node.name] = client.containers.create(detach=True, labels=self.labels(node), **kwargs)

    def start(self, node: NodePlan) -> None:
        self.containers[node.name].start()

    def put(self, node: NodePlan, files: dict[str, tuple[bytes, int]]) -> None:
        self.containers[node.name].put_archive("/", tar_of(files))

    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        container = self.containers[node]
        return docker_exec(container.client.api, container.id, cmd, node, env, timeout=timeout)

    def exec_detached(self, node: str, cmd: list[str], env: dict[str, str], workdir: str) -> None:
        self.containers[node].exec_run(cmd, environment=env, workdir=workdir, detach=True)

    def remove_run(self) -> list[str]:
        """Remove every container of this run, in reverse plan order, then target resources."""
        removed = []
        for node in reversed(self.plan.nodes):
            removed += remove_by_label(self.client(node), self.run_id)
        self.cleanup_target()
        return removed

    def parallel(self, fn, nodes: list[NodePlan], deadline: float | None = None) -> dict[str, str]:
        """``fn(node)`` on every node at once. Without a deadline (bring-up) the first error is raised;
        with one, the nodes that failed or did not answer in time are returned, each named with its
        host and why ("p1 (10.0.0.2): no answer within 60 s"), and the others proceed."""
        if deadline is None:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(fn, nodes))
            return {}
        _, failures = each_host(fn, {n.name: n for n in nodes}, deadline)
        return {n.name: f"{n.name} ({describe(n.endpoint)}): {reason(failures[n.name])}"
                for n in nodes if n.name in failures}


def remove_by_label(client: docker.DockerClient, run_id: str | None) -> list[str]:
    """Remove a run's containers, then its networks, on one engine (every k3lab run's when ``run_id``
    is None): the one teardown of up, down RUN and down --all. Nothing without the label is touched."""
    flt = {"label": f"{LABEL}={run_id}" if run_id else LABEL}
    removed = []
    # ignore_removed: a run sharing the engine may remove its containers meanwhile
    for c in client.containers.list(all=True, filters=flt, ignore_removed=True):
        try:
            c.remove(force=True)
            removed.append(c.name)
        except docker.errors.NotFound:
            pass
    for net in client.networks.list(filters=flt):
        try:
            net.remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # still in use: say so, the containers are gone already
            print(f"k3lab: network {net.name} not removed: {exc}", file=sys.stderr)
    return removed


def teardown(pool: ClientPool, run_id: str, endpoints: dict[str, str],
             deadline: float = TEARDOWN_DEADLINE_S) -> tuple[list[str], dict[str, str]]:
    """Remove a run from every endpoint at once (``endpoints``: node -> endpoint), each within ``deadline``.

    The one teardown of a lab run (up's failure path, cycle, down RUN): returns the containers removed
    and the nodes left behind (node -> endpoint), each named on stderr with its host and why. A host
    that does not answer never keeps the run on the others."""
    nodes_of: dict[str, list[str]] = {}
    for node, ep in endpoints.items():
        nodes_of.setdefault(ep, []).append(node)
    answers, failures = each_host(lambda ep: remove_by_label(pool.get(ep), run_id), {ep: ep for ep in nodes_of},
                                  deadline)
    for ep, exc in failures.items():
        pool.failed(ep, exc)
        print(f"k3lab: run {run_id} not removed from {', '.join(nodes_of[ep])} ({describe(ep)}): {reason(exc)}",
              file=sys.stderr, flush=True)
    return ([name for ep in nodes_of if ep in answers for name in answers[ep]],
            {node: ep for ep in failures for node in nodes_of[ep]})


def sim_engine(plan: Plan) -> docker.DockerClient:
    """The one engine a sim run lives on: the nodes' common endpoint (unix, tcp or ssh)."""
    endpoints = {n.endpoint for n in plan.nodes}
    if len(endpoints) != 1:
        raise ValueError(f"the sim target runs every node on one Docker engine; inventory names {sorted(endpoints)}")
    endpoint = endpoints.pop()
    if endpoint == LOCAL_ENDPOINT:
        return local_client(timeout=120)
    return docker_client(endpoint, timeout=120)


class SimBackend(Backend):
    """Every node is a container on a private bridge network on the local engine."""

    target = "sim"

    def __init__(self, plan: Plan, run_id: str, subnet: str, device_subnet: str, faults: dict | None = None) -> None:
        super().__init__(plan, run_id)
        # injected faults: {"hw": {node: node.json faults}, "shm": {node: size}, "hold_port": {node: port},
        #                   "edit": {node: [(file, sed expression)]}}
        self.faults = faults or {}
        self.engine = sim_engine(plan)
        self.subnet = subnet
        self.device_subnet = device_subnet
        self.network_name = f"k3lab-{run_id}"
        self.image = ""

    def client(self, node: NodePlan) -> docker.DockerClient:
        return self.engine

    def prepare(self) -> None:
        from k3lab.launchers.sim import image, vllm_ascend

        self.image = image.ensure(self.engine, vllm_ascend.version_for(self.plan.seed))
        self.host_mounts = image.host_mounts()
        net = ipaddress.ip_network(self.subnet)
        gateway = str(list(net.hosts())[0])
        self.engine.networks.create(self.network_name, driver="bridge", labels={LABEL: self.run_id},
                                    ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=self.subnet, gateway=gateway)]))

    def container_kwargs(self, node: NodePlan) -> dict:
        networking = self.engine.api.create_networking_config(
            {self.network_name: self.engine.api.create_endpoint_config(ipv4_address=node.address)})
        return dict(image=self.image, name=f"k3lab-{self.run_id}-{node.name}", hostname=node.name,
                    shm_size=node.container.shm_size, cap_add=["NET_ADMIN", "NET_RAW"], mounts=self.host_mounts,
                    network=self.network_name, networking_config=networking)

    def create(self, node: NodePlan) -> None:
        kwargs = self.container_kwargs(node)
        networking = kwargs.pop("networking_config")
        kwargs.pop("network")
        shm = self.faults.get("shm", {}).get(node.name, kwargs.pop("shm_size"))
        host_config = self.engine.api.create_host_config(
            shm_size=shm, cap_add=kwargs.pop("cap_add"), mounts=kwargs.pop("mounts"),
            network_mode=self.network_name, sysctls=self.reserved_ports(node))
        created = self.engine.api.create_container(
            image=kwargs["image"], name=kwargs["name"], hostname=kwargs["hostname"], labels=self.labels(node),
            host_config=host_config, networking_config=networking, detach=True)
        self.containers[node.name] = self.engine.containers.get(created["Id"])

    def reserved_ports(self, node: NodePlan) -> dict[str, str]:
        """The node's planned ports reserved in its own network namespace, as HST-PORTS asks of a lab host:
        no outgoing connection (a client of another engine, ZMQ) takes a KV port before its owner binds it.
        Fault key "unreserved_ports": [node] leaves a node with the kernel's default."""
        from k3lab.preflight import hostchecks

        if node.name in self.faults.get("unreserved_ports", []):
            return {}
        line = hostchecks.reserve_line([(lo, hi) for lo, hi, _ in hostchecks.planned_spans(self.plan, node.name)])
        return {hostchecks.RESERVED_PORTS: line} if line else {}

    def stage_extra(self, node: NodePlan) -> dict[str, tuple[bytes, int]]:
        """Simulated hardware description and the small checkpoints for /root/.cache."""
        import json

        from k3lab.launchers.sim.image import sim_hw

        index = [n.name for n in self.plan.nodes].index(node.name)
        dnet = ipaddress.ip_network(self.device_subnet)
        base = int(dnet.network_address)
        devices = []
        for d in range(node.device_count):
            devices.append({"id": d, "ip": str(ipaddress.ip_address(base + (1 << 8) * (index + 1) + 10 + d)),
                            "netmask": str(dnet.netmask), "gateway": str(ipaddress.ip_address(base + 1))})
        # fault key "super_pod": {node: id} places nodes in other super pods (default: all in pod 0).
        # The server index is the node's place in the plan: unique, so no two vNICs share an address
        # (the driver derives them, 192.<server>.<2+die>.<199-device>) and their carriers in the
        # device subnet (HCCS on the sim's network) never collide.
        pods = self.faults.get("super_pod", {})
        super_pods = {sim_hw().vnic_address(i, d): int(pods.get(n.name, 0))
                      for i, n in enumerate(self.plan.nodes) for d in range(n.device_count)}
        hw = {"node": node.name, "platform": node.platform, "device_count": node.device_count,
              "host_ip": node.address, "nic": "eth0", "super_pod_id": int(pods.get(node.name, 0)),
              "server_index": index, "super_pods": super_pods, "hccs_net": str(dnet),
              "devices": devices, "faults": self.faults.get("hw", {}).get(node.name, {})}
        files = {"/etc/k3lab-sim/node.json": (json.dumps(hw, indent=2).encode(), 0o644)}
        # the guide's image carries its vLLM / vLLM-Ascend versions as package metadata (pip show reads it)
        from k3lab.launchers.versions import sim_package_files

        files.update(sim_package_files(self.plan.seed))
        for path in (FIXTURES / "checkpoints").rglob("*"):
            if path.is_file():
                rel = path.relative_to(FIXTURES / "checkpoints")
                files[f"/root/.cache/{rel}"] = (path.read_bytes(), 0o644)
        return files


    def after_start(self) -> None:
        # "edit": a wrong script on a node, as if a person copied the wrong template
        for node, exprs in self.faults.get("edit", {}).items():
            for path, expr in exprs:
                code, out = self.containers[node].exec_run(["sed", "-i", "-e", expr, path])
                if code != 0:
                    raise RuntimeError(f"fault edit on {node} failed: {out.decode(errors='replace')}")
        for node, port in self.faults.get("hold_port", {}).items():
            hold = (f"import socket,time; s=socket.socket(); s.bind(('0.0.0.0',{int(port)})); s.listen(); "
                    "time.sleep(86400)")
            self.containers[node].exec_run(["python3", "-S", "-c", hold], detach=True)
        if self.faults.get("hold_port"):
            time.sleep(0.5)


class LabBackend(Backend):
    """Real nodes: each node's own Docker endpoint, the documented docker run."""

    target = "lab"
    host_deadline = HOST_DEADLINE_S

    def __init__(self, plan: Plan, run_id: str, ssh: SshOptions | None = None) -> None:
        super().__init__(plan, run_id)
        self.ssh = ssh or SshOptions()
        # ssh:// goes through paramiko, which verifies host keys against known_hosts (never auto-adds)
        self.pool = ClientPool(self.ssh)

    def client(self, node: NodePlan) -> docker.DockerClient:
        return self.pool.get(node.endpoint)

    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        """As on any backend; a host that stops answering is named (node and host) and remembered, so
        gates, liveness and evidence fail at once on it instead of waiting out a timeout each."""
        endpoint = self.plan.node(node).endpoint
        try:
            self.pool.get(endpoint)  # refuses at once a host that failed before
            return super().exec(node, cmd, env, timeout)
        except Exception as exc:
            if not unreachable_error(exc):
                raise
            self.pool.failed(endpoint, exc)
            raise HostUnreachable(f"{node} ({describe(endpoint)}) does not answer: {reason(exc)}") from None

    def remove_run(self) -> list[str]:
        """Every endpoint of the plan at once, containers carrying this run's label only; the nodes it
        could not reach are kept in ``left`` (the run-state records them for ``k3lab down RUN``)."""
        removed, self.left = teardown(self.pool, self.run_id, {n.name: n.endpoint for n in self.plan.nodes})
        return removed

    def container_kwargs(self, node: NodePlan) -> dict:
        c = node.container
        return dict(image=c.image, name=c.name, command=c.command, shm_size=c.shm_size, privileged=c.privileged,
                    network_mode=c.network_mode, devices=[f"{d}:{d}" for d in c.devices],
                    mounts=[Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                            for m in c.mounts])
