"""The ``sim`` target: every node a container on a private bridge network of one Docker engine, running
the same rendered scripts against the simulator's stand-ins (``launchers/sim``)."""
from __future__ import annotations

import ipaddress
import json
import time
from typing import TYPE_CHECKING, Any

import docker
from docker.types import IPAMConfig, IPAMPool

from k3lab import paths, settings
from k3lab.errors import EnvError
from k3lab.launch.backends import LABEL, remove_by_label
from k3lab.launch.endpoints import LOCAL_ENDPOINT, ClientPool, HostUnreachable, docker_client, local_client
from k3lab.launch.scope import RunScope
from k3lab.launch.targets.base import DockerTarget, Files, Removed
from k3lab.launch.targets.registry import register
from k3lab.model.plan import NodePlan, Plan, Stage

if TYPE_CHECKING:
    from k3lab.model.runs import RunState

FIXTURES = paths.FIXTURES
NEIGHBOURS = "/run/k3lab-sim/neighbours"  # the ip -batch file of the node's permanent neighbour entries


def sim_engine(plan: Plan) -> docker.DockerClient:
    """The one engine a sim run lives on: the nodes' common endpoint (unix, tcp or ssh)."""
    endpoints = {n.endpoint for n in plan.nodes}
    if len(endpoints) != 1:
        raise ValueError(f"the sim target runs every node on one Docker engine; inventory names {sorted(endpoints)}")
    endpoint = endpoints.pop()
    if endpoint == LOCAL_ENDPOINT:
        return local_client(timeout=120)
    return docker_client(endpoint, timeout=120)


def standin_env(plan: Plan) -> dict[str, str]:
    """What the stand-in engines read: their model load time, and the vLLM-Ascend version the plan's guide
    was validated on (the sim's engines, and the emulated lab's, which run the same stand-in)."""
    return {"K3SIM_LOAD_SECONDS": format(settings.current().sim_load_s, "g"),
            "K3SIM_VLLM_VERSION": "0.23.0" if "0.23.0" in plan.seed else "0.30.0"}


class _OneEngine(ClientPool):
    """The pool the shared teardown asks: every endpoint of a sim plan is the one engine."""

    def __init__(self, engine: docker.DockerClient) -> None:
        super().__init__()
        self.engine = engine

    def get(self, endpoint: str) -> docker.DockerClient:
        return self.engine


