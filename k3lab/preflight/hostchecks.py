"""The host stage's checks: what each lab node's host must hold before any container starts.

Facts come from each node's own host (``k3lab.launch.hoststage`` reads them with testinfra
over the node's endpoint); these functions only judge them, so they run without Docker or SSH.
Each check has an ID, a MUST statement and a remedy (``k3lab preflight --list``); every finding
names the node and its host.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from k3lab.model.plan import Mount, NodePlan, Plan
from k3lab.preflight import checks as static
from k3lab.preflight.checks import Finding
from k3lab.preflight.labchecks import live_check

DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
INSTALL_INFO = "/etc/ascend_install.info"
HCCN_CONF = "/etc/hccn.conf"
PORT_RANGE = "net.ipv4.ip_local_port_range"
RESERVED_PORTS = "net.ipv4.ip_local_reserved_ports"
# the checkpoint directory the guides ask for: "the model configuration, tokenizer, image processor, and
# model weight files" (K3 §2, K3.1 Pro §2), under the Hugging Face file names vLLM reads
CHECKPOINT_FILES = {"config.json": "model configuration", "tokenizer_config.json": "tokenizer",
                    "preprocessor_config.json": "image processor", "model.safetensors.index.json": "weight index"}
DIGEST_FILES = ("config.json", "model.safetensors.index.json")
MIN_DOCKER = (20, 10)  # Docker API 1.41, the oldest engine the kit speaks to
MIN_FREE_BYTES = 20 << 30  # logs, compile and download caches of one node

HOST_CHECKS = [
    live_check("host", "HST-REACH", "endpoints", "The host stage MUST reach every node's host through its endpoint within its deadline.",
              "check the node's sshd / Docker engine (k3lab preflight -i lab.yaml names the endpoint)."),
    live_check("host", "HST-DRIVER", "driver", f"{DRIVER_INFO} (Version=) and {INSTALL_INFO} MUST exist on every node, the driver "
              "installed completely, with ONE driver version across the scenario's nodes.",
              "install the same Ascend driver (HDK) on every node; the odd node is named with its version."),
    live_check("host", "HST-FIRMWARE", "driver", f"Where {FIRMWARE_INFO} exists, every node MUST run the same firmware version.",
              "upgrade the odd node's firmware with the HDK package the others run."),
    live_check("host", "HST-HCCN-CONF", "hccl", f"{HCCN_CONF} MUST exist on every node and name every planned device (address_N).",
              "configure the device addresses with hccn_tool -i N -ip -s address A netmask M (it writes "
              "/etc/hccn.conf), for every N the plan uses."),
    live_check("host", "HST-CHECKPOINT", "model", "Every node MUST hold the checkpoint directory the scripts name, with the model "
              "configuration, tokenizer, image processor and weight index the guide lists.",
              "copy the complete checkpoint directory (same revision) to that path on the node."),
    live_check("host", "HST-CHECKPOINT-SAME", "model", "Every node MUST hold the SAME checkpoint: config.json and the weight index "
              "hash alike on all nodes.",
              "copy the checkpoint from one source to every node (the odd node is named with its digest)."),
    live_check("host", "HST-MODEL", "model", "The node's own config.json MUST fit the plan: TP divides the attention heads, the "
              "PP layer partition sums to the layer count, --max-model-len within max_position_embeddings.",
              "pick TP, PP partition and --max-model-len for the checkpoint the nodes hold."),
    live_check("host", "HST-PORTS", "ranks-ports", f"Every planned port MUST lie outside {PORT_RANGE} or be in {RESERVED_PORTS}: "
              "otherwise any outgoing connection can take it and its owner fails with 'Address already in use'.",
              "reserve them on the node: sysctl -w net.ipv4.ip_local_reserved_ports=<ports> and the same "
              "line in /etc/sysctl.d/90-k3lab.conf (the finding prints the line)."),
    live_check("host", "HST-DISK", "resources", "The filesystems of the Docker root (container logs) and the cache mount MUST have "
              f"{MIN_FREE_BYTES >> 30} GiB free.", "free space on the node (old images, logs, caches)."),
    live_check("host", "HST-MEMORY", "resources", "MemAvailable MUST cover the shm the plan asks for the node's container.",
              "stop what holds the node's memory, or lower the container's shm."),
    live_check("host", "HST-DOCKER", "endpoints", f"The node's Docker engine MUST be {MIN_DOCKER[0]}.{MIN_DOCKER[1]} or newer.",
              "upgrade Docker on the node."),
]
BY_ID = {c.id: c for c in HOST_CHECKS}


def catalogue() -> list[dict[str, str]]:
    return [{"id": c.id, "severity": c.severity, "must": c.must, "remedy": c.remedy} for c in HOST_CHECKS]


@dataclass
class Checkpoint:
    """One checkpoint directory as a node's host holds it."""

    path: str  # in the container, as the scripts name it
    host_path: str
    present: list[str] = field(default_factory=list)
    digest: str | None = None  # sha256 of config.json + weight index, when both exist
    config: dict | None = None


