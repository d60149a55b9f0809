"""Static checks on a plan: catch broken topologies before anything starts.

Each check has a stable ID, a severity, a MUST statement and a remedy; it yields findings that
name the nodes and values at fault. Checks read only the plan (and the checkpoint's
``config.json`` for model facts), so they run with no Docker and no hardware.
"""
from __future__ import annotations

import ipaddress
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypedDict

from k3lab import paths
from k3lab.errors import InputError
from k3lab.model import accept, targetkinds
from k3lab.model.accept import AcceptedFinding
from k3lab.model.catalog import DEVICES
from k3lab.model.checks import CheckInfo, Severity
from k3lab.model.plan import Mount, Plan, Process, Topology, flag
from k3lab.model.targetkinds import TargetKind
from k3lab.render.scripts import PROXY_VARS as SCRIPT_PROXY_VARS

FIXTURES = paths.FIXTURES / "checkpoints"
PROXY_VARS = set(SCRIPT_PROXY_VARS)
PARSER_FLAGS = ("--enable-auto-tool-choice", "--reasoning-parser", "--tool-call-parser", "--tokenizer-mode")
LAUNCHER_OPTIONS = {"--dp-size", "--tp-size", "--dp-size-local", "--dp-rank-start", "--dp-address", "--dp-rpc-port",
                    "--vllm-start-port"}


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    message: str
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Check(CheckInfo):
    """A static check: the registry's metadata (k3lab.model.checks) and the function that finds."""

    fn: Callable[["Facts"], Iterable[tuple[str, tuple[str, ...]]]] = field(repr=False, compare=False)

    def run(self, facts: "Facts") -> list[Finding]:
        return [Finding(self.id, self.severity, f"{msg} Remedy: {self.remedy}", nodes)
                for msg, nodes in self.fn(facts)]


CHECKS: list[Check] = []


def check(id: str, area: str, severity: Severity, must: str, remedy: str):
    def deco(fn):
        CHECKS.append(Check(id=id, stage="static", area=area, severity=severity, must=must, remedy=remedy, fn=fn,
                            source=f"{__name__}.{fn.__name__}"))
        return fn
    return deco


# ------------------------------------------------------------------------------ plan facts


@dataclass
class Engine:
    """An engine of the plan as the checks see it: its process, its node's facts, and its topology as the
    renderer recorded it (``Process.topology``), read as fields rather than re-parsed from its command."""

    proc: Process
    role: str
    node: str
    address: str
    nic: str

    @property
    def argv(self) -> list[str]:
        return self.proc.argv

    @property
    def topo(self) -> Topology:
        # a plan written before the renderer recorded topologies has none: the same parser reads its command
        if self.proc.topology is None:
            self.proc.topology = Topology.of(self.proc.argv)
        return self.proc.topology

    @property
    def tp(self) -> int:
        return self.topo.tensor_parallel_size

    @property
    def pp(self) -> int:
        return self.topo.pipeline_parallel_size

    @property
    def pcp(self) -> int:
        return self.topo.prefill_context_parallel_size

    @property
    def dcp(self) -> int:
        return self.topo.decode_context_parallel_size

    @property
    def dp(self) -> int:
        return self.topo.data_parallel_size

    def json(self, name: str) -> dict:
        configs = {"--kv-transfer-config": self.topo.kv_transfer_config,
                   "--speculative-config": self.topo.speculative_config,
                   "--additional-config": self.topo.additional_config}
        return configs[name]

    def kv_children(self) -> list[dict]:
        return self.topo.kv_connectors()


@dataclass
class Facts:
    plan: Plan
    engines: list[Engine]
    checkpoint: dict | None
    draft_checkpoint: dict | None
    mmc: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (node, artefact) -> keys
    checkpoints: Path = FIXTURES
    sim_subnet: str | None = None  # the inventory's sim.subnet, when the caller has the inventory

    @property
    def kind(self) -> TargetKind:
        """What the plan's target is (its facts, not its name: the checks never branch on a target's name)."""
        return targetkinds.kind(self.plan.target)


