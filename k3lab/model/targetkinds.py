"""What each target is, as data: the facts the renderer, preflight, reports and the suite need about where a
plan runs, so none of them branches on a target's name.

The target implementations (:mod:`k3lab.launch.targets`) say how to create, reach and tear down; this
module, in the model layer below them, says what the layers below the launchers may rely on. A new target
(Kubernetes) adds one :class:`TargetKind` here and one module there, and touches no consumer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from k3lab.errors import UsageError


@dataclass(frozen=True)
class TargetKind:
    name: str
    where: str  # how the CLI names it: "the simulator", "a lab"
    description: str  # how the RUNBOOK names it
    # the nodes are real hosts with the inventory's addresses, mounts and host networking; a lab profile may
    # adapt the containers (k3lab.render.profiles); the mount and checkpoint checks apply
    real_hosts: bool
    # no NPUs and no weights: measured numbers are not comparable with a lab's (no baselines), the
    # checkpoint config comes from the simulator's fixtures, live faults can be injected
    simulated: bool
    # the target puts every node on a subnet of its own (the inventory's sim.subnet), so node addresses
    # must be host addresses of it
    own_subnet: bool
    # the target names the containers itself (k3lab-<run>-<node>): an inventory's container names cannot collide
    names_containers: bool
    # an inventory is required: without one the default (simulator) addresses would pass for a lab's
    needs_inventory: bool
    # how the guides' docker run changes on this target, with why (listed in every plan's deviations)
    deviations: tuple[tuple[str, str, str], ...] = field(default=())
    # render also writes Kubernetes manifests (OUT/k8s/) from the inventory's k8s section, which it requires
    manifests: bool = False
    # k3lab up / cycle can bring a plan up there; when not, they refuse with this remedy (exit 2)
    live: str | None = None
    # the hosts and their hardware are proven in stages of their own before any engine (up --stages-only)
    host_stages: bool = False


SIM_DEVIATIONS = (
    ("sim-network", "bridge network with a static IP per node instead of --net=host",
     "each simulated node needs its own address on one machine"),
    ("sim-privileged", "no --privileged", "the container runtime here refuses privileged containers"),
    ("sim-devices", "no --device /dev/davinci*; driver and tool mounts come from the sim image",
     "there are no NPUs; stand-ins answer npu-smi, hccn_tool and the engine from a simulated device table"),
    ("sim-cache", "/root/.cache is staged from fixtures/ (small checkpoints) instead of a host mount",
     "the sim has no model weights; files are copied through the Docker API"),
    ("sim-net-admin", "adds --cap-add NET_ADMIN", "to give simulated NPU devices their own addresses"),
)

K8S_DEVIATIONS = (
    ("k8s-pods", "each node's container is a pod (a LeaderWorkerSet per role group; MetaService and proxy pods "
     "of their own) pinned to the node's host, instead of docker run; the pod stages the node's scripts from a "
     "ConfigMap and starts its processes itself",
     "Kubernetes schedules the containers; vllm-ascend's own multi-node nightly runs the same way (LWS)"),
    ("k8s-devices", "NPUs come from the device plugin's resource (k8s.npu_resource, devices per node) instead of "
     "--device /dev/davinci*", "the device plugin owns the devices on a Kubernetes node"),
    ("k8s-shm", "/dev/shm is an in-memory emptyDir with a size limit (k8s.shm_size, the guides' 1g by default) "
     "instead of --shm-size", "a pod has no --shm-size"),
    ("k8s-weights", "the checkpoint directory is the inventory's k8s.weights volume (a PVC or a host path) "
     "instead of -v /root/.cache:/root/.cache", "pods mount volumes, not arbitrary host paths"),
)

KINDS: dict[str, TargetKind] = {k.name: k for k in (
    TargetKind("sim", "the simulator", "the simulator", real_hosts=False, simulated=True, own_subnet=True, names_containers=True,
               needs_inventory=False, deviations=SIM_DEVIATIONS),
    TargetKind("lab", "a lab", "a lab (each node its own Docker endpoint)", real_hosts=True, simulated=False,
               own_subnet=False, names_containers=False, needs_inventory=True, host_stages=True),
    TargetKind("k8s", "Kubernetes", "Kubernetes (pods with host networking on the inventory's nodes, created "
               "through the API by k3lab up, or by kubectl apply from the manifests)", real_hosts=True,
               simulated=False, own_subnet=False, names_containers=True, needs_inventory=True,
               deviations=K8S_DEVIATIONS, manifests=True),
)}

DEFAULT = "sim"  # without --target and without an inventory
WITH_INVENTORY = "lab"  # without --target, given an inventory


def check_stages_only(target: str, stages_only: bool, keep: bool = False) -> None:
    """``up --stages-only``'s usage errors (exit 2), which the CLI asks before any prerequisite (exit 3)."""
    if not stages_only:
        return
    if keep:
        raise UsageError("--stages-only tears down after the stages; --keep has nothing to keep")
    if not kind(target).host_stages:
        raise UsageError("--stages-only proves a lab's hosts and hardware: give the lab inventory (-i lab.yaml)")


def kind(name: str) -> TargetKind:
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(f"unknown target {name!r}; known: {', '.join(sorted(KINDS))}") from None
