"""Ranks, ports, headless nodes and the MetaService pool, seen live."""
from __future__ import annotations

import re

import pytest
import requests

from k3lab.conform import nodetools
from k3lab.conform.memcache import health_ok
from k3lab.conform.plugin import skip
from k3lab.launch import metrics

KIND = "environment"  # default class of a failure here


def _listening(tools) -> set[int]:
    """Ports in LISTEN state from /proc/net/tcp{,6}: present on every Linux node, no extra tool needed."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        out = tools.run(f"cat {table}").stdout
        for line in out.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.conformance(
    id="ranks-ports.test_planned_ports_listen", area="ranks-ports",
    must="Every planned listening port MUST listen on its planned node.",
    remedy="read the process's log for a bind failure or a crash; free the port on the node or choose another in the inventory.")
def test_planned_ports_listen(node, tools):
    # the DP RPC port is not expected: real vLLM closes it once the engines have handshaken
    expected = [(u, p) for p in node.all_processes() for u in p.ports if u.listens and not u.startup_only]
    if not expected:
        skip("no-ports", "no listening ports planned on this node")
    live = _listening(tools[node.name])
    missing = []
    for use, proc in expected:
        lo, hi = use.span
        absent = [port for port in range(lo, hi + 1) if port not in live]
        if absent:
            missing.append(f"{use.purpose} of {proc.id}: {absent[:4]}{'...' if len(absent) > 4 else ''}")
    assert not missing, (f"{node.name}: expected listening, seen closed: {'; '.join(missing)}; check that process's "
                         f"log for a bind error or an early exit")


@pytest.mark.conformance(
    id="ranks-ports.test_startup_ports_closed", area="ranks-ports",
    must="The DP RPC (handshake) port MUST be closed once the engines serve: vLLM closes it after the handshake, so a listener there is another process.",
    remedy="find and stop the process listening on the DP RPC port after start-up (ss -ltnp on the node).")
def test_startup_ports_closed(node, tools):
    held = [(u, p) for p in node.all_processes() for u in p.ports if u.listens and u.startup_only]
    if not held:
        skip("no-startup-ports", "no start-up-only port planned on this node")
    live = _listening(tools[node.name])
    still = [f"{use.purpose} {port} of {proc.id}" for use, proc in held
             for port in range(use.span[0], use.span[1] + 1) if port in live]
    assert not still, (f"{node.name}: expected closed after start-up, seen listening: {'; '.join(still)}. vLLM "
                       "closes it once the engines have handshaken, so another process holds it (a stale head or "
                       "a stray): find it with ss -ltnp and stop it, or the next start-up cannot bind the port")


def _planned_port(proc) -> int | None:
    argv = proc.argv
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else None


@pytest.mark.conformance(
    id="ranks-ports.test_headless_nodes_expose_no_api", area="ranks-ports",
    must="Headless nodes MUST NOT answer HTTP on their API port.",
    remedy="stop the process answering HTTP on the headless node's API port; headless nodes run engines without an API server.")
def test_headless_nodes_expose_no_api(plan, http):
    if not plan.expect.headless:
        skip("no-headless", "no headless nodes in this scenario")
    exposed = []
    for name in plan.expect.headless:
        node = plan.node(name)
        for proc in node.all_processes():
            port = _planned_port(proc) if proc.kind == "engine" else None
            if port is None:
                continue
            try:
                r = http.get(f"http://{node.address}:{port}/health", timeout=2)
                exposed.append(f"{name}:{port} answered {r.status_code}")
            except requests.RequestException:
                pass
    assert not exposed, f"headless nodes expose an API: {exposed}; start them with --headless"


def _engine_claims(plan, tools) -> dict[tuple[str, str, int], list[str]]:
    """(role, 'dp'|'pp', rank) -> nodes whose live ``vllm serve`` command line claims it."""
    seen: dict[tuple[str, str, int], list[str]] = {}
    for node in plan.nodes:
        out = tools[node.name].run(nodetools.PROC_CMDLINES).stdout
        for line in out.splitlines():
            if " serve " not in line or "vllm" not in line:
                continue
            if "--nnodes" in line:  # one PP engine over several nodes: its node rank is the claim
                m = re.search(r"--node-rank (\d+)", line)
                seen.setdefault((node.role, "pp", int(m.group(1)) if m else 0), []).append(node.name)
                continue
            m = re.search(r"--data-parallel-rank (\d+)", line) or re.search(r"--data-parallel-start-rank (\d+)", line)
            seen.setdefault((node.role, "dp", int(m.group(1)) if m else 0), []).append(node.name)
    return seen


@pytest.mark.conformance(
    id="ranks-ports.test_engine_ranks_claimed_once", area="ranks-ports",
    must="Every planned DP rank and PP node rank MUST be claimed by exactly one live engine, on its planned node.",
    remedy="give each node its planned DP start rank / PP node rank (inventory rank); restart the engines that claimed another.")
def test_engine_ranks_claimed_once(plan, tools):
    seen = _engine_claims(plan, tools)
    wrong = []
    groups = [(role, "dp", ranks) for role, ranks in plan.expect.dp_groups.items()
              if not (role == "prefill" and plan.expect.pp_groups)]
    groups += [(role, "pp", ranks) for role, ranks in plan.expect.pp_groups.items()]
    for role, kind, ranks in groups:
        noun = "DP rank" if kind == "dp" else "PP node rank"
        for rank, planned in ranks.items():
            owners = [n for n in seen.get((role, kind, int(rank)), [])]
            if owners != [planned]:
                wrong.append(f"{role} {noun} {rank}: expected on {planned}, seen on {owners or 'no live engine'}")
    assert not wrong, ("; ".join(wrong) + ". Start each node with its planned rank (--data-parallel-rank / "
                       "--data-parallel-start-rank / --node-rank as in its rendered script)")


def _dram_capacity(text: str) -> tuple[dict[str, int], int]:
    """DRAM bytes per segment and in total, from the MetaService's Prometheus text."""
    segments = {seg: int(v) for seg, v in metrics.by_label(text, "memcache_segment_capacity_bytes", "segment").items()
                if seg.endswith("-dram")}
    return segments, int(metrics.total(text, "memcache_total_capacity_bytes", medium="dram"))