def parse_conf(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def facts(plan: Plan, files: dict[str, dict[str, str]] | None = None, checkpoints: Path = FIXTURES,
          sim_subnet: str | None = None) -> Facts:
    engines = []
    for node in plan.nodes:
        for proc in node.all_processes():
            if proc.kind == "engine":
                engines.append(Engine(proc, node.role, node.name, node.address, node.nic))
    mmc = {(node, name): parse_conf(text) for node, arts in (files or {}).items()
           for name, text in arts.items() if name.startswith("mmc-") and name.endswith(".conf")}
    return Facts(plan, engines, _config(checkpoints, plan.expect.model_path),
                 _config(checkpoints, _draft_path(engines)), mmc, checkpoints, sim_subnet)


def _draft_path(engines: list[Engine]) -> str | None:
    for e in engines:
        spec = e.json("--speculative-config")
        if spec.get("model"):
            return spec["model"]
    return None


def _config(root: Path, model_path: str | None) -> dict | None:
    if not model_path:
        return None
    path = root / Path(model_path).name / "config.json"
    if not path.is_file():
        return None
    cfg = json.loads(path.read_text())
    return cfg.get("text_config", cfg) | {k: v for k, v in cfg.items() if k != "text_config"}


# ------------------------------------------------------------------------------------ checks


@check("PF-DP-RANKS", "ranks-ports", "error", "DP ranks of each DP group MUST cover 0..size-1 exactly once, and every "
       "dp_rank_start + dp_size_local MUST stay within dp_size.",
       "give each node of the group a unique rank from 0 to DP size - 1.")
def _dp_ranks(f: Facts):
    for role, members in _dp_groups(f).items():
        yield from _dp_group_findings(role, members)


def _dp_groups(f: Facts) -> dict[str, list[tuple[int, Engine]]]:
    """Role -> (DP rank, engine) for every rank an engine claims (a launcher child, or a start rank + local size)."""
    groups: dict[str, list[tuple[int, Engine]]] = defaultdict(list)
    for e in f.engines:
        if e.proc.positional:
            groups[e.role].append((int(e.proc.positional[3]), e))
        elif e.topo.data_parallel_start_rank is not None or (e.role == "mixed"):
            start = e.topo.data_parallel_start_rank or 0
            local = e.topo.data_parallel_size_local or 1
            for r in range(start, start + local):
                groups[e.role].append((r, e))
    return groups


def _dp_group_findings(role: str, members: list[tuple[int, Engine]]):
    size = members[0][1].dp
    ranks = Counter(r for r, _ in members)
    dup = sorted(r for r, c in ranks.items() if c > 1)
    missing = sorted(set(range(size)) - set(ranks))
    extra = sorted(r for r in ranks if r >= size or r < 0)
    nodes = tuple(sorted({e.node for r, e in members if r in dup or r in extra}))
    if dup:
        yield f"{role} DP group: rank(s) {dup} claimed more than once (nodes {', '.join(nodes)}).", nodes
    if extra:
        yield f"{role} DP group: rank(s) {extra} outside 0..{size - 1}.", nodes
    if missing:
        yield f"{role} DP group of size {size}: rank(s) {missing} unclaimed.", ()


@check("PF-PP-RANKS", "ranks-ports", "error", "PP node ranks of each PP group MUST cover 0..nnodes-1 exactly once.",
       "set NODE_RANK to 0, 1, 2, 3 on P0-P3.")
def _pp_ranks(f: Facts):
    groups: dict[str, list[tuple[int, Engine]]] = defaultdict(list)
    for e in f.engines:
        if e.topo.nnodes:
            groups[e.role].append((e.topo.node_rank or 0, e))
    for role, members in groups.items():
        yield from _pp_group_findings(role, members)


def _pp_group_findings(role: str, members: list[tuple[int, Engine]]):
    n = members[0][1].topo.nnodes or 1
    ranks = Counter(r for r, _ in members)
    bad = sorted(r for r, c in ranks.items() if c > 1 or r >= n)
    missing = sorted(set(range(n)) - set(ranks))
    if bad:
        nodes = tuple(e.node for r, e in members if r in bad)
        yield f"{role} PP group: node rank(s) {bad} duplicated or >= nnodes {n} ({', '.join(nodes)}).", nodes
    if missing:
        yield f"{role} PP group: node rank(s) {missing} unclaimed.", ()
    yield from _pp_head_findings(role, members)


def _pp_head_findings(role: str, members: list[tuple[int, Engine]]):
    """Rank 0 is the PP master (not headless), the others run headless and point at its address."""
    heads = [e for r, e in members if r == 0]
    for r, e in members:
        if (r == 0) == e.topo.headless:
            yield f"{e.node}: PP node rank {r} must {'not ' if r == 0 else ''}run --headless.", (e.node,)
    if heads and any(e.topo.master_addr != heads[0].address for _, e in members):
        bad_nodes = tuple(e.node for _, e in members if e.topo.master_addr != heads[0].address)
        yield f"{role} PP group: --master-addr must be P0's address {heads[0].address} on {', '.join(bad_nodes)}.", bad_nodes


@check("PF-DEVICES", "devices", "error", "Each engine's visible devices MUST exist on the platform, be disjoint on a node, "
       "and number TP x PCP.", "set ASCEND_RT_VISIBLE_DEVICES (or the launcher's --tp-size) to match the engine.")
def _devices(f: Facts):
    limit = DEVICES[f.plan.platform]
    by_node: dict[str, list[Engine]] = defaultdict(list)
    for e in f.engines:
        by_node[e.node].append(e)
        devs = e.proc.devices
        missing = [d for d in devs if d >= limit]
        if missing:
            yield f"{e.node}: devices {missing} do not exist on {f.plan.platform} ({limit} devices).", (e.node,)
        want = e.tp * e.pcp
        if len(devs) != want:
            yield f"{e.node}: {len(devs)} visible devices, but TP {e.tp} x PCP {e.pcp} = {want}.", (e.node,)
    for node, engines in by_node.items():
        seen: Counter = Counter(d for e in engines for d in e.proc.devices)
        shared = sorted(d for d, c in seen.items() if c > 1)
        if shared:
            yield f"{node}: devices {shared} are given to more than one engine.", (node,)


@check("PF-PORTS", "ranks-ports", "error", "No two uses of a port on one host MAY overlap, counting derived ranges (API, DP RPC, "
       "master, Mooncake handshake ranges, HCCL host range, MetaService, proxy).",
       "move one of the colliding ports or kv_port bases in the inventory.")
def _ports(f: Facts):
    for node in f.plan.nodes:
        spans = []
        for proc in node.all_processes():
            for use in proc.ports:
                lo, hi = use.span
                spans.append((lo, hi, f"{proc.id} {use.purpose}"))
        spans.sort()
        for i, (lo, hi, what) in enumerate(spans):
            for lo2, hi2, what2 in spans[i + 1:]:
                if lo2 > hi:
                    break
                yield (f"{node.name}: ports {lo}-{hi} ({what}) overlap {lo2}-{hi2} ({what2}).", (node.name,))


@check("PF-KV-RESERVED", "ranks-ports", "warning", "Mooncake kv_port ranges SHOULD stay outside the transfer-engine range "
       "[20000, 20000 + devices*1000).", "use kv_port >= 36000 on 16-device nodes and >= 28000 on 8-device nodes.")
def _kv_reserved(f: Facts):
    top = 20000 + DEVICES[f.plan.platform] * 1000
    for node in f.plan.nodes:
        for proc in node.all_processes():
            for use in proc.ports:
                lo, hi = use.span
                if use.purpose.startswith("mooncake") and lo < top and hi >= 20000:
                    yield f"{node.name}: {use.purpose} {lo}-{hi} lies in the Mooncake range [20000, {top}).", (node.name,)


@check("PF-ADDRESSES", "addresses", "error", "Every DP/master address MUST be the group head's address, HCCL_IF_IP the node's "
       "own address, and the socket interface variables the node's NIC.", "fix local_ip, nic or the head node in the inventory.")
def _addresses(f: Facts):
    heads: dict[str, str] = {}
    for e in f.engines:
        if (e.proc.positional and e.proc.positional[3] == "0") or (not e.proc.positional and e.proc.dp_rank == 0):
            heads.setdefault(e.role, e.address)
    for e in f.engines:
        env = e.proc.env
        if env.get("HCCL_IF_IP") not in (None, e.address):
            yield f"{e.node}: HCCL_IF_IP={env['HCCL_IF_IP']} but the node's address is {e.address}.", (e.node,)
        for var in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"):
            if var in env and env[var] != e.nic:
                yield f"{e.node}: {var}={env[var]} but the node's NIC is {e.nic}.", (e.node,)
        addr = e.topo.data_parallel_address
        if addr and e.role in heads and addr != heads[e.role] and not e.topo.nnodes:
            yield f"{e.node}: --data-parallel-address {addr} is not the {e.role} head {heads[e.role]}.", (e.node,)


@check("PF-MMC-URLS", "external-cache", "error", "Every MemCache config MUST name the same MetaService and config-store URLs, on the "
       "MetaService node, with the meta/local key names.", "regenerate the MemCache files from one inventory.")
def _mmc_urls(f: Facts):
    meta = f.plan.expect.metaservice
    if meta is None:
        return
    want_store = meta.url.rsplit(":", 1)[0] + ":" + _store_port(f)
    for (node, name), conf in sorted(f.mmc.items()):
        store_key = "ock.mmc.meta_service.config_store_url" if name == "mmc-meta.conf" else \
            "ock.mmc.local_service.config_store_url"
        wrong_key = "ock.mmc.local_service.config_store_url" if name == "mmc-meta.conf" else \
            "ock.mmc.meta_service.config_store_url"
        if conf.get("ock.mmc.meta_service_url") != meta.url:
            yield f"{node}/{name}: meta_service_url {conf.get('ock.mmc.meta_service_url')} != {meta.url}.", (node,)
        if wrong_key in conf:
            yield f"{node}/{name}: uses {wrong_key}; this file needs {store_key}.", (node,)
        elif conf.get(store_key) != want_store:
            yield f"{node}/{name}: {store_key} {conf.get(store_key)} != {want_store}.", (node,)


def _store_port(f: Facts) -> str:
    for (_node, name), conf in f.mmc.items():
        if name == "mmc-meta.conf" and "ock.mmc.meta_service.config_store_url" in conf:
            return conf["ock.mmc.meta_service.config_store_url"].rsplit(":", 1)[1]
    return "6000"


@check("PF-PD-SIZES", "request-paths", "error", "kv_connector_extra_config prefill/decode sizes MUST equal each side's real engine "
       "flags; P MUST be kv_producer and D kv_consumer; every MultiConnector child MUST have a role; P and D engine "
       "ids MUST differ.", "make the connector JSON on both roles match the engine flags.")
def _pd_sizes(f: Facts):
    sides = {"prefill": [e for e in f.engines if e.role == "prefill"],
             "decode": [e for e in f.engines if e.role == "decode"]}
    if not sides["prefill"] or not sides["decode"]:
        return
    real = {side: {"dp_size": es[0].dp, "tp_size": es[0].tp, "pp_size": es[0].pp, "pcp_size": es[0].pcp,
                   "dcp_size": es[0].dcp} for side, es in sides.items()}
    ids: dict[str, set[str]] = defaultdict(set)
    for e in f.engines:
        want_role = "kv_producer" if e.role == "prefill" else "kv_consumer"
        kv = e.json("--kv-transfer-config")
        if kv.get("kv_role") != want_role:
            yield f"{e.node}: kv_role {kv.get('kv_role')!r} on {e.role}, expected {want_role}.", (e.node,)
        for child in e.kv_children():
            yield from _kv_child_role(e, child, want_role)
            if not str(child.get("kv_connector", "")).startswith("MooncakeConnector"):
                continue
            if "engine_id" in child:
                ids[e.role].add(child["engine_id"])
            yield from _mooncake_sizes(e, child.get("kv_connector_extra_config", {}), real)
    if ids["prefill"] & ids["decode"]:
        yield f"engine ids {sorted(ids['prefill'] & ids['decode'])} are used on both P and D.", ()


def _kv_child_role(e: Engine, child: dict, want_role: str):
    if "kv_role" not in child:
        yield f"{e.node}: connector {child.get('kv_connector')} has no kv_role.", (e.node,)
    elif child["kv_role"] != want_role:
        yield f"{e.node}: connector {child.get('kv_connector')} kv_role {child['kv_role']} on {e.role}.", (e.node,)


def _mooncake_sizes(e: Engine, extra: dict, real: dict[str, dict[str, int]]):
    """A Mooncake connector's prefill/decode sizes against the engines' real flags."""
    for side in ("prefill", "decode"):
        for key, value in extra.get(side, {}).items():
            if key in real[side] and int(value) != real[side][key]:
                yield (f"{e.node}: connector says {side}.{key}={value} but the {side} engines run "
                       f"{key}={real[side][key]}.", (e.node,))
        for key in ("dp_size", "tp_size"):
            if key not in extra.get(side, {}):
                yield f"{e.node}: connector lacks {side}.{key}.", (e.node,)


@check("PF-PARSERS", "parsers", "error", "--reasoning-parser, --tool-call-parser and --enable-auto-tool-choice (and "
       "--tokenizer-mode where used) MUST be present together and identical on every engine.",
       "configure the kimi_k3 parsers together on every engine.")
def _parsers(f: Facts):
    seen = {}
    for e in f.engines:
        sig = tuple((name, flag(e.argv, name) if name != "--enable-auto-tool-choice" else str(name in e.argv))
                    for name in PARSER_FLAGS)
        seen[e.node] = sig
        present = [n for n, v in sig[:3] if v not in (None, "False")]
        if present and len(present) != 3:
            missing = [n for n, v in sig[:3] if v in (None, "False")]
            yield f"{e.node}: {', '.join(present)} without {', '.join(missing)}.", (e.node,)
    if len(set(seen.values())) > 1:
        first = next(iter(seen.values()))
        odd = tuple(sorted(n for n, s in seen.items() if s != first))
        yield f"parser flags differ between engines (odd ones: {', '.join(odd)}).", odd


@check("PF-HASHSEED", "external-cache", "error", "PYTHONHASHSEED MUST be set and identical on every engine that shares a KV pool or "
       "transfers KV.", "export PYTHONHASHSEED=0 on every engine of both roles.")
def _hashseed(f: Facts):
    if not f.plan.expect.kv_connector:
        return
    seeds = {e.node: e.proc.env.get("PYTHONHASHSEED") for e in f.engines}
    unset = tuple(sorted(n for n, s in seeds.items() if s is None))
    if unset:
        yield f"PYTHONHASHSEED unset on {', '.join(unset)}.", unset
    values = {s for s in seeds.values() if s is not None}
    if len(values) > 1:
        yield f"PYTHONHASHSEED differs between engines: {sorted(values)}.", ()


@check("PF-TP-HEADS", "model", "error", "TP MUST divide the checkpoint's attention-head count.",
       "pick a TP size that divides num_attention_heads.")
def _tp_heads(f: Facts):
    if f.checkpoint is None:
        return
    heads = int(f.checkpoint.get("num_attention_heads", 0))
    for e in f.engines:
        if heads and heads % e.tp:
            yield f"{e.node}: TP {e.tp} does not divide {heads} attention heads.", (e.node,)


@check("PF-PP-PARTITION", "model", "error", "VLLM_PP_LAYER_PARTITION MUST have PP entries summing to the layer count, be set "
       "on every Prefill node and unset on Decode.", "use the guide's partition on every P node only.")
def _pp_partition(f: Facts):
    layers = int((f.checkpoint or {}).get("num_hidden_layers", 0))
    for e in f.engines:
        part = e.proc.env.get("VLLM_PP_LAYER_PARTITION")
        if e.pp > 1:
            if not part:
                yield f"{e.node}: PP {e.pp} without VLLM_PP_LAYER_PARTITION.", (e.node,)
                continue
            try:
                sizes = [int(x) for x in part.split(",")]
            except ValueError:
                yield f"{e.node}: VLLM_PP_LAYER_PARTITION={part!r} is not a list of integers.", (e.node,)
                continue
            if len(sizes) != e.pp:
                yield f"{e.node}: VLLM_PP_LAYER_PARTITION has {len(sizes)} entries for PP {e.pp}.", (e.node,)
            if layers and sum(sizes) != layers:
                yield f"{e.node}: VLLM_PP_LAYER_PARTITION sums to {sum(sizes)}, the model has {layers} layers.", (e.node,)
        elif part and e.role == "decode":
            yield f"{e.node}: VLLM_PP_LAYER_PARTITION is set on Decode.", (e.node,)


@check("PF-DSPARK", "model", "error", "DSpark draft TP MUST equal the target TP per role, with the same draft path and token "
       "count on both roles.", "set draft_tensor_parallel_size to the role's TP and use one draft checkpoint.")
def _dspark(f: Facts):
    specs = [(e, e.json("--speculative-config")) for e in f.engines]
    specs = [(e, s) for e, s in specs if s]
    for e, s in specs:
        if int(s.get("draft_tensor_parallel_size", e.tp)) != e.tp:
            yield f"{e.node}: draft TP {s.get('draft_tensor_parallel_size')} != target TP {e.tp}.", (e.node,)
    if specs and len(specs) != len(f.engines):
        missing = tuple(sorted(e.node for e in f.engines if not e.json("--speculative-config")))
        yield f"DSpark is on for some engines only; missing on {', '.join(missing)}.", missing
    if len({(s.get("model"), s.get("num_speculative_tokens")) for _, s in specs}) > 1:
        yield "engines use different draft checkpoints or token counts.", ()


def _mmc_client_conf(node: str, name: str, conf: dict[str, str], providers: bool, members: int):
    """One client config: no engine DRAM beside providers, world size, 1GB-aligned device_* sizes."""
    size = conf.get("ock.mmc.local_service.dram.size", "")
    if providers and name == "mmc-local.conf" and _bytes(size) != 0:
        yield f"{node}/{name}: engine client holds dram.size = {size}; standalone providers exist, use 0GB.", (node,)
    if int(conf.get("ock.mmc.local_service.world_size", "256")) < members:
        yield f"{node}/{name}: world_size {conf.get('ock.mmc.local_service.world_size')} < {members} members.", (node,)
    if conf.get("ock.mmc.local_service.protocol", "").startswith("device_") and _bytes(size) % (1 << 30):
        yield f"{node}/{name}: dram.size {size} is not 1GB-aligned for a device_* protocol.", (node,)


@check("PF-MMC-POOL", "external-cache", "error", "Engine clients MUST use dram.size = 0GB where standalone providers exist; world size "
       "MUST cover the participants; lookup ids MUST be unique per host and DP rank; device_sdma sizes MUST be "
       "1GB-aligned.", "use the guide's mmc-local.conf for engines and mmc-local-standalone.conf for providers.")
def _mmc_pool(f: Facts):
    if f.plan.expect.metaservice is None:
        return
    providers = any(name == "mmc-local-standalone.conf" for _, name in f.mmc)
    members = sum(1 for _, name in f.mmc if name != "mmc-meta.conf")
    for (node, name), conf in sorted(f.mmc.items()):
        if name != "mmc-meta.conf":
            yield from _mmc_client_conf(node, name, conf, providers, members)
    lookup: dict[tuple[str, str, int], str] = {}
    for e in f.engines:
        for child in e.kv_children():
            if child.get("kv_connector") != "AscendStoreConnector":
                continue
            lid = str(child.get("kv_connector_extra_config", {}).get("lookup_rpc_port", "0"))
            rank = e.proc.dp_rank or 0
            key = (e.node, lid, rank)
            if key in lookup:
                yield f"{e.node}: lookup id {lid} used twice for DP rank {rank}.", (e.node,)
            lookup[key] = e.proc.id


_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _bytes(size: str) -> int:
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?B)?\s*", size or "", re.I)
    if not m:
        return -1
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper()])