@dataclass
class HostFacts:
    node: str
    host: str
    error: str | None = None
    driver: dict[str, str] | None = None
    firmware: dict[str, str] | None = None
    install: dict[str, str] | None = None
    hccn_conf: dict[str, str] | None = None
    checkpoints: list[Checkpoint] = field(default_factory=list)
    port_range: str | None = None
    reserved_ports: str | None = None
    free_bytes: dict[str, int] = field(default_factory=dict)
    mem_available: int | None = None
    docker_version: str | None = None

    @property
    def where(self) -> str:
        return f"{self.node} ({self.host})"


def key_values(text: str) -> dict[str, str]:
    """``key=value`` lines (version.info, ascend_install.info, hccn.conf); comments and blanks skipped."""
    return static.parse_conf(text)


def _finding(check: str, message: str, nodes: tuple[str, ...]) -> Finding:
    return Finding(check, "error", f"{message} Remedy: {BY_ID[check].remedy}", nodes)


# ------------------------------------------------------------------------------ plan side


def host_path(mounts: list[Mount], path: str) -> str | None:
    """Where a container path lives on the host: the longest mount target containing it."""
    p = PurePosixPath(path)
    best: Mount | None = None
    for m in mounts:
        target = PurePosixPath(m.target.rstrip("/") or "/")
        if (p == target or target in p.parents) and (best is None or len(m.target) > len(best.target)):
            best = m
    if best is None:
        return None
    rest = p.relative_to(PurePosixPath(best.target.rstrip("/") or "/"))
    return str(PurePosixPath(best.source) / rest) if str(rest) != "." else best.source


def model_paths(plan: Plan, node: NodePlan) -> list[str]:
    """The checkpoint directories the node's engines load: the model and the draft."""
    out: list[str] = []
    for proc in node.all_processes():
        if proc.kind != "engine":
            continue
        if len(proc.argv) > 2 and proc.argv[2].startswith("/"):
            out.append(proc.argv[2])
        spec = static.Engine(proc, node.role, node.name, node.address, node.nic).json("--speculative-config")
        if isinstance(spec.get("model"), str) and spec["model"].startswith("/"):
            out.append(spec["model"])
    return list(dict.fromkeys(out))


def planned_spans(plan: Plan, node: str) -> list[tuple[int, int, str]]:
    return sorted({(u.span[0], u.span[1], u.purpose) for u in plan.expect.ports.get(node, [])})


def parse_ports(text: str | None) -> list[tuple[int, int]]:
    """``ip_local_reserved_ports`` syntax: ``8000,36000-36015`` (empty: none)."""
    out = []
    for part in (text or "").replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m:
            lo = int(m.group(1))
            out.append((lo, int(m.group(2) or lo)))
    return out


def reserve_line(spans: list[tuple[int, int]]) -> str:
    merged: list[list[int]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in merged)


def unreserved(spans: list[tuple[int, int, str]], port_range: str, reserved: str | None) -> list[tuple[int, int, str]]:
    """Planned spans with ports inside the ephemeral range and not reserved."""
    nums = [int(x) for x in port_range.split()]
    lo_eph, hi_eph = (nums[0], nums[1]) if len(nums) == 2 else (32768, 60999)
    res = parse_ports(reserved)
    bad = []
    for lo, hi, purpose in spans:
        inside = [p for p in range(max(lo, lo_eph), min(hi, hi_eph) + 1)
                  if not any(a <= p <= b for a, b in res)]
        if inside:
            bad.append((lo, hi, purpose))
    return bad