@pytest.mark.conformance(
    id="metaservice.test_metaservice_capacity", area="metaservice",
    must="The MetaService MUST report the planned DRAM segments and total capacity.",
    remedy="start the MetaService and every provider with the planned DRAM sizes (mmc-meta.conf, mmc-local.conf).")
def test_metaservice_capacity(plan, http):
    meta = plan.expect.metaservice
    if meta is None:
        skip("no-metaservice", "no MetaService in this scenario")
    health = http.get(f"{meta.metrics_url}/health", timeout=5)
    assert health_ok(health.status_code, health.text), f"MetaService /health: {health.status_code} {health.text[:200]}"
    text = http.get(f"{meta.metrics_url}/metrics", timeout=5).text
    assert "memcache_total_capacity_bytes" in text, ("the MetaService serves no capacity metrics: MemCache 1.0.x "
                                                     "has none; the kit supports memcache_hybrid 1.1 and later")
    segments, total = _dram_capacity(text)
    if meta.segments is None:
        assert total > 0, "MetaService reports no DRAM capacity: no pool member registered"
        return
    assert len(segments) == meta.segments, (f"{len(segments)} DRAM segment(s) registered, expected {meta.segments}: "
                                            "a provider is missing; check its log for 'Successfully initialized'")
    # segment ids name ranks, not nodes: with per-node sizes only the total is comparable
    short = {k: v for k, v in segments.items() if meta.segment_bytes is not None and v != meta.segment_bytes}
    assert not short, f"segments with unexpected capacity {short}, expected {meta.segment_bytes} each"
    assert total == meta.total_bytes, f"total DRAM {total}, expected {meta.total_bytes}"
