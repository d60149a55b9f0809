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

# declared in the model layer, so the runbook (render layer) lists them too; the names stay here for
# the host stage and the tests, which read them as hostchecks.X
from k3lab.model.nodechecks import CHECKPOINT_FILES as CHECKPOINT_FILES
from k3lab.model.nodechecks import DIGEST_FILES as DIGEST_FILES
from k3lab.model.nodechecks import DRIVER_INFO as DRIVER_INFO
from k3lab.model.nodechecks import FIRMWARE_INFO as FIRMWARE_INFO
from k3lab.model.nodechecks import HCCN_CONF as HCCN_CONF
from k3lab.model.nodechecks import HOST_CHECKS as HOST_CHECKS
from k3lab.model.nodechecks import INSTALL_INFO as INSTALL_INFO
from k3lab.model.nodechecks import MIN_DOCKER as MIN_DOCKER
from k3lab.model.nodechecks import MIN_FREE_BYTES as MIN_FREE_BYTES
from k3lab.model.nodechecks import PORT_RANGE as PORT_RANGE
from k3lab.model.nodechecks import RESERVED_PORTS as RESERVED_PORTS
from k3lab.model.nodechecks import host_path as host_path
from k3lab.model.nodechecks import model_paths as model_paths
from k3lab.model.nodechecks import planned_spans as planned_spans
from k3lab.model.nodechecks import reserve_line as reserve_line
from k3lab.model.plan import Plan
from k3lab.preflight import checks as static
from k3lab.preflight.checks import Finding

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


def parse_ports(text: str | None) -> list[tuple[int, int]]:
    """``ip_local_reserved_ports`` syntax: ``8000,36000-36015`` (empty: none)."""
    out = []
    for part in (text or "").replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m:
            lo = int(m.group(1))
            out.append((lo, int(m.group(2) or lo)))
    return out


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