# -------------------------------------------------------------------------------- checks


def _one_version(facts: list[HostFacts], what: str, pick, check: str) -> list[Finding]:
    versions = {f.node: v for f in facts if (v := pick(f))}
    if len(set(versions.values())) <= 1:
        return []
    common = max(set(versions.values()), key=list(versions.values()).count)
    odd = [f for f in facts if versions.get(f.node) not in (None, common)]
    return [_finding(check, f"{f.where}: {what} {versions[f.node]}, the other nodes run {common}.", (f.node,))
            for f in odd]


def check_driver(facts: list[HostFacts]) -> list[Finding]:
    out = []
    for f in facts:
        if f.driver is None or not f.driver.get("Version"):
            out.append(_finding("HST-DRIVER", f"{f.where}: {DRIVER_INFO} is missing or has no Version=.", (f.node,)))
        if f.install is None:
            out.append(_finding("HST-DRIVER", f"{f.where}: {INSTALL_INFO} is missing.", (f.node,)))
        elif f.install.get("Driver_Install_Status", "complete") != "complete":
            out.append(_finding("HST-DRIVER", f"{f.where}: {INSTALL_INFO} says Driver_Install_Status="
                                f"{f.install['Driver_Install_Status']}.", (f.node,)))
    out += _one_version(facts, "driver", lambda f: (f.driver or {}).get("Version"), "HST-DRIVER")
    out += _one_version(facts, "firmware", lambda f: (f.firmware or {}).get("Version"), "HST-FIRMWARE")
    return out


def check_hccn_conf(plan: Plan, facts: dict[str, HostFacts]) -> list[Finding]:
    out = []
    for node in plan.nodes:
        f = facts[node.name]
        if f.hccn_conf is None:
            out.append(_finding("HST-HCCN-CONF", f"{f.where}: {HCCN_CONF} is missing.", (node.name,)))
            continue
        missing = [d for d in range(node.device_count) if not f.hccn_conf.get(f"address_{d}")]
        if missing:
            out.append(_finding("HST-HCCN-CONF", f"{f.where}: {HCCN_CONF} has no address_N for device(s) {missing} "
                                f"of the {node.device_count} planned.", (node.name,)))
    return out


def check_checkpoints(facts: list[HostFacts]) -> list[Finding]:
    out = []
    digests: dict[str, dict[str, str]] = {}
    for f in facts:
        for ck in f.checkpoints:
            lacking = [f"{name} ({what})" for name, what in CHECKPOINT_FILES.items() if name not in ck.present]
            if lacking:
                out.append(_finding("HST-CHECKPOINT", f"{f.where}: checkpoint {ck.path} (host {ck.host_path}) lacks "
                                    f"{', '.join(lacking)}.", (f.node,)))
            if ck.digest:
                digests.setdefault(ck.path, {})[f.node] = ck.digest
    where = {f.node: f.where for f in facts}
    for path, per_node in digests.items():
        if len(set(per_node.values())) <= 1:
            continue
        common = max(set(per_node.values()), key=list(per_node.values()).count)
        for node, digest in per_node.items():
            if digest != common:
                out.append(_finding("HST-CHECKPOINT-SAME", f"{where[node]}: checkpoint {path} differs "
                                    f"(config.json + weight index sha256 {digest[:12]}, most nodes {common[:12]}).",
                                    (node,)))
    return out


def _merged(cfg: dict) -> dict:
    return cfg.get("text_config", cfg) | {k: v for k, v in cfg.items() if k != "text_config"}