@check("PF-1M-NODES", "model", "error", "1M context on the K3 mixed service MUST use at least eight A3 nodes.",
       "use k3_a3_mixed_1m (DP8) or lower --max-model-len.")
def _one_m(f: Facts):
    if f.plan.expect.dp_routing and f.plan.expect.max_model_len >= 1048576:
        nodes = len(f.plan.nodes)
        if nodes < 8:
            yield f"1M context on {nodes} nodes.", ()


@check("PF-PROXY-VARS", "proxy-vars", "error", "Every engine script MUST unset the http/https/ftp proxy variables (both cases).",
       "add 'unset ftp_proxy FTP_PROXY https_proxy HTTPS_PROXY http_proxy HTTP_PROXY' to the engine script.")
def _proxy_vars(f: Facts):
    if not f.plan.expect.kv_connector:
        return
    for e in f.engines:
        missing = sorted(PROXY_VARS - set(e.proc.unset))
        leaked = sorted(v for v in PROXY_VARS if v in e.proc.env)
        if missing or leaked:
            yield f"{e.node}: proxy variables not unset: {', '.join(missing or leaked)}.", (e.node,)


@check("PF-MODEL", "model", "error", "Every engine MUST serve the same served name and model path, with one max-model-len.",
       "use one model path and served name in every script.")
