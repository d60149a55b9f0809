"""Scenario + inventory -> per-node artefacts and the plan.

``build(scenario_id, inventory, options, target)`` returns a :class:`Rendered`: the plan and the
text of every artefact per node. ``write(rendered, out_dir)`` lays them out as
``OUT/<node>/<artefact>`` plus ``OUT/plan.json``.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pydantic_core

from k3lab import outputs
from k3lab.errors import InputError
from k3lab.model import catalog, deviations, targetkinds
from k3lab.model.catalog import OPTIONS, Scenario
from k3lab.model.inventory import PATH_RE, Inventory, InventoryError, Node
from k3lab.model.plan import (
    DP_RPC_PURPOSE,
    ApiEndpoint,
    Artefact,
    Container,
    Deviation,
    Expect,
    Gate,
    MetaExpect,
    Mount,
    NodePlan,
    Plan,
    PortUse,
    Process,
    Stage,
    Topology,
    jsonable,
)
from k3lab.model.plan import flag as _flag
from k3lab.render import k8s, memcache, profiles, runbook
from k3lab.render.families import Family, family
from k3lab.render.scripts import PROXY_VARS, Cmd, Ctx
from k3lab.render.shell import Line, Raw, Script, Unset, plain_words

LAUNCHER = "examples/external_online_dp/launch_online_dp.py"
PROXY = "examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
GIB = 1024 ** 3


def _default_engine_id(node: Node) -> str:
    """950DT ENGINE_ID: the guide asks for a unique id per engine. The P nodes form one PP engine
    ('prefill'); every D node is its own engine ('decode0', 'decode1', ... by DP start rank)."""
    return f"decode{node.rank}" if node.role == "decode" else node.role


class RenderError(InputError, ValueError):
    """The scenario and options cannot be rendered (exit code 2)."""


@dataclass
class Rendered:
    plan: Plan
    files: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> artefact name -> text
    sim_subnet: str | None = None  # the inventory's sim.subnet, for preflight's address checks
    manifests: dict[str, str] = field(default_factory=dict)  # k8s target: OUT/k8s/<file> -> YAML (k3lab.render.k8s)
    runbook_extra: str = ""  # k8s target: the RUNBOOK's kubectl section


# ------------------------------------------------------------------------------ inventory shape


def check_shape(sc: Scenario, inv: Inventory) -> None:
    """The inventory must have the scenario's roles, node counts and ranks, else nothing renders."""
    problems = []
    if inv.scenario and inv.scenario != sc.id:
        problems.append(f"scenario: inventory is for {inv.scenario!r}, not {sc.id!r}")
    problems += _role_problems(sc, inv)
    metas = inv.by_role("metaservice")
    if sc.pool != "none" and len(metas) > 1:
        problems.append("nodes: at most one metaservice node")
    problems += _rank_problems(sc, inv)
    if sc.pool != "none" and not metas and not inv.metaservice_node:
        problems.append(f"metaservice_node: {sc.id} needs a MetaService host (a metaservice node or metaservice_node)")
    if problems:
        raise InventoryError("inventory does not fit the scenario\n" + "\n".join(problems))


def _role_problems(sc: Scenario, inv: Inventory) -> list[str]:
    """Node counts per role, and no role the scenario lacks."""
    problems = []
    for role, count in sc.roles.items():
        nodes = inv.by_role(role)  # type: ignore[arg-type]
        if len(nodes) != count:
            problems.append(f"nodes: {sc.id} needs {count} {role} node(s), inventory has {len(nodes)}")
    for node in inv.nodes:
        if node.role not in sc.roles and not (node.role == "metaservice" and sc.pool != "none"):
            problems.append(f"nodes.{node.name}.role: {sc.id} has no {node.role} role")
    return problems


def _rank_problems(sc: Scenario, inv: Inventory) -> list[str]:
    """Every role needs its rank-0 head."""
    problems = []
    for role in sc.roles:
        ranks = [n.rank for n in inv.by_role(role)]  # type: ignore[arg-type]
        if ranks and 0 not in ranks:
            problems.append(f"nodes: no {role} node has rank 0 (ranks {sorted(ranks)}); rank is role-local and the "
                            f"rank-0 node is the {role} head (DP address / PP master)")
    return problems