def check_model(plan: Plan, facts: dict[str, HostFacts]) -> list[Finding]:
    """The static model checks (heads vs TP, layers vs PP) on each node's own config.json, plus the context."""
    out = []
    base = static.facts(plan)
    model_checks = [c for c in static.CHECKS if c.id in ("PF-TP-HEADS", "PF-PP-PARTITION")]
    for node in plan.nodes:
        f = facts[node.name]
        ck = next((c for c in f.checkpoints if c.path == plan.expect.model_path and c.config), None)
        if ck is None or ck.config is None:
            continue
        cfg = _merged(ck.config)
        mine = static.Facts(plan, [e for e in base.engines if e.node == node.name], cfg, None)
        for chk in model_checks:
            for msg, _nodes in chk.fn(mine):
                out.append(_finding("HST-MODEL", f"{f.where}: {msg.removeprefix(node.name + ': ')} (config.json read on the node, {ck.host_path})",
                                    (node.name,)))
        limit = cfg.get("max_position_embeddings")
        if isinstance(limit, int) and plan.expect.max_model_len > limit:
            out.append(_finding("HST-MODEL", f"{f.where}: --max-model-len {plan.expect.max_model_len} exceeds "
                                f"max_position_embeddings {limit} of {ck.host_path}/config.json.", (node.name,)))
    return out


def check_ports(plan: Plan, facts: dict[str, HostFacts]) -> list[Finding]:
    out = []
    for node in plan.nodes:
        f = facts[node.name]
        if not f.port_range:
            out.append(_finding("HST-PORTS", f"{f.where}: {PORT_RANGE} could not be read.", (node.name,)))
            continue
        bad = unreserved(planned_spans(plan, node.name), f.port_range, f.reserved_ports)
        if bad:
            need = parse_ports(f.reserved_ports) + [(lo, hi) for lo, hi, _ in bad]
            names = "; ".join(f"{lo}-{hi} {p}" if hi > lo else f"{lo} {p}" for lo, hi, p in bad)
            out.append(_finding("HST-PORTS", f"{f.where}: planned port(s) inside the ephemeral range "
                                f"{f.port_range.split()[0]}-{f.port_range.split()[-1]} and not reserved: {names}. "
                                f"Line: sysctl -w {RESERVED_PORTS}={reserve_line(need)}", (node.name,)))
    return out


def _bytes(size: str) -> int:
    m = re.fullmatch(r"(\d+)([kmgt]?)b?", size.strip().lower())
    if not m:
        return 0
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2)]


def check_resources(plan: Plan, facts: dict[str, HostFacts]) -> list[Finding]:
    out = []
    for node in plan.nodes:
        f = facts[node.name]
        for path, free in sorted(f.free_bytes.items()):
            if free < MIN_FREE_BYTES:
                out.append(_finding("HST-DISK", f"{f.where}: {free / (1 << 30):.1f} GiB free under {path}.", (node.name,)))
        shm = _bytes(node.container.shm_size)
        if f.mem_available is not None and f.mem_available < shm:
            out.append(_finding("HST-MEMORY", f"{f.where}: MemAvailable {f.mem_available >> 20} MiB is below the "
                                f"container's shm {node.container.shm_size}.", (node.name,)))
        version = tuple(int(x) for x in re.findall(r"\d+", f.docker_version or "")[:2])
        if len(version) < 2 or version < MIN_DOCKER:
            out.append(_finding("HST-DOCKER", f"{f.where}: Docker engine {f.docker_version or 'unknown'}.", (node.name,)))
    return out


def evaluate(plan: Plan, facts: dict[str, HostFacts]) -> list[Finding]:
    """Every host check over the facts of every reachable node; an unreachable node is one HST-REACH."""
    out = [_finding("HST-REACH", f"{f.where}: {f.error}", (f.node,)) for f in facts.values() if f.error]
    live = {n: f for n, f in facts.items() if not f.error}
    nodes = [n for n in plan.nodes if n.name in live]
    sub = plan.model_copy(update={"nodes": nodes})
    ordered = [live[n.name] for n in nodes]
    out += check_driver(ordered)
    out += check_hccn_conf(sub, live)
    out += check_checkpoints(ordered)
    out += check_model(sub, live)
    out += check_ports(sub, live)
    out += check_resources(sub, live)
    return out


def to_json(facts: dict[str, HostFacts]) -> str:
    from dataclasses import asdict

    return json.dumps({n: asdict(f) for n, f in facts.items()}, indent=2, default=str)