def _model(f: Facts):
    for e in f.engines:
        name, path, mml = e.topo.served_model_name, e.topo.model, e.topo.max_model_len or 0
        if name != f.plan.expect.served_name:
            yield f"{e.node}: serves {name!r}, expected {f.plan.expect.served_name!r}.", (e.node,)
        if path != f.plan.expect.model_path:
            yield f"{e.node}: model path {path!r}, expected {f.plan.expect.model_path!r}.", (e.node,)
        if mml != f.plan.expect.max_model_len:
            yield f"{e.node}: --max-model-len {mml}, expected {f.plan.expect.max_model_len}.", (e.node,)


def _needed_mounts(targets: set[str], emulated_driver: bool) -> set[str]:
    """The mounts a node container must have; the lab emulator's sim image replaces the driver mounts."""
    need = {"/etc/ascend_install.info", "/root/.cache"}
    if emulated_driver:
        return need | {"/etc/k3lab-sim"}
    need |= {"/usr/local/bin/npu-smi", "/usr/local/dcmi"}
    if not ({"/usr/local/Ascend/driver"} & targets or "/usr/local/Ascend/driver/tools/hccn_tool" in targets):
        need.add("/usr/local/Ascend/driver/tools/hccn_tool")
    return need


def _missing_devices(devices: list[str], n: int) -> list[str]:
    """The platform's /dev/davinci* a container lacks, else /dev/davinci_manager if that is missing."""
    missing = [f"/dev/davinci{i}" for i in range(n) if f"/dev/davinci{i}" not in devices]
    if missing or "/dev/davinci_manager" in devices:
        return missing
    return ["/dev/davinci_manager"]