def _options(sc: Scenario, raw: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        from k3lab.model.hints import closest  # error path only

        hints = [f" (did you mean {c!r}?)" if (c := closest(k, OPTIONS)) else "" for k in unknown]
        raise RenderError("unknown option(s) " + ", ".join(f"{k!r}{h}" for k, h in zip(unknown, hints)) +
                          "; known: " + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    opts = dict(raw)
    if opts.get("parsers", "on") not in ("on", "off"):
        raise RenderError("option parsers must be 'on' or 'off'")
    if "draft" in opts and not re.fullmatch(PATH_RE, opts["draft"]):
        raise RenderError(f"option draft {opts['draft']!r} must be an absolute path on one line without quotes, "
                          f"backslashes or '%' (it reaches the --speculative-config JSON)")
    if "draft" in opts and sc.dspark == "never":
        raise RenderError(f"{sc.id} has no DSpark3 draft model")
    return opts


# ------------------------------------------------------------------------------------ helpers


def _container(sc: Scenario, inv: Inventory, node: Node, run_label: str | None) -> Container:
    devs = [f"/dev/davinci{i}" for i in range(sc.devices)] + ["/dev/davinci_manager"]
    if sc.platform == "950DT":
        devs += ["/dev/hisi_hdc"]
        mounts = [("/usr/local/dcmi", "/usr/local/dcmi"), ("/usr/local/Ascend/driver", "/usr/local/Ascend/driver"),
                  ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi")]
    else:
        devs += ["/dev/devmm_svm", "/dev/hisi_hdc"]
        mounts = [("/usr/local/dcmi", "/usr/local/dcmi"),
                  ("/usr/local/Ascend/driver/tools/hccn_tool", "/usr/local/Ascend/driver/tools/hccn_tool"),
                  ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi"),
                  ("/usr/local/Ascend/driver/lib64/", "/usr/local/Ascend/driver/lib64/"),
                  ("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.info")]
    mounts += [("/etc/ascend_install.info", "/etc/ascend_install.info"), ("/etc/hccn.conf", "/etc/hccn.conf"),
               ("/root/.cache", "/root/.cache")]
    # the lab's own (weights outside /root/.cache, deviation inventory-mounts), after the guide's
    extra = [Mount.make(source=m.source, target=m.container_path, read_only=m.read_only) for m in inv.mounts_for(node)]
    return Container.make(
        name=node.container_name or sc.container_name, image=inv.image or sc.image, shm_size="1g", privileged=True,
        network_mode="host", devices=devs, mounts=[Mount.make(source=s, target=t) for s, t in mounts] + extra,
        command=["sleep", "infinity"],
        labels={"k3lab.scenario": sc.id, "k3lab.node": node.name, **({"k3lab.run": run_label} if run_label else {})},
    )


def docker_run_script(c: Container) -> str:
    lines = [f"docker run -d --name {shlex.quote(c.name)}", f"--shm-size={c.shm_size}", f"--net={c.network_mode}",
             f"--privileged={'true' if c.privileged else 'false'}"]
    lines += [f"--device {d}" for d in c.devices]
    lines += [f"-v {shlex.quote(m.source)}:{shlex.quote(m.target)}{':ro' if m.read_only else ''}" for m in c.mounts]
    lines += [f"--label {shlex.quote(k + '=' + v)}" for k, v in sorted(c.labels.items()) if k != "k3lab.run"]
    lines.append(f"{shlex.quote(c.image)} " + " ".join(shlex.quote(a) for a in c.command))
    return "#!/usr/bin/env bash\nset -euo pipefail\n" + " \\\n    ".join(lines) + "\n"


def _check_hidden(node: Node, targets: list[str], c: Container) -> None:
    """An inventory mount may not sit on or above another mount of the final container (the profile's host
    programs on the emulator included): Docker would hide one under the other."""
    from pathlib import PurePosixPath

    for target in targets:
        t = PurePosixPath(target)
        below = [m.target for m in c.mounts if (p := PurePosixPath(m.target.rstrip("/") or "/")) == t or t in p.parents]
        own = next((x for x in below if x.rstrip("/") == target), None)  # the inventory's own mount
        if own is not None:
            below.remove(own)
        if below:
            raise RenderError(f"mounts (node {node.name}): target {target} would hide the container's mount "
                              f"{below[0]}; mount it elsewhere")


def _launcher_children(dp_size: int, tp: int, local: int, start: int, addr: str, rpc: str, port0: int) -> list[list[str]]:
    """What the real launch_online_dp.py passes as $1..$7 (vllm-ascend-internals §1)."""
    out = []
    for i in range(local):
        devices = ",".join(str(x) for x in range(i * tp, (i + 1) * tp))
        out.append([devices, str(port0 + i), str(dp_size), str(start + i), addr, rpc, str(tp)])
    return out


def _kv_ports(topo: Topology, pp_rank: int, dp_rank: int) -> list[PortUse]:
    """Mooncake handshake ports this node's workers bind (vllm-ascend-internals §3)."""
    out = []
    for child in topo.kv_connectors():
        if not str(child.get("kv_connector", "")).startswith("MooncakeConnector") or "kv_port" not in child:
            continue
        kv = int(child["kv_port"])
        tp, pp, pcp = topo.tensor_parallel_size, topo.pipeline_parallel_size, topo.prefill_context_parallel_size
        first = kv + dp_rank * tp * pp * pcp + (pp_rank * pcp) * tp
        out.append(PortUse.make(port=first, last=first + pcp * tp - 1, purpose=f"mooncake handshake (kv_port {kv})"))
    return out


def _devices(env: dict[str, str]) -> list[int]:
    raw = env.get("ASCEND_RT_VISIBLE_DEVICES", "")
    return [int(x) for x in raw.split(",") if x.strip().isdigit()]


# ----------------------------------------------------------------------------------- build


def build(scenario_id: str, inv: Inventory, options: dict[str, str] | None = None, target: str = "sim",
          inventory_name: str = "default", run_label: str | None = None) -> Rendered:
    sc = catalog.get(scenario_id)
    opts = _options(sc, options or {})
    check_shape(sc, inv)
    b = _Build(sc=sc, inv=inv, opts=opts, target=target, run_label=run_label)
    rendered = Rendered(plan=None, sim_subnet=inv.sim.subnet)  # type: ignore[arg-type]
    for node in inv.nodes:
        out = _NodeOut(node=node, container=b.container(node))
        out.add("docker_run.sh", docker_run_script(out.container), "(host)", 0o755)
        b.memcache_processes(out)
        if node.role in sc.roles:
            b.engine_processes(out)
        b.proxy_process(out)
        b.node_plans.append(NodePlan.make(
            name=node.name, role=node.role, rank=node.rank, address=node.local_ip, nic=node.nic, endpoint=node.endpoint,
            platform=sc.platform, device_count=sc.devices, container=out.container, artefacts=out.artefacts,
            processes=out.procs))
        rendered.files[node.name] = out.files
    rendered.plan = Plan.make(
        scenario=sc.id, title=sc.title, seed=sc.seed, section=sc.section, target=target, platform=sc.platform,
        options=opts, inventory=inventory_name, nodes=b.node_plans,
        stages=_stages(b.family, inv, b.node_plans, b.heads), expect=b.expect(), deviations=b.deviations(),
    )
    _check_port_ceiling(b.node_plans)
    if targetkinds.kind(target).manifests:
        made = k8s.render(rendered.plan, rendered.files, inv, run_label)
        rendered.manifests, rendered.runbook_extra = made.files, made.runbook
    return rendered


@dataclass
class _NodeOut:
    """One node's share of the rendering: its container, artefact texts and processes."""
    node: Node
    container: Container
    files: dict[str, str] = field(default_factory=dict)
    artefacts: list[Artefact] = field(default_factory=list)
    procs: list[Process] = field(default_factory=list)

    def add(self, name: str, text: str, path: str, mode: int = 0o644) -> None:
        self.files[name] = text
        self.artefacts.append(Artefact.make(name=name, path=path, mode=mode))


class _Build:
    """The steps of :func:`build`: per node the MemCache, engine and proxy processes; then the expectations.

    It collects what the suite's expectations need across nodes (APIs, DP/PP groups, headless nodes)."""

    def __init__(self, sc: Scenario, inv: Inventory, opts: dict[str, str], target: str, run_label: str | None):
        self.sc, self.inv, self.opts, self.target, self.run_label = sc, inv, opts, target, run_label
        self.family = family(sc)
        self.model = inv.model_path or sc.model_path
        self.draft = self._draft()
        self.parsers = opts.get("parsers", "on") == "on"
        self.wd = inv.paths.workdir
        self.logs = f"{self.wd}/logs"
        metas = inv.by_role("metaservice")
        self.meta_node = metas[0] if metas else (inv.node(inv.metaservice_node) if inv.metaservice_node else None)
        self.heads = {role: inv.by_role(role)[0] for role in sc.roles}  # type: ignore[arg-type]
        self.proxy_node = inv.node(inv.proxy_node) if inv.proxy_node else self.heads.get("prefill")
        self.node_plans: list[NodePlan] = []
        self.apis: list[ApiEndpoint] = []
        self.dp_groups: dict[str, dict[int, str]] = {}
        self.pp_groups: dict[str, dict[int, str]] = {}
        self.headless: list[str] = []
        self.mixed_ranks: dict[int, str] = {}

    def _draft(self) -> str | None:
        draft = self.opts.get("draft") or self.inv.draft_model_path
        if self.sc.dspark == "always":
            return draft or self.sc.draft_default
        if self.sc.dspark == "optional" and "draft" not in self.opts:
            return None
        return draft

    def container(self, node: Node) -> Container:
        container = _container(self.sc, self.inv, node, self.run_label)
        if targetkinds.kind(self.target).real_hosts:  # the one listed place a lab may differ (k3lab.render.profiles)
            container = profiles.apply(self.inv.lab.profile, container)
        _check_hidden(node, [m.container_path for m in self.inv.mounts_for(node)], container)
        return container

    # ---- MemCache: MetaService host and per-node pool files
    def memcache_processes(self, out: _NodeOut) -> None:
        sc, inv, node, wd, logs = self.sc, self.inv, out.node, self.wd, self.logs
        if sc.pool != "none":
            for name, (text, path) in self.family.memcache_files(sc, inv, node, self.meta_node).items():
                out.add(name, text, path, 0o755 if name.endswith((".sh", ".py")) else 0o644)
        if self.meta_node is not None and node.name == self.meta_node.name:
            script = self.family.metaservice_script(inv)
            out.add("start_metaservice.sh", script.render(), f"{wd}/start_metaservice.sh", 0o755)
            env, argv, scope = script.resolve({})
            out.procs.append(Process.make(
                id=f"{node.name}/metaservice", node=node.name, kind="metaservice", script=f"{wd}/start_metaservice.sh",
                cwd=wd, env=env, unset=sorted(scope.unset), sourced=scope.sourced, argv=argv,
                log=f"{logs}/metaservice.log", api=f"http://{node.local_ip}:{inv.ports.meta_metrics}",
                ports=[PortUse.make(port=inv.ports.meta_service, purpose="MetaService meta_service_url"),
                       PortUse.make(port=inv.ports.config_store, purpose="MetaService config_store_url"),
                       PortUse.make(port=inv.ports.meta_metrics, purpose="MetaService metrics_url")]))
        if sc.pool == "providers" and node.role in ("prefill", "decode"):
            script = memcache.provider_script(inv)
            out.add("start_provider.sh", script.render(), f"{wd}/start_provider.sh", 0o755)
            env, argv, scope = script.resolve({})
            out.procs.append(Process.make(
                id=f"{node.name}/provider", node=node.name, kind="provider", script=f"{wd}/start_provider.sh",
                cwd=inv.paths.memcache_config_dir, env=env, sourced=scope.sourced, argv=argv,
                log=f"{logs}/provider.log"))

    # ---- engine: the guide's script, started by the DP launcher or by bash
    def engine_processes(self, out: _NodeOut) -> None:
        sc, inv, node, wd = self.sc, self.inv, out.node, self.wd
        ctx = Ctx(sc=sc, inv=inv, node=node, model=self.model, draft=self.draft,
                  head_ip=self.heads[node.role].local_ip, parsers=self.parsers,
                  engine_id=node.engine_id or _default_engine_id(node))
        engine = self.family.engine_script(ctx)
        launcher_style = self.family.uses_launcher(sc, node.role)
        engine_name = "run_dp_template.sh" if sc.pd else "start_engine.sh"
        out.add(engine_name, engine.render(), f"{wd}/{engine_name}", 0o755)
        launch = _launch_script(self.family, sc, inv, node, self.heads, launcher_style, engine_name)
        out.add("launch.sh", launch.render(), f"{wd}/launch.sh", 0o755)
        if launcher_style:
            self._launcher(out, engine, launch, engine_name)
        else:
            self._single_engine(out, engine, launch)

    def _launcher(self, out: _NodeOut, engine: Script, launch: Script, engine_name: str) -> None:
        """launch_online_dp.py: one engine child per local DP rank, each with its own API port."""
        node, wd, logs = out.node, self.wd, self.logs
        base_env, largv, lscope = launch.resolve({})
        dp_size, tp = int(_need(largv, "--dp-size")), int(_flag(largv, "--tp-size", "1"))
        local = int(_flag(largv, "--dp-size-local", str(dp_size)))
        start = int(_flag(largv, "--dp-rank-start", "0"))
        children = []
        for pos in _launcher_children(dp_size, tp, local, start, _need(largv, "--dp-address"),
                                      _flag(largv, "--dp-rpc-port", "12345"),
                                      int(_flag(largv, "--vllm-start-port", "9000"))):
            env, argv, scope = engine.resolve(base_env, pos)
            topo = Topology.of(argv)
            rank = int(pos[3])
            ports = [PortUse.make(port=int(pos[1]), purpose="engine API (--port)"), *_kv_ports(topo, 0, rank)]
            if rank == 0 and dp_size > 1:
                ports.append(PortUse.make(port=int(pos[5]), purpose=DP_RPC_PURPOSE))
            ports += _hccl_ports(env)
            api = f"http://{node.local_ip}:{pos[1]}"
            children.append(Process.make(
                id=f"{node.name}/engine{rank}", node=node.name, kind="engine", script=f"{wd}/{engine_name}",
                cwd=wd, env=env, unset=sorted(scope.unset), sourced=scope.sourced, argv=argv, positional=pos,
                ports=ports, api=api, dp_rank=rank, devices=_devices(env), topology=topo, log=f"{logs}/launcher.log"))
            self.apis.append(ApiEndpoint.make(node=node.name, url=api, role=node.role, dp_ranks=[rank]))
            self.dp_groups.setdefault(node.role, {})[rank] = node.name
        out.procs.append(Process.make(id=f"{node.name}/launcher", node=node.name, kind="launcher",
                                      script=f"{wd}/launch.sh", cwd=wd, env=base_env, argv=largv,
                                      sourced=lscope.sourced, log=f"{logs}/launcher.log", children=children))

    def _single_engine(self, out: _NodeOut, engine: Script, launch: Script) -> None:
        """One ``vllm serve`` per node: a DP rank (mixed), a PP stage, or a headless worker."""
        sc, node = self.sc, out.node
        base_env, _, _ = launch.resolve({})
        env, argv, scope = engine.resolve(base_env)
        topo = Topology.of(argv)
        is_headless = topo.headless
        pp_rank = (topo.node_rank or 0) if topo.nnodes else None
        dp_rank = next((r for r in (topo.data_parallel_start_rank, topo.data_parallel_rank) if r is not None), 0)
        api = None if is_headless else f"http://{node.local_ip}:{topo.port or 8000}"
        out.procs.append(Process.make(
            id=f"{node.name}/engine", node=node.name, kind="engine", script=f"{self.wd}/launch.sh", cwd=self.wd,
            env=env, unset=sorted(scope.unset), sourced=scope.sourced, argv=argv,
            ports=_engine_ports(node, env, topo, pp_rank, is_headless), api=api,
            headless=is_headless, pp_rank=pp_rank, dp_rank=None if sc.pd else dp_rank, devices=_devices(env),
            topology=topo, log=f"{self.logs}/engine.log"))
        if is_headless:
            self.headless.append(node.name)
        if pp_rank is not None:
            self.pp_groups.setdefault(node.role, {})[pp_rank] = node.name
        if sc.pd:
            self.dp_groups.setdefault(node.role, {})[0] = self.heads[node.role].name
        else:
            self.mixed_ranks[dp_rank] = node.name
        if api:
            ranks = [0] if sc.pd else list(range(topo.data_parallel_size))
            self.apis.append(ApiEndpoint.make(node=node.name, url=api, role=node.role, dp_ranks=ranks))

    # ---- PD proxy on its node
    def proxy_process(self, out: _NodeOut) -> None:
        node, inv, wd = out.node, self.inv, self.wd
        if not (self.sc.pd and self.proxy_node is not None and node.name == self.proxy_node.name):
            return
        script = _proxy_script(self.family, inv)
        out.add("start_proxy.sh", script.render(), f"{wd}/start_proxy.sh", 0o755)
        env, argv, scope = script.resolve({})
        out.procs.append(Process.make(
            id=f"{node.name}/proxy", node=node.name, kind="proxy", script=f"{wd}/start_proxy.sh",
            cwd=wd, env=env, unset=sorted(scope.unset), argv=argv, log=f"{self.logs}/proxy.log",
            api=f"http://{node.local_ip}:{inv.ports.proxy}",
            ports=[PortUse.make(port=inv.ports.proxy, purpose="PD proxy (--port)")]))

    # ---- what the suite expects of the running deployment
    def _metaservice_expect(self) -> MetaExpect | None:
        sc, inv, meta_node = self.sc, self.inv, self.meta_node
        if meta_node is None:
            return None
        meta = MetaExpect.make(url=f"tcp://{meta_node.local_ip}:{inv.ports.meta_service}",
                               metrics_url=f"http://{meta_node.local_ip}:{inv.ports.meta_metrics}")
        if sc.pool == "providers":
            sizes = [memcache.member_bytes(n) for n in inv.nodes if n.role in sc.roles]
            meta = meta.model_copy(update=dict(segments=len(sizes), total_bytes=sum(sizes),
                                               segment_bytes=sizes[0] if len(set(sizes)) == 1 else None))
        return meta

    def expect(self) -> Expect:
        sc, apis, dp_groups = self.sc, self.apis, self.dp_groups
        if self.mixed_ranks:
            dp_groups["mixed"] = dict(sorted(self.mixed_ranks.items()))
        proxy_url = f"http://{self.proxy_node.local_ip}:{self.inv.ports.proxy}" if sc.pd and self.proxy_node else None
        return Expect.make(
            served_name=sc.served_name, model_path=self.model, max_model_len=sc.max_model_len,
            apis=apis, entrypoint=proxy_url or apis[0].url, proxy=proxy_url,
            proxy_instances=_proxy_instances(apis) if proxy_url else {},
            dp_groups={k: dict(sorted(v.items())) for k, v in dp_groups.items()},
            pp_groups={k: dict(sorted(v.items())) for k, v in self.pp_groups.items()},
            headless=self.headless, metaservice=self._metaservice_expect(),
            ports={n.name: [p for proc in n.all_processes() for p in proc.ports] for n in self.node_plans},
            language_model_only=sc.language_model_only,
            parsers=not self.family.parsers_option or self.parsers, kv_connector=sc.pd,
            external_pool=sc.pool != "none", dp_routing=not sc.pd,
        )

    def deviations(self) -> list[Deviation]:
        found = deviations.for_scenario(self.sc, self.opts, self.target)
        found += deviations.for_inventory(self.inv)
        if targetkinds.kind(self.target).real_hosts:
            found += profiles.deviations(self.inv.lab.profile)
        return [Deviation.make(**d) for d in found]


def _need(argv: list[str], name: str) -> str:
    """An option the kit's own launch command always passes."""
    value = _flag(argv, name)
    if value is None:
        raise RenderError(f"launch command lacks {name}")
    return value


def _engine_ports(node: Node, env: dict[str, str], topo: Topology, pp_rank: int | None,
                  is_headless: bool) -> list[PortUse]:
    """The ports one ``vllm serve`` binds: API, PP master, DP RPC on rank 0, Mooncake, HCCL."""
    ports: list[PortUse] = []
    if not is_headless:
        ports.append(PortUse.make(port=topo.port or 8000, purpose="engine API (--port)"))
    if pp_rank == 0 and topo.master_port:
        ports.append(PortUse.make(port=topo.master_port, purpose="PP master (--master-port)"))
    rpc = topo.data_parallel_rpc_port
    if node.rank == 0 and rpc and topo.data_parallel_size > 1:
        ports.append(PortUse.make(port=rpc, purpose=DP_RPC_PURPOSE))
    return ports + _kv_ports(topo, pp_rank or 0, 0) + _hccl_ports(env)


def _port_field(purpose: str, role: str) -> str:
    """The inventory key a derived port comes from, for the error message."""
    if "mooncake" in purpose:
        return "ports.kv_prefill" if role == "prefill" else "ports.kv_decode"
    if "DP RPC" in purpose or "LOOKUP" in purpose:
        return "ports.prefill_dp_rpc" if role == "prefill" else "ports.dp_rpc"
    if "master" in purpose:
        return "ports.master"
    return "ports.api"


def _check_port_ceiling(node_plans: list[NodePlan]) -> None:
    """Ports derived from an inventory base (per-rank API ports, Mooncake ranges) must stay within 65535."""
    problems = []
    for node in node_plans:
        for proc in node.all_processes():
            for use in proc.ports:
                top = use.last if use.last is not None else use.port
                if top > 65535:
                    problems.append(f"{_port_field(use.purpose, node.role)} (node {node.name!r}): {use.purpose} "
                                    f"reaches port {top}, beyond 65535; lower the base port")
    if problems:
        raise InventoryError("derived ports out of range\n" + "\n".join(dict.fromkeys(problems)))


def _proxy_instances(apis: list[ApiEndpoint]) -> dict[str, int]:
    """What the proxy's /healthcheck must count: one instance per Prefill and Decode engine API."""
    return {"prefill": sum(a.role == "prefill" for a in apis), "decode": sum(a.role == "decode" for a in apis)}


def _hccl_ports(env: dict[str, str]) -> list[PortUse]:
    rng = env.get("HCCL_HOST_SOCKET_PORT_RANGE", "")
    if rng and rng != "auto" and "-" in rng:
        lo, hi = (int(x) for x in rng.split("-"))
        return [PortUse.make(port=lo, last=hi, purpose="HCCL host socket range", listens=False)]
    return []


def _launch_script(fam: Family, sc: Scenario, inv: Inventory, node: Node, heads: dict[str, Node], launcher: bool,
                   engine_name: str) -> Script:
    """How the kit starts the engine: the guide's launcher command, or ``bash`` on the script."""
    wd = inv.paths.workdir
    st: list = [Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail"), Line(plain_words("cd", wd))]
    st += fam.launch_prelude(sc, inv, node)
    if launcher:
        src = f"{inv.paths.vllm_ascend_source_dir}/{LAUNCHER}"
        group_ip = heads[node.role].local_ip
        rpc = inv.ports.prefill_dp_rpc if node.role == "prefill" else inv.ports.dp_rpc
        dp = fam.launcher_dp_size(sc, node.role)
        tp = sc.devices  # one DP rank per node uses every device
        st.append(Line(plain_words("cp", src, "./launch_online_dp.py")))
        c = Cmd("python", "launch_online_dp.py")("--dp-size", dp)("--tp-size", tp)("--dp-size-local", 1)
        c("--dp-rank-start", node.rank)("--dp-address", group_ip)("--dp-rpc-port", rpc)("--vllm-start-port", inv.ports.api)
        st.append(c.done(exec_=True))
    else:
        st.append(Cmd("bash", f"./{engine_name}").done(exec_=True))
    return Script(st)


def _proxy_script(fam: Family, inv: Inventory) -> Script:
    prefill = fam.proxy_prefills(inv.by_role("prefill"))
    decode = inv.by_role("decode")
    c = Cmd("python", f"{inv.paths.vllm_ascend_source_dir}/{PROXY}")("--host", "0.0.0.0")("--port", inv.ports.proxy)
    c("--workers", 1)("--prefiller-hosts", *[n.local_ip for n in prefill])("--prefiller-ports", *[inv.ports.api] * len(prefill))
    c("--decoder-hosts", *[n.local_ip for n in decode])("--decoder-ports", *[inv.ports.api] * len(decode))
    return Script([Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail"), Unset(PROXY_VARS), c.done(exec_=True)])


def _stages(fam: Family, inv: Inventory, nodes: list[NodePlan], heads: dict[str, Node]) -> list[Stage]:
    """The documented start order (and its gates): MetaService, providers, heads, workers, proxy."""
    by_kind = {k: [p for n in nodes for p in n.processes if p.kind == k] for k in
               ("metaservice", "provider", "engine", "launcher", "proxy")}
    starters = by_kind["engine"] + by_kind["launcher"]
    head_names = {h.name for h in heads.values()}
    stages: list[Stage] = []
    if by_kind["metaservice"]:
        stages.append(_metaservice_stage(inv, by_kind["metaservice"][0]))
    if by_kind["provider"]:
        stages.append(_providers_stage(inv, by_kind["metaservice"][0], by_kind["provider"]))
    stages.append(_heads_stage(fam, inv, nodes, [p for p in starters if p.node in head_names]))
    stages.append(_workers_stage(nodes, starters, [p for p in starters if p.node not in head_names]))
    if by_kind["proxy"]:
        stages.append(_proxy_stage(nodes, by_kind["proxy"][0]))
    return stages


_LONG_S = 7200.0  # the guides allow hours for engine readiness on hardware; the sim target scales it


def _metaservice_stage(inv: Inventory, ms: Process) -> Stage:
    host = (ms.api or "").split("//")[1].split(":")[0]  # the MetaService process always has its metrics API
    return Stage.make(name="metaservice", processes=[ms.id], timeout_s=300, gates=[
        Gate.make(kind="tcp", node=ms.node, target=f"{host}:{inv.ports.meta_service}", process=ms.id),
        Gate.make(kind="tcp", node=ms.node, target=f"{host}:{inv.ports.config_store}", process=ms.id),
        Gate.make(kind="http", node=ms.node, target=f"{ms.api}/health", process=ms.id)])


def _providers_stage(inv: Inventory, ms: Process, providers: list[Process]) -> Stage:
    gates = [Gate.make(kind="log", node=p.node, target="Successfully initialized memcache.", process=p.id)
             for p in providers]
    gates.append(Gate.make(kind="metaservice_capacity", node=ms.node, target=f"{ms.api}/metrics", process=ms.id,
                           expect=sum(memcache.member_bytes(inv.node(p.node)) for p in providers)))
    return Stage.make(name="providers", processes=[p.id for p in providers], gates=gates, timeout_s=600)


def _heads_stage(fam: Family, inv: Inventory, nodes: list[NodePlan], head_procs: list[Process]) -> Stage:
    """Heads are up when their PP master or DP RPC port listens."""
    head_gates = []
    for p in head_procs:
        node = next(n for n in nodes if n.name == p.node)
        port = fam.head_port(inv, node.role)
        head_gates.append(Gate.make(kind="tcp", node=node.name, target=f"{node.address}:{port}", process=p.id))
    return Stage.make(name="heads", processes=[p.id for p in head_procs], gates=head_gates, timeout_s=_LONG_S)


def _workers_stage(nodes: list[NodePlan], starters: list[Process], workers: list[Process]) -> Stage:
    """After the workers, every engine API answers /health and /v1/models."""
    api_gates = []
    for n in nodes:
        for p in n.all_processes():
            if p.kind == "engine" and p.api:
                owner = p.id if p in starters else next(q.id for q in n.processes if p in q.children)
                api_gates.append(Gate.make(kind="http", node=n.name, target=f"{p.api}/health", process=owner))
                api_gates.append(Gate.make(kind="http", node=n.name, target=f"{p.api}/v1/models", process=owner))
    return Stage.make(name="workers", processes=[p.id for p in workers], gates=api_gates, timeout_s=_LONG_S)


def _proxy_stage(nodes: list[NodePlan], px: Process) -> Stage:
    # only what every proxy release has: /healthcheck with its instance counts (/v1/models came after 0.23)
    apis = [ApiEndpoint.make(node=n.name, url=p.api, role=n.role, dp_ranks=[])
            for n in nodes for p in n.all_processes() if p.kind == "engine" and p.api]
    return Stage.make(name="proxy", processes=[px.id], timeout_s=120, gates=[
        Gate.make(kind="proxy_instances", node=px.node, target=f"{px.api}/healthcheck", process=px.id,
                  instances=_proxy_instances(apis))])


# ------------------------------------------------------------------------------------ output


def check_out(out: str | Path, force: bool = False) -> Path:
    """Validate ``--out`` before anything is rendered: absent, or an empty directory (any directory with force)."""
    return outputs.check_dir(out, force)


def _write_file(path: Path, text: str, mode: int) -> None:
    # O_EXCL|O_NOFOLLOW: a fresh private directory holds no files, so nothing may be followed or reused
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)  # the umask must not make scripts unexecutable


def write(rendered: Rendered, out: str | Path, force: bool = False, preamble: str = "") -> Path:
    """Render into a fresh temporary directory next to ``out``, then move it into place.

    ``out`` is left untouched unless everything was written; a non-empty ``out`` is refused unless
    ``force`` (its old contents are removed after the new tree is in place). Nothing inside ``out``
    is followed: the tree is built from scratch with O_NOFOLLOW files.
    """
    import shutil  # only render writes files: preflight's start-up stays small
    import tempfile

    out = check_out(out, force)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.k3lab-", dir=parent))
    except OSError as exc:
        raise outputs.failed(parent, exc) from None
    try:
        for reserved in ("plan.json", runbook.NAME, *([k8s.DIR] if rendered.manifests else [])):
            if reserved in rendered.files:
                raise InputError(f"nodes.{reserved}.name: {reserved!r} is reserved for a file of the render")
        for node, files in rendered.files.items():
            (tmp / node).mkdir()
            for name, text in files.items():
                _write_file(tmp / node / name, text, 0o755 if name.endswith((".sh", ".py")) else 0o644)
        _write_file(tmp / "plan.json", plan_json(rendered.plan), 0o644)
        if rendered.manifests:
            (tmp / k8s.DIR).mkdir()
            for name, text in rendered.manifests.items():
                _write_file(tmp / k8s.DIR / name, text, 0o644)
        _write_file(tmp / runbook.NAME, preamble + runbook.text(rendered.plan) + rendered.runbook_extra, 0o644)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        outputs.swap_in(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise outputs.failed(out, exc) from None  # disk full: exit 3, the previous tree in place
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def plan_json(plan: Plan) -> str:
    """The bytes ``json.dumps(jsonable(plan), indent=2)`` gives, from pydantic_core's JSON writer (a
    tenth of the time). That writer leaves DEL and non-ASCII characters as they are; outside strings
    it writes only ASCII and the indentation's newlines, so escaping the rest afterwards is exact."""
    data = jsonable(plan)
    try:
        text = pydantic_core.to_json(data, indent=2).decode()
    except pydantic_core.PydanticSerializationError:  # a lone surrogate (undecodable bytes in argv): not UTF-8
        return json.dumps(data, indent=2) + "\n"
    return _NOT_ASCII.sub(_json_escape, text) + "\n"


_NOT_ASCII = re.compile(r"[^\n\x20-\x7e]")


def _json_escape(m: re.Match) -> str:
    c = ord(m.group())
    if c > 0xFFFF:  # a UTF-16 surrogate pair, as json.dumps writes it
        c -= 0x10000
        return f"\\u{0xD800 | c >> 10:04x}\\u{0xDC00 | c & 0x3FF:04x}"
    return f"\\u{c:04x}"
