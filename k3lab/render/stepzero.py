"""RUNBOOK step 0: every check of the host and hardware stages, each with the commands that prove it on a node by hand.

The checks come from their declarations, not from a list kept here: the host stage's
(:data:`k3lab.model.nodechecks.HOST_CHECKS`) and the hardware stage's (the marks of the suite's
``conformance/test_npu.py``, read by :func:`k3lab.model.checks.module_checks`). A check added to
either stage appears in step 0 with its id, MUST statement and remedy. :data:`PROCEDURES` says, per
check id, what an operator types on a node's host: the files, sysctls and tool queries the stage
itself reads (``k3lab.launch.hoststage._commands``, ``k3lab.conform.nodetools.commands``), with the
tools' real options (the guides' §3.2 loops). A check with no procedure still appears, saying so;
tests/unit/render/test_runbook.py fails on it, so it gets one.

Every value taken from the plan (paths, ports, endpoints, container names) is shell-quoted.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlparse

from k3lab import paths
from k3lab.model import nodechecks as nc
from k3lab.model.checks import HARDWARE_MODULE, CheckInfo, module_checks
from k3lab.model.plan import NodePlan, Plan

q = shlex.quote
Procedure = Callable[[Plan, NodePlan], list[str]]
STAGES = ("host", "hardware")


def stage_checks() -> dict[str, list[CheckInfo]]:
    """The checks of the host and hardware stages, each in its declaration order."""
    hardware = [c for c in module_checks(paths.CONFORMANCE / HARDWARE_MODULE) if c.stage == "hardware"]
    return {"host": list(nc.HOST_CHECKS), "hardware": hardware}


# ---------------------------------------------------------------------------------- helpers


def _devices(node: NodePlan, body: str) -> str:
    """The guides' per-device loop (``for i in {0..15}; do ...; done``), for the node's planned devices."""
    return f"for i in $(seq 0 {node.device_count - 1}); do {body}; done"


def _hccn(option: str) -> str:
    return f'{nc.HCCN_TOOL} -i "$i" {option}'


def _sources(node: NodePlan, container_paths: list[str]) -> list[tuple[str, str | None]]:
    """(container path, its host path or None when no mount holds it)."""
    return [(p, nc.host_path(node.container.mounts, p)) for p in container_paths]


def _unmounted(path: str) -> str:
    return f"# {path}: under no mount of the container (k3lab preflight: PF-MOUNT-PATHS)"


# ------------------------------------------------------------------------------- host stage


def _reach(plan: Plan, node: NodePlan) -> list[str]:
    url = urlparse(node.endpoint)
    if url.scheme == "ssh":  # the stage's paramiko session: the inventory's known_hosts, no password prompt
        argv = ["ssh", "-o", "BatchMode=yes", *(["-p", str(url.port)] if url.port else []),
                f"{url.username or 'root'}@{url.hostname}", "true"]
        return [" ".join(q(a) for a in argv) + f"   # {node.name}: exits 0"]
    prefix = "" if url.scheme == "unix" else f"DOCKER_HOST={q(node.endpoint)} "
    return [f"{prefix}docker info --format {q('{{.DockerRootDir}}')}   # {node.name}: the engine answers"]


def _driver(plan: Plan, node: NodePlan) -> list[str]:
    return [f"grep -H '^Version=' {q(nc.DRIVER_INFO)}   # the same Version= on every node",
            f"cat {q(nc.INSTALL_INFO)}   # exists; Driver_Install_Status=complete where it is set"]


def _firmware(plan: Plan, node: NodePlan) -> list[str]:
    return [f"grep -H '^Version=' {q(nc.FIRMWARE_INFO)}   # where the file exists: the same on every node"]


def _hccn_conf(plan: Plan, node: NodePlan) -> list[str]:
    test = f'grep -Eq "^[[:space:]]*address_$i[[:space:]]*=" {q(nc.HCCN_CONF)} || echo "no address_$i"'
    return [_devices(node, test) + "   # prints nothing"]


def _checkpoint(plan: Plan, node: NodePlan) -> list[str]:
    out = []
    for path, src in _sources(node, nc.model_paths(plan, node)):
        out.append("ls -1 -- " + " ".join(q(f"{src}/{n}") for n in nc.CHECKPOINT_FILES) if src else _unmounted(path))
    return out


def _checkpoint_same(plan: Plan, node: NodePlan) -> list[str]:
    out = []
    for path, src in _sources(node, nc.model_paths(plan, node)):
        out.append("sha256sum -- " + " ".join(q(f"{src}/{n}") for n in nc.DIGEST_FILES)
                   + "   # the same two sums on every node" if src else _unmounted(path))
    return out


def _model(plan: Plan, node: NodePlan) -> list[str]:
    if plan.expect.model_path not in nc.model_paths(plan, node):
        return []
    src = nc.host_path(node.container.mounts, plan.expect.model_path)
    if src is None:
        return [_unmounted(plan.expect.model_path)]
    topo = next(nc.topology(p) for p in node.all_processes() if p.kind == "engine")
    keys = '"(num_attention_heads|num_hidden_layers|max_position_embeddings)"'
    return [f"grep -E {q(keys)} {q(src + '/config.json')}",
            f"# TP {topo.tensor_parallel_size} divides num_attention_heads; PP {topo.pipeline_parallel_size}: its "
            f"layer partition sums to num_hidden_layers; --max-model-len {plan.expect.max_model_len} "
            "<= max_position_embeddings"]


def _ports(plan: Plan, node: NodePlan) -> list[str]:
    spans = nc.planned_spans(plan, node.name)
    if not spans:
        return []
    line = nc.reserve_line([(lo, hi) for lo, hi, _ in spans])
    res = nc.RESERVED_PORTS
    # -w replaces the reserved set: what is reserved already is kept; the file makes it survive a reboot
    return [f"sysctl {nc.PORT_RANGE} {res}   # the planned ports below: outside the range or reserved",
            f'cur=$(sysctl -n {res}); sysctl -w "{res}=${{cur:+$cur,}}"{q(line)}',
            f"sysctl -n {res} | sed 's/^/{res} = /' > {q(nc.SYSCTL_FILE)}"]


def _disk(plan: Plan, node: NodePlan) -> list[str]:
    cache = nc.host_path(node.container.mounts, "/root/.cache")
    root = "\"$(docker info --format '{{.DockerRootDir}}')\""
    where = " ".join([root, *([q(cache)] if cache else [])])
    return [f"df -Pk -- {where}   # Available: {nc.MIN_FREE_BYTES >> 30} GiB or more on each"]


def _memory(plan: Plan, node: NodePlan) -> list[str]:
    return [f"grep '^MemAvailable:' /proc/meminfo   # at least the container's shm, {node.container.shm_size}"]


def _docker(plan: Plan, node: NodePlan) -> list[str]:
    return [f"docker version --format '{{{{.Server.Version}}}}'   # {nc.MIN_DOCKER[0]}.{nc.MIN_DOCKER[1]} or newer"]


# --------------------------------------------------------------------------- hardware stage


def _npu_smi(plan: Plan, node: NodePlan) -> list[str]:
    per = "die" if node.platform == "A3" else "NPU"
    return [f"{nc.NPU_SMI} info   # {node.device_count} health rows (one per {per}), every Health OK"]


def _links(plan: Plan, node: NodePlan) -> list[str]:
    return [_devices(node, _hccn("-link -g")) + "   # link status: UP"]


def _net_health(plan: Plan, node: NodePlan) -> list[str]:
    return [_devices(node, _hccn("-net_health -g")) + "   # net health status: Success"]


def _addresses(plan: Plan, node: NodePlan) -> list[str]:
    if node.platform == "A3":  # the driver assigns the vNIC; HCCS peers in one super pod are reached on it
        return [_devices(node, _hccn("-vnic -g")) + "   # vnic link status: UP, vnic ipaddr not 0.0.0.0"]
    return [_devices(node, _hccn("-ip -g")) + "   # ipaddr: and netmask: set"]


def _tls(plan: Plan, node: NodePlan) -> list[str]:
    return [_devices(node, _hccn("-tls -g") + " | grep switch") + "   # the same tls switch[S] on every device of every node"]


def _pings(plan: Plan, node: NodePlan) -> list[str]:
    """Each device pings the same device of the next node in a ring, as the stage's round 1 does with
    rotation 0: every device sends and every node pair of the ring is crossed (``k3lab check`` pings all)."""
    if len(plan.nodes) < 2:
        return []
    ring = " -> ".join([*(n.name for n in plan.nodes), plan.nodes[0].name])
    a3 = node.platform == "A3"
    option, field, verb = ("-vnic -g", "vnic ipaddr", "-hccs_ping") if a3 else ("-ip -g", "ipaddr", "-ping")
    read = _devices(node, _hccn(option) + f" | sed -n {q(f's/^{field}: *//p')}")
    ping = f'i=0; for a in $PEER; do {nc.HCCN_TOOL} -i "$i" {verb} -g address "$a"; i=$((i+1)); done'
    loss = "0.00% packets loss, L1 plane check result = 0x0" if a3 else "0.00% packet loss"
    out = [f"# on the next node of the ring {ring}: its device addresses, device 0 first", read,
           "# here, with PEER set to what that printed (PEER='A0 A1 ...'):", f"{ping}   # {loss}"]
    if a3:
        out.append("# a peer in another super pod (npu-smi info -t spod-info): its -ip -g addresses "
                   "(sed 's/^ipaddr: *//') and -ping")
    return out


def _lldp(plan: Plan, node: NodePlan) -> list[str]:
    return [_devices(node, _hccn("-lldp -g") + " | grep Ifname") + "   # one Ifname per device"]


def _netdetect_gateway(plan: Plan, node: NodePlan) -> list[str]:
    return [_devices(node, _hccn("-netdetect -g")) + "   # netdetect address: set",
            _devices(node, _hccn("-gateway -g")) + "   # default gateway: set"]


def _container_hccn_conf(plan: Plan, node: NodePlan) -> list[str]:
    test = _hccn_conf(plan, node)[0].split("   #")[0]
    return [f"docker exec {q(node.container.name)} sh -c {q(test)}   # after step 1: prints nothing"]


def _spod(plan: Plan, node: NodePlan) -> list[str]:
    return [f"{nc.SPOD}   # Super Pod ID: ..."] if node.platform == "A3" else []


PROCEDURES: dict[str, Procedure] = {
    "HST-REACH": _reach, "HST-DRIVER": _driver, "HST-FIRMWARE": _firmware, "HST-HCCN-CONF": _hccn_conf,
    "HST-CHECKPOINT": _checkpoint, "HST-CHECKPOINT-SAME": _checkpoint_same, "HST-MODEL": _model,
    "HST-PORTS": _ports, "HST-DISK": _disk, "HST-MEMORY": _memory, "HST-DOCKER": _docker,
    "npu.test_npu_smi_devices_healthy": _npu_smi, "hccl.test_hccn_links_up": _links,
    "hccl.test_hccn_net_health": _net_health, "hccl.test_hccn_device_addresses": _addresses,
    "hccl.test_hccn_tls_consistent": _tls, "hccl.test_cross_node_reachability": _pings,
    "hccl.test_hccn_lldp": _lldp, "hccl.test_hccn_netdetect_gateway": _netdetect_gateway,
    "hccl.test_hccn_conf_names_every_device": _container_hccn_conf, "hccl.test_spod_info": _spod,
}
# run from the operator's machine, not on the node: one block for all nodes
FROM_HERE = {"HST-REACH"}


# ---------------------------------------------------------------------------------- step 0


@dataclass
class Group:
    """Nodes that run the same commands."""

    nodes: list[str]
    lines: list[str]


@dataclass
class CheckSteps:
    info: CheckInfo
    declared: bool  # False: no procedure in PROCEDURES (the check shows its MUST and remedy only)
    groups: list[Group]  # nodes with commands, in plan order
    na: list[str]  # nodes where the check has nothing to run (e.g. spod-info off A3, no ports planned)
    here: bool = False  # run from the operator's machine (FROM_HERE)

    def where(self, group: Group, every: list[str]) -> str:
        if self.here:
            return "this machine"
        return "every node" if group.nodes == every else ", ".join(group.nodes)


def _groups(plan: Plan, proc: Procedure) -> tuple[list[Group], list[str]]:
    groups: dict[tuple[str, ...], Group] = {}
    na = []
    for node in plan.nodes:
        lines = proc(plan, node)
        if not lines:
            na.append(node.name)
            continue
        groups.setdefault(tuple(lines), Group([], lines)).nodes.append(node.name)
    return list(groups.values()), na


def steps(plan: Plan) -> dict[str, list[CheckSteps]]:
    """Per stage (host, hardware), every check it declares with its commands grouped by node."""
    out: dict[str, list[CheckSteps]] = {}
    for stage, checks in stage_checks().items():
        out[stage] = []
        for info in checks:
            proc = PROCEDURES.get(info.id)
            groups, na = _groups(plan, proc) if proc else ([], [])
            here = info.id in FROM_HERE
            if here and groups:
                groups = [Group([n for g in groups for n in g.nodes], [line for g in groups for line in g.lines])]
            out[stage].append(CheckSteps(info, proc is not None, groups, na, here))
    return out


def commands(plan: Plan) -> list[tuple[str, str, str]]:
    """(check id, node, command line) for every step-0 line of ``plan`` (comments left out)."""
    return [(c.info.id, node, line) for stage in steps(plan).values() for c in stage for g in c.groups
            for node in g.nodes for line in g.lines if not line.startswith("#")]