@check("PF-CONTAINER", "containers", "error", "Each node container MUST have shm 1g, privileged, host network, the platform's "
       "devices and the driver and tool mounts as documented.", "render docker run from the kit, not by hand.")
def _container(f: Facts):
    n = DEVICES[f.plan.platform]
    # a lab profile's listed deviations (k3lab.render.profiles) are the only allowed departures
    waived = {d.id for d in f.plan.deviations if d.id.startswith("emu-")}
    for node in f.plan.nodes:
        c = node.container
        if c.shm_size != "1g" or (not c.privileged and "emu-privileged" not in waived) or c.network_mode != "host":
            yield f"{node.name}: container shm={c.shm_size} privileged={c.privileged} net={c.network_mode}.", (node.name,)
        missing = _missing_devices(c.devices, n)
        if missing and "emu-devices" not in waived:
            yield f"{node.name}: container lacks devices {missing}.", (node.name,)
        targets = {m.target.rstrip("/") for m in c.mounts}
        lacking = sorted(_needed_mounts(targets, "emu-driver-mounts" in waived) - targets)
        if lacking:
            yield f"{node.name}: container lacks mounts {lacking}.", (node.name,)


@check("PF-LAUNCHER", "launcher", "error", "launch_online_dp.py MUST get only options the real launcher accepts, including "
       "--dp-rpc-port.", "remove unsupported options such as --pp-size and pass --dp-rpc-port.")