@register
class SimTarget(DockerTarget):
    """Every node is a container on a private bridge network on the local engine."""

    name = "sim"

    def __init__(self, plan: Plan, run_id: str, scope: RunScope, subnet: str, device_subnet: str,
                 faults: dict | None = None) -> None:
        super().__init__(plan, run_id, scope)
        # injected faults: {"hw": {node: node.json faults}, "shm": {node: size}, "hold_port": {node: port},
        #                   "edit": {node: [(file, sed expression)]}}
        self.faults = faults or {}
        self.engine = sim_engine(plan)
        self._pool = _OneEngine(self.engine)
        self.subnet = subnet
        self.device_subnet = device_subnet
        self.network_name = f"k3lab-{run_id}"
        self.image = ""
        self.host_mounts: list = []

    @classmethod
    def for_inventory(cls, plan: Plan, run_id: str, inv: Any, scope: RunScope, faults: dict | None = None) -> SimTarget:
        return cls(plan, run_id, scope, inv.sim.subnet, inv.sim.device_subnet, faults=faults)

    @property
    def pool(self) -> ClientPool:
        return self._pool

    @classmethod
    def down_all(cls, states: list[RunState]) -> dict[str, Removed]:
        """``k3lab down --all``: every container (and network) of a k3lab run on the local engine, recorded
        or not (a run whose run-state is gone still carries the label). An engine that does not answer raises,
        named with what to do (:func:`k3lab.launch.prereq.docker_engine`); so does a missing one while a
        simulator run is recorded. No engine socket and no simulator run recorded (a Kubernetes-only host) is
        nothing to remove: no engine ever ran a container there."""
        from k3lab.launch import prereq

        endpoint = prereq.local_endpoint()
        missing = prereq.docker_engine(endpoint)
        if missing and not states and (sock := prereq.unix_socket(endpoint)) is not None and not sock.exists():
            return {"": Removed(f"nothing: no local Docker engine ({endpoint}) and no simulator run recorded")}
        if missing:
            raise HostUnreachable(f"the local engine: needs {missing}")
        count = len(remove_by_label(local_client(), None))
        return {"": Removed(f"{count} container(s) of k3lab runs on the local engine ({endpoint})")}

    def client(self, node: NodePlan) -> docker.DockerClient:
        return self.engine

    # ------------------------------------------------------------------ before anything starts
    def refuse_to_start(self) -> None:
        """Another run on one of our subnets shares the engine: refuse (runs on other subnets may share it).
        So does a kernel whose neighbour table cannot hold the run: a limit that would fail a healthy run."""
        from k3lab.launch.simimage import neighbours

        if too_many := neighbours.warning([self.plan]):
            raise EnvError(f"cannot run {self.plan.scenario} on this kernel: {too_many}")
        # ignore_removed: another run sharing the engine (k3lab release) may remove a container between
        # the list and its inspect, which would otherwise fail this run's start with a 404
        live = self.engine.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
        taken, networked = self._runs_on_our_subnets()
        live = [c for c in live if c.labels.get(LABEL) in taken or c.labels.get(LABEL) not in networked]
        if live:
            runs = sorted({str(c.labels.get(LABEL)) for c in live})
            raise EnvError(f"run(s) {', '.join(runs)} still up on the local engine; "
                           f"'k3lab down --all' first (or 'k3lab down RUN')")

    def _runs_on_our_subnets(self) -> tuple[set[str | None], set[str | None]]:
        """(runs whose network holds one of our addresses, runs that have a network at all)."""
        ours = [ipaddress.ip_address(n.address) for n in self.plan.nodes if n.address]
        taken: set[str | None] = set()
        networked: set[str | None] = set()
        for net in self.engine.networks.list(filters={"label": LABEL}):
            label = (net.attrs.get("Labels") or {}).get(LABEL)
            networked.add(label)
            for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
                subnet = ipaddress.ip_network(cfg.get("Subnet", "0.0.0.0/0"), strict=False)
                if any(a in subnet for a in ours):
                    taken.add(label)
        return taken, networked

    def process_env(self) -> dict[str, str]:
        return standin_env(self.plan)

    def gate_timeout(self, stage: Stage) -> float:
        # the stand-ins start in seconds, so a stuck one is named sooner ($K3LAB_SIM_GATE_TIMEOUT)
        return min(float(stage.timeout_s), settings.current().sim_gate_timeout_s)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "network": self.network_name}

    # ------------------------------------------------------------------ the device network
    def pin_neighbours(self) -> None:
        """Every peer's device addresses as permanent neighbour entries in each node's namespace.

        The simulated devices are secondary addresses on the node NICs, and the kernel keeps one
        neighbour table for all namespaces, capped by gc_thresh3 (1024 by default): learnt entries for
        every device pair overflowed it on a stock kernel (k3_a3_pd: ~7,700), and pings and KV transfers
        were lost on a healthy deployment ("neighbour table overflow" in dmesg). Permanent entries are
        exempt from that cap (neigh_alloc's exempt_from_gc), so only the node NICs' own entries are learnt
        (:func:`k3lab.launch.simimage.neighbours.entries`). The MACs are the engine's, read through its API."""
        from k3lab.launch.simimage.image import sim_module

        node_init, hw = sim_module("node_init"), sim_module("hw")
        owned = {n.name: [a for a, _ in node_init.device_addresses(hw.Node(self.hardware(n)))] for n in self.plan.nodes}
        macs = {n: self.inspect(n)["NetworkSettings"]["Networks"][self.network_name]["MacAddress"] for n in owned}

        def pin(node: NodePlan) -> None:
            lines = [f"neigh replace {address} lladdr {macs[peer]} dev eth0 nud permanent"
                     for peer, addresses in owned.items() if peer != node.name for address in addresses if address]
            if not lines:
                return
            self.put(node, {NEIGHBOURS: ("\n".join(lines).encode() + b"\n", 0o644)})
            self.exec(node.name, ["ip", "-batch", NEIGHBOURS], timeout=60).check()

        self.parallel(pin, self.plan.nodes)

    # ------------------------------------------------------------------ the nodes
    def prepare(self) -> None:
        from k3lab.launch.simimage import image, vllm_ascend

        self.image = image.ensure(self.engine, vllm_ascend.version_for(self.plan.seed))
        self.host_mounts = image.host_mounts()
        net = ipaddress.ip_network(self.subnet)
        gateway = str(list(net.hosts())[0])
        self.touch(self.plan.nodes)  # the network carries the run label: the sweep removes it after the containers
        self.engine.networks.create(self.network_name, driver="bridge", labels={LABEL: self.run_id},
                                    ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=self.subnet, gateway=gateway)]))

    def container_kwargs(self, node: NodePlan) -> dict:
        return dict(image=self.image, name=f"k3lab-{self.run_id}-{node.name}", hostname=node.name)

    def create(self, node: NodePlan) -> None:
        self.touch([node])
        kwargs = self.container_kwargs(node)
        networking = self.engine.api.create_networking_config(
            {self.network_name: self.engine.api.create_endpoint_config(ipv4_address=node.address)})
        shm = self.faults.get("shm", {}).get(node.name, node.container.shm_size)
        host_config = self.engine.api.create_host_config(
            shm_size=shm, cap_add=["NET_ADMIN", "NET_RAW"], mounts=self.host_mounts,
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

    def hardware(self, node: NodePlan) -> dict[str, Any]:
        """The node's simulated hardware (its /etc/k3lab-sim/node.json): devices, addresses, faults."""
        from k3lab.launch.simimage.image import sim_hw

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
        return {"node": node.name, "platform": node.platform, "device_count": node.device_count,
                "host_ip": node.address, "nic": "eth0", "super_pod_id": int(pods.get(node.name, 0)),
                "server_index": index, "super_pods": super_pods, "hccs_net": str(dnet),
                "devices": devices, "faults": self.faults.get("hw", {}).get(node.name, {})}

    def stage_extra(self, node: NodePlan) -> Files:
        """Simulated hardware description and the small checkpoints for /root/.cache."""
        hw = self.hardware(node)
        files = {"/etc/k3lab-sim/node.json": (json.dumps(hw, indent=2).encode(), 0o644)}
        # the guide's image carries its vLLM / vLLM-Ascend versions as package metadata (pip show reads it)
        from k3lab.launch.versions import sim_package_files

        files.update(sim_package_files(self.plan.seed))
        for path in (FIXTURES / "checkpoints").rglob("*"):
            if path.is_file():
                rel = path.relative_to(FIXTURES / "checkpoints")
                files[f"/root/.cache/{rel}"] = (path.read_bytes(), 0o644)
        return files

    def after_start(self) -> None:
        self.pin_neighbours()
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
