"""The host stage's checks as declared, and what they read of the plan: the model layer's copy, so the
render layer can list them (RUNBOOK step 0) without importing the preflight layer that judges them.

The host stage (``k3lab.launch.hoststage``) reads these files and sysctls on each node's host;
:mod:`k3lab.preflight.hostchecks` judges what it read. The hardware stage's checks are the suite's
(``conformance/test_npu.py``, read from their marks by :func:`k3lab.model.checks.module_checks`).
"""
from __future__ import annotations

import functools
from pathlib import PurePosixPath

from k3lab.model.checks import CheckInfo
from k3lab.model.plan import Mount, NodePlan, Plan, Topology

DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
INSTALL_INFO = "/etc/ascend_install.info"
HCCN_CONF = "/etc/hccn.conf"
PORT_RANGE = "net.ipv4.ip_local_port_range"
RESERVED_PORTS = "net.ipv4.ip_local_reserved_ports"
SYSCTL_FILE = "/etc/sysctl.d/90-k3lab.conf"  # where HST-PORTS' remedy persists the reservation
# the tools the guides' docker run mounts from the host (§4.1), so the host and the container run the same binary
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
NPU_SMI = "npu-smi"
SPOD = "npu-smi info -t spod-info -i 0 -c 0"
# the checkpoint directory the guides ask for: "the model configuration, tokenizer, image processor, and
# model weight files" (K3 §2, K3.1 Pro §2), under the Hugging Face file names vLLM reads
CHECKPOINT_FILES = {"config.json": "model configuration", "tokenizer_config.json": "tokenizer",
                    "preprocessor_config.json": "image processor", "model.safetensors.index.json": "weight index"}
DIGEST_FILES = ("config.json", "model.safetensors.index.json")
MIN_DOCKER = (20, 10)  # Docker API 1.41, the oldest engine the kit speaks to
MIN_FREE_BYTES = 20 << 30  # logs, compile and download caches of one node


def _host(id: str, area: str, must: str, remedy: str) -> CheckInfo:
    # source: where the check is judged (k3lab checks and golden/checks.json name it so)
    return CheckInfo(id=id, stage="host", area=area, must=must, remedy=remedy, source="k3lab.preflight.hostchecks")


HOST_CHECKS = [
    _host("HST-REACH", "endpoints", "The host stage MUST reach every node's host through its endpoint within its deadline.",
          "check the node's sshd / Docker engine (k3lab preflight -i lab.yaml names the endpoint)."),
    _host("HST-DRIVER", "driver", f"{DRIVER_INFO} (Version=) and {INSTALL_INFO} MUST exist on every node, the driver "
          "installed completely, with ONE driver version across the scenario's nodes.",
          "install the same Ascend driver (HDK) on every node; the odd node is named with its version."),
    _host("HST-FIRMWARE", "driver", f"Where {FIRMWARE_INFO} exists, every node MUST run the same firmware version.",
          "upgrade the odd node's firmware with the HDK package the others run."),
    _host("HST-HCCN-CONF", "hccl", f"{HCCN_CONF} MUST exist on every node and name every planned device (address_N).",
          "configure the device addresses with hccn_tool -i N -ip -s address A netmask M (it writes "
          "/etc/hccn.conf), for every N the plan uses."),
    _host("HST-CHECKPOINT", "model", "Every node MUST hold the checkpoint directory the scripts name, with the model "
          "configuration, tokenizer, image processor and weight index the guide lists.",
          "copy the complete checkpoint directory (same revision) to that path on the node, or to the "
          "shared filesystem an inventory mounts entry names (the finding gives the host path)."),
    _host("HST-CHECKPOINT-SAME", "model", "Every node MUST hold the SAME checkpoint: config.json and the weight index "
          "hash alike on all nodes.",
          "copy the checkpoint from one source to every node (the odd node is named with its digest)."),
    _host("HST-MODEL", "model", "The node's own config.json MUST fit the plan: TP divides the attention heads, the "
          "PP layer partition sums to the layer count, --max-model-len within max_position_embeddings.",
          "pick TP, PP partition and --max-model-len for the checkpoint the nodes hold."),
    _host("HST-PORTS", "ranks-ports", f"Every planned port MUST lie outside {PORT_RANGE} or be in {RESERVED_PORTS}: "
          "otherwise any outgoing connection can take it and its owner fails with 'Address already in use'.",
          f"reserve them on the node: sysctl -w {RESERVED_PORTS}=<ports> and the same "
          f"line in {SYSCTL_FILE} (the finding prints the line)."),
    _host("HST-DISK", "resources", "The filesystems of the Docker root (container logs) and the cache mount MUST have "
          f"{MIN_FREE_BYTES >> 30} GiB free.", "free space on the node (old images, logs, caches)."),
    _host("HST-MEMORY", "resources", "MemAvailable MUST cover the shm the plan asks for the node's container.",
          "stop what holds the node's memory, or lower the container's shm."),
    _host("HST-DOCKER", "endpoints", f"The node's Docker engine MUST be {MIN_DOCKER[0]}.{MIN_DOCKER[1]} or newer.",
          "upgrade Docker on the node."),
]


@functools.lru_cache(maxsize=256)
def _parts(path: str) -> tuple[str, ...]:
    return PurePosixPath(path).parts


def host_path(mounts: list[Mount], path: str) -> str | None:
    """Where a container path lives on the host: the longest mount target containing it."""
    pure = PurePosixPath(path)
    p, absolute = pure.parts, pure.is_absolute()
    best: Mount | None = None
    best_len = 0
    for m in mounts:
        # the target holds the path when its parts begin the path's (what ``target in p.parents`` asks;
        # building the parents per mount was most of a render's RUNBOOK step 0); "." holds relative paths only
        target = _parts(m.target.rstrip("/") or "/")
        holds = p[:len(target)] == target and (bool(target) or not absolute)
        if holds and (best is None or len(m.target) > len(best.target)):
            best, best_len = m, len(target)
    if best is None:
        return None
    rest = p[best_len:]
    return str(PurePosixPath(best.source, *rest)) if rest else best.source


def topology(proc) -> Topology:
    """An engine's topology; a plan written before the renderer recorded topologies has none: its command is read."""
    return proc.topology if proc.topology is not None else Topology.of(proc.argv)


def model_paths(plan: Plan, node: NodePlan) -> list[str]:
    """The checkpoint directories the node's engines load: the model and the draft."""
    out: list[str] = []
    for proc in node.all_processes():
        if proc.kind != "engine":
            continue
        if len(proc.argv) > 2 and proc.argv[2].startswith("/"):
            out.append(proc.argv[2])
        spec = topology(proc).speculative_config
        if isinstance(spec.get("model"), str) and spec["model"].startswith("/"):
            out.append(spec["model"])
    return list(dict.fromkeys(out))


def planned_spans(plan: Plan, node: str) -> list[tuple[int, int, str]]:
    return sorted({(u.span[0], u.span[1], u.purpose) for u in plan.expect.ports.get(node, [])})


def reserve_line(spans: list[tuple[int, int]]) -> str:
    """``ip_local_reserved_ports`` syntax for ``spans``, adjacent and overlapping spans merged."""
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in merged)