def _launcher(f: Facts):
    for node in f.plan.nodes:
        for proc in node.processes:
            if proc.kind != "launcher":
                continue
            opts = [a.split("=")[0] for a in proc.argv if a.startswith("--")]
            bad = sorted(set(opts) - LAUNCHER_OPTIONS)
            if bad:
                yield f"{node.name}: launch_online_dp.py does not accept {', '.join(bad)}.", (node.name,)
            if "--dp-rpc-port" not in opts:
                yield f"{node.name}: launch_online_dp.py without --dp-rpc-port (the real one fails with TypeError).", (node.name,)


# ------------------------------------------------------------------------------ inventory sanity

# RFC 5737 / RFC 3849 / RFC 9637 documentation ranges: example inventories use them as placeholders
DOC_NETS = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32",
                                              "3fff::/20")]
DOC_DOMAINS = ("example", "example.com", "example.net", "example.org", "invalid", "test")


def _endpoint_host(endpoint: str) -> str | None:
    """The host part of tcp://host:port or ssh://user@host[:port]; None for unix://."""
    if endpoint.startswith("unix://"):
        return None
    rest = endpoint.split("://", 1)[1].rsplit("@", 1)[-1]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def _ip(text: str | None):
    try:
        return ipaddress.ip_address(text) if text else None
    except ValueError:
        return None


@check("PF-ADDR-PLACEHOLDER", "addresses", "warning", "Node addresses and endpoints SHOULD NOT be documentation or placeholder "
       "values (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, example.* hosts).",
       "replace the example inventory's placeholders with the lab's real addresses and hosts.")
def _addr_placeholder(f: Facts):
    for node in f.plan.nodes:
        found = []
        ip = _ip(node.address)
        if ip is not None and any(ip in net for net in DOC_NETS):
            found.append(f"local_ip {node.address}")
        host = _endpoint_host(node.endpoint)
        hip = _ip(host)
        if (hip is not None and any(hip in net for net in DOC_NETS)) or (
                host and hip is None and host.lower().rstrip(".").endswith(DOC_DOMAINS)):
            found.append(f"endpoint {node.endpoint}")
        if found:
            yield f"{node.name}: {' and '.join(found)} {'is a' if len(found) == 1 else 'are'} documentation " \
                  f"placeholder{'s' if len(found) > 1 else ''}.", (node.name,)


@check("PF-ADDR-SPECIAL", "addresses", "warning", "Node addresses SHOULD be unicast addresses other nodes can reach: not "
       "loopback, link-local, broadcast, or the network/broadcast address of the sim subnet.",
       "give each node the address of its NIC on the cluster network.")
def _addr_special(f: Facts):
    net = ipaddress.ip_network(f.sim_subnet) if f.sim_subnet and f.kind.own_subnet else None
    multi = len(f.plan.nodes) > 1
    for node in f.plan.nodes:
        ip = _ip(node.address)
        if ip is None:
            continue
        if ip.is_loopback and multi:
            yield f"{node.name}: local_ip {ip} is loopback; the other nodes cannot reach it.", (node.name,)
        elif ip.version == 4 and ip == ipaddress.ip_address("255.255.255.255"):
            yield f"{node.name}: local_ip {ip} is the broadcast address.", (node.name,)
        elif ip.is_link_local:
            yield f"{node.name}: local_ip {ip} is link-local.", (node.name,)
        elif net is not None and ip in net and net.num_addresses > 2 and ip in (net.network_address,
                                                                               net.broadcast_address):
            yield f"{node.name}: local_ip {ip} is the {'network' if ip == net.network_address else 'broadcast'} " \
                  f"address of sim subnet {net}.", (node.name,)


@check("PF-SIM-SUBNET", "addresses", "error", "On the sim target every node address MUST be a host address of sim.subnet other "
       "than its gateway (the first host).", "move local_ip into sim.subnet, or change sim.subnet.")
def _sim_subnet(f: Facts):
    if not f.kind.own_subnet or not f.sim_subnet:
        return
    net = ipaddress.ip_network(f.sim_subnet)
    gateway = next(net.hosts(), None)
    for node in f.plan.nodes:
        ip = _ip(node.address)
        if ip is None or ip.version != net.version or ip not in net:
            yield f"{node.name}: local_ip {node.address} is outside sim subnet {net}.", (node.name,)
        elif ip == gateway:
            yield f"{node.name}: local_ip {ip} is the sim network's gateway.", (node.name,)


@check("PF-CONTAINER-SHARED", "containers", "error", "Nodes that share one Docker endpoint MUST use distinct container names "
       "(docker run --name fails on the second one).",
       "set container_name per node, or give each node its own endpoint.")
def _container_shared(f: Facts):
    if f.kind.names_containers:  # the sim names containers k3lab-<run>-<node>
        return
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for node in f.plan.nodes:
        seen[(node.endpoint, node.container.name)].append(node.name)
    for (endpoint, name), nodes in seen.items():
        if len(nodes) > 1:
            yield f"{', '.join(nodes)} share endpoint {endpoint} and container name {name!r}.", tuple(nodes)


@check("PF-OPTION-UNUSED", "options", "warning", "Every -o option given SHOULD change this scenario's artefacts.",
       "drop the option, or pick a scenario it applies to (k3lab render --help lists where each applies).")
def _option_unused(f: Facts):
    from k3lab.model import catalog

    sc = catalog.SCENARIOS.get(f.plan.scenario)
    if sc is None:
        return
    for key in sorted(f.plan.options):
        if not catalog.option_applies(key, sc):
            yield f"-o {key}={f.plan.options[key]} has no effect on {sc.id}.", ()


@check("PF-CHECKPOINT", "model", "warning", "The model checkpoint's config.json SHOULD be available so the model checks "
       "(heads, layers, context length) can run.",
       "on a lab the host stage reads config.json on every node (HST-MODEL) before any container starts; nothing "
       "goes into the kit. Offline, point the model path at a directory name the simulator carries "
       "(k3lab list shows each scenario's).")
def _checkpoint(f: Facts):
    if f.checkpoint is None and f.kind.simulated:
        yield f"no config.json for {f.plan.expect.model_path} in the simulator's checkpoints; model checks skipped.", ()


CACHE_ENV = re.compile(r"(^|_)(CACHE|HOME)(_DIR|_ROOT|_PATH)?$")


def _script_paths(f: Facts, node: str) -> dict[str, str]:
    """Container paths the node's engines read or write: model, draft, cache directories from their env."""
    out: dict[str, str] = {}
    for e in f.engines:
        if e.node != node:
            continue
        if e.topo.model and e.topo.model.startswith("/"):
            out.setdefault(e.topo.model, "model path")
        draft = e.json("--speculative-config").get("model")
        if isinstance(draft, str) and draft.startswith("/"):
            out.setdefault(draft, "draft model path")
        for key, value in e.proc.env.items():
            if CACHE_ENV.search(key) and value.startswith("/"):
                out.setdefault(value, key)
    return out


def under_mount(path: str, targets: list[str]) -> bool:
    p = Path(path)
    return any(p == Path(t) or Path(t) in p.parents for t in targets)


@check("PF-MOUNT-PATHS", "containers", "error", "On a lab, every path the scripts use inside the container (model, draft, caches) "
       "MUST lie under one of the container's mounts: the container sees nothing else of the host; the caches "
       "MUST lie under a writable one.",
       "add the directory that holds the weights to the inventory's mounts (e.g. mounts: [{source: /mnt/weights, "
       "read_only: true}], or nodes[].mounts where nodes differ) and keep model_path under its target; or keep "
       "them under /root/.cache, which the guide mounts. Caches go under a mount without read_only.")
def _mount_paths(f: Facts):
    if not f.kind.real_hosts:
        return
    for node in f.plan.nodes:
        targets = [m.target.rstrip("/") or "/" for m in node.container.mounts]
        for path, what in sorted(_script_paths(f, node.name).items()):
            if not under_mount(path, targets):
                yield (f"{node.name}: {what} {path} is under no mount of container {node.container.name} "
                       f"(mounts: {', '.join(sorted(targets))})."), (node.name,)
            elif "model path" not in what and _innermost(node.container.mounts, path).read_only:
                yield (f"{node.name}: {what} {path} is under the read-only mount "
                       f"{_innermost(node.container.mounts, path).target} of container {node.container.name}; "
                       f"the engine writes there."), (node.name,)


def _innermost(mounts: list[Mount], path: str) -> Mount:
    """The mount that holds ``path`` inside the container (the deepest target containing it)."""
    holding = [m for m in mounts if under_mount(path, [m.target.rstrip("/") or "/"])]
    return max(holding, key=lambda m: len(m.target.rstrip("/")))


# --------------------------------------------------------------------------------- running


def run(plan: Plan, files: dict[str, dict[str, str]] | None = None, checkpoints: Path = FIXTURES,
        sim_subnet: str | None = None) -> list[Finding]:
    """``sim_subnet``: the inventory's sim.subnet, so addresses can be checked against it."""
    fx = facts(plan, files, checkpoints, sim_subnet)
    out: list[Finding] = []
    for chk in CHECKS:
        out.extend(chk.run(fx))
    return out


def catalogue() -> list[dict[str, str]]:
    return [{"id": c.id, "severity": c.severity, "must": c.must, "remedy": c.remedy} for c in CHECKS]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]




class FindingJson(TypedDict):
    """A finding in the preflight document (preflight.json, ``k3lab preflight --format json``)."""

    check: str
    severity: str  # error or warning
    nodes: list[str]
    message: str  # without its remedy
    remedy: str


class AcceptedJson(FindingJson):
    reason: str  # the acceptance's (inventory or policy)


class NoEffect(TypedDict):
    """An acceptance that matched an error: errors cannot be accepted."""

    check: str
    nodes: list[str]
    reason: str
    why: str


class PreflightReport(TypedDict):
    """The preflight document: ``k3lab preflight --format json``; a run keeps it as preflight.json."""

    scenario: str
    target: str
    strict: bool
    checks: int  # how many checks ran
    verdict: str  # PASS or FAIL
    errors: int
    warnings: int  # open ones
    findings: list[FindingJson]  # errors, then open warnings
    accepted: list[AcceptedJson]
    acceptances_without_effect: list[NoEffect]


def finding_json(f: Finding) -> FindingJson:
    """A finding with its remedy apart from the message (the text output joins them)."""
    remedy = next((c.remedy for c in CHECKS if c.id == f.check), "")
    message = f.message.removesuffix(f" Remedy: {remedy}") if remedy else f.message
    return FindingJson(check=f.check, severity=f.severity, nodes=list(f.nodes), message=message, remedy=remedy)


def judge(findings: Iterable[Finding], acceptances: Iterable[AcceptedFinding]) -> accept.Outcome:
    """Findings split into errors, open warnings and accepted warnings. An acceptance must name a known
    check id (a typo would silently accept nothing): an unknown one is an input error with a did-you-mean."""
    from k3lab.model.select import did_you_mean
    from k3lab.preflight import labchecks

    accs = list(acceptances)
    known = [c["id"] for c in catalogue() + labchecks.catalogue()]
    for acc in accs:
        if acc.check not in known:
            raise InputError("accepted finding: " + did_you_mean(acc.check, known, "check id") +
                             "; see k3lab preflight --list")
    return accept.apply(findings, accs)


def report(plan: Plan, outcome: accept.Outcome, strict: bool) -> PreflightReport:
    """The preflight document: ``k3lab preflight --format json`` prints it, a run keeps it as preflight.json."""
    failed = outcome.failed(strict)
    return PreflightReport(
        scenario=plan.scenario, target=plan.target, strict=strict, checks=len(CHECKS),
        verdict="FAIL" if failed else "PASS", errors=len(outcome.errors), warnings=len(outcome.warnings),
        findings=[finding_json(f) for f in outcome.errors + outcome.warnings],
        accepted=[AcceptedJson(**finding_json(f), reason=a.reason) for f, a in outcome.accepted],
        acceptances_without_effect=[NoEffect(check=a.check, nodes=a.nodes, reason=a.reason, why="an error cannot be accepted")
                                    for a in outcome.ignored])
