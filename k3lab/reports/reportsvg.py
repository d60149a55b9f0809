"""The deployment picture of report.html: inline SVG, no external assets.

Nodes are boxes in one column per role (prefill, decode, mixed, metaservice) with address, rank and
listening ports; the proxy (or the mixed deployment's entrypoint) and a MetaService hosted on a
role node are service boxes. Arrows: proxy -> every API, one P -> D KV-transfer arrow between the
groups (every prefill rank may send to every decode rank), and pool links from each group with
MemCache members to the MetaService. A node is outlined red when one of its checks failed or when a
failure or the run's diagnosis names it (k3lab.reports.failures.marked: a cross-node check names the
nodes in its message, not as its own node); the box says why. All text is escaped: names and addresses
come from inventories.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from k3lab.errors import printable
from k3lab.reports.rows import Check

FAILED = ("failed", "error")
ROLE_ORDER = ("prefill", "decode", "mixed", "metaservice")


def e(value: object) -> str:
    return html.escape(printable(str(value)), quote=True)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


_PORT_TAGS = (("API", "api"), ("mooncake", "kv"), ("DP RPC", "dp-rpc"), ("PP master", "pp"), ("proxy", "proxy"),
              ("meta_service", "meta"), ("config_store", "store"), ("metrics", "metrics"))


def _ports(node: dict[str, Any]) -> list[tuple[str, str]]:
    """(short tag, port or range) for every port the node's processes bind."""
    out = []
    for proc in _procs(node):
        for pu in proc.get("ports", []):
            if not pu.get("listens", True):
                continue
            purpose = str(pu.get("purpose", ""))
            tag = next((t for key, t in _PORT_TAGS if key in purpose), purpose.split(" ")[0].lower() or "port")
            span = f"{pu.get('port')}" + (f"-{pu['last']}" if pu.get("last") else "")
            out.append((tag, span))
    return out


def _procs(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for proc in node.get("processes", []):
        out.append(proc)
        out.extend(proc.get("children", []))
    return out


def _in_pool(node: dict[str, Any]) -> bool:
    """A MemCache provider runs here, or an engine is configured as a MemCache client."""
    return any(p.get("kind") == "provider" or (p.get("kind") != "metaservice" and
                                                 any(str(k).startswith("MMC_") for k in p.get("env", {})))
               for p in _procs(node))


W, H, GAP, COLGAP, TOP = 230, 76, 12, 96, 84  # box size, spacing; TOP leaves room for headers and the top lane


@dataclass
class _Box:
    x: float
    y: float

    @property
    def mid(self) -> float:
        return self.y + H / 2


@dataclass
class _Layout:
    """Where everything goes: one column per role (in ROLE_ORDER), the MetaService's own column if
    it is not a node of the plan, and the lane under the columns that the pool links follow."""

    roles: list[str]
    columns: list[list[dict[str, Any]]]
    col_x: list[float]
    meta_host: dict[str, Any] | None
    meta_box_is_node: bool
    has_meta: bool
    lane_bottom: float


def _layout(plan: dict[str, Any]) -> _Layout:
    nodes = plan.get("nodes", [])
    roles = sorted({str(n.get("role")) for n in nodes},
                   key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else len(ROLE_ORDER), r))
    columns = [[n for n in nodes if str(n.get("role")) == r] for r in roles]
    meta_host = next((n for n in nodes for p in _procs(n) if p.get("kind") == "metaservice"), None)
    meta_box_is_node = meta_host is not None and str(meta_host.get("role")) == "metaservice"
    has_meta = bool(plan.get("expect", {}).get("metaservice")) or meta_host is not None
    col_x: list[float] = [20 + (i + 1) * (W + COLGAP) for i in range(len(columns) + (has_meta and not meta_box_is_node))]
    rows = max([len(c) for c in columns] or [1])
    frame_bottom = TOP + rows * (H + GAP) - GAP + 8
    return _Layout(roles, columns, col_x, meta_host, meta_box_is_node, has_meta, frame_bottom + 22)


def _outcomes_per_node(tests: list[Check]) -> dict[str, dict[str, int]]:
    per_node: dict[str, dict[str, int]] = {}
    for t in tests:
        if t["node"]:
            counts = per_node.setdefault(t["node"], {})
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    return per_node


def _columns(lay: _Layout, per_node: dict[str, dict[str, int]], boxes: dict[str, _Box],
             marked: dict[str, list[str]]) -> list[str]:
    parts = []
    for ci, (role, col) in enumerate(zip(lay.roles, lay.columns)):
        x = lay.col_x[ci]
        parts.append(f'<rect class="frame" x="{x - 8}" y="{TOP - 8}" width="{W + 16}" '
                     f'height="{len(col) * (H + GAP) - GAP + 16}" rx="8"/>')
        parts.append(f'<text class="hdr" x="{x}" y="{TOP - 40}">{e(_clip(role, 24))} ({len(col)})</text>')
        for ri, node in enumerate(col):
            box = boxes[str(node.get("name"))] = _Box(x, TOP + ri * (H + GAP))
            name = str(node.get("name"))
            parts.append(_node_box(node, box, per_node.get(name, {}), marked.get(name, [])))
    return parts


def _kv_link(expect: dict[str, Any], lay: _Layout) -> list[str]:
    """P -> D KV transfer, drawn once between the groups: every prefill rank may send to every decode rank."""
    if not (expect.get("kv_connector") and "prefill" in lay.roles and "decode" in lay.roles):
        return []
    pi, di = lay.roles.index("prefill"), lay.roles.index("decode")
    y = TOP + min(len(lay.columns[pi]), len(lay.columns[di])) * (H + GAP) / 2
    x1, x2 = lay.col_x[pi] + W + 8, lay.col_x[di] - 8
    return [f'<path class="link kv" d="M{x1},{y} H{x2 - 2}" marker-end="url(#a-kv)"/>'
            f'<text class="lbl" x="{x1 + 4}" y="{y - 6}">KV transfer</text>']


def _pool(expect: dict[str, Any], lay: _Layout, boxes: dict[str, _Box]) -> tuple[list[str], list[str]]:
    """The MetaService box (unless it is a node's) and one link per column with pool members."""
    if not lay.has_meta:
        return [], []
    parts: list[str] = []
    if lay.meta_box_is_node:
        meta = boxes[str((lay.meta_host or {}).get("name"))]
    else:
        meta = _Box(lay.col_x[-1], TOP)
        url = (expect.get("metaservice") or {}).get("url", "?")
        parts.append(_service_box(meta, "MetaService", url, f"on {lay.meta_host.get('name')}" if lay.meta_host else ""))
    links = []
    for ci, (role, col) in enumerate(zip(lay.roles, lay.columns)):
        members = [n for n in col if _in_pool(n)]
        if not members or role == "metaservice":
            continue
        fx = lay.col_x[ci] + W / 2
        fy = TOP + len(col) * (H + GAP) - GAP + 8
        links.append(f'<path class="link pool" d="M{fx},{fy} V{lay.lane_bottom} H{meta.x + W / 2 + ci * 6} '
                     f'V{meta.y + H + 2}" marker-end="url(#a-pool)"/>'
                     f'<text class="lbl" x="{fx + 4}" y="{lay.lane_bottom - 4}">pool: {len(members)}/{len(col)}</text>')
    return parts, links


def _legend(lane_bottom: float) -> str:
    return (f'<g class="legend" transform="translate(20,{lane_bottom + 18})">'
            '<path class="link api" d="M0,0 H28"/><text x="34" y="4">proxy / API</text>'
            '<path class="link kv" d="M130,0 H158"/><text x="164" y="4">KV transfer</text>'
            '<path class="link pool" d="M270,0 H298"/><text x="304" y="4">MemCache pool</text>'
            '<rect class="box fail" x="420" y="-8" width="22" height="14" rx="3"/>'
            '<text x="448" y="4">failed, or named by a failure or the diagnosis</text></g>')


def _defs() -> str:
    return "<defs>" + "".join(
        f'<marker id="a-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" '
        f'markerWidth="{14 if k == "kv" else 9}" markerHeight="{14 if k == "kv" else 9}" orient="auto">'
        f'<path d="M0,0 L10,5 L0,10 z" class="head {k}"/></marker>' for k in ("api", "kv", "pool")) + "</defs>"


def topology_svg(plan: dict[str, Any], tests: list[Check], marked: dict[str, list[str]] | None = None) -> str:
    """Nodes as boxes in one column per role; proxy and MetaService as service boxes; arrows between.
    ``marked``: node -> why a failure or the diagnosis names it (outlined red like a node with a failed check)."""
    expect, nodes = plan.get("expect", {}), plan.get("nodes", [])
    lay = _layout(plan)
    boxes: dict[str, _Box] = {}
    parts = _columns(lay, _outcomes_per_node(tests), boxes, marked or {})
    # the entry point: the PD proxy, or the API of the mixed deployment's head node
    entry_host = next((str(n.get("name")) for n in nodes for p in _procs(n) if p.get("kind") == "proxy"), None)
    entry = _Box(20, TOP)
    parts.append(_service_box(entry, "Proxy" if expect.get("proxy") else "Entrypoint", expect.get("entrypoint", "?"),
                              f"on {entry_host}" if entry_host else "clients send requests here"))
    links = [_route(entry, boxes[str(api.get("node"))], lay.col_x, "api")
             for api in expect.get("apis", []) if boxes.get(str(api.get("node")))]
    links += _kv_link(expect, lay)
    pool_parts, pool_links = _pool(expect, lay, boxes)
    parts += pool_parts
    links += pool_links
    width = max((lay.col_x[-1] if lay.col_x else 20) + W + 30, 760)  # at least as wide as the legend
    height = lay.lane_bottom + 46
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="topo" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="deployment topology">{_defs()}'
            + "".join(links) + "".join(parts) + _legend(lay.lane_bottom) + "</svg>")


def _route(src: _Box, dst: _Box, col_x: list[float], kind: str) -> str:
    """Orthogonal path: through the gap left of the target column, over the top lane if columns lie between."""
    x0, y0 = src.x + W, src.mid
    gap = dst.x - 8 - COLGAP / 2 + 4
    first_gap = col_x[0] - 8 - COLGAP / 2 + 4 if col_x else gap
    if gap <= first_gap + 1:
        d = f"M{x0},{y0} H{gap} V{dst.mid} H{dst.x - 2}"
    else:
        lane = TOP - 22
        d = f"M{x0},{y0} H{first_gap} V{lane} H{gap} V{dst.mid} H{dst.x - 2}"
    return f'<path class="link {kind}" d="{d}" marker-end="url(#a-{kind})"/>'


def _node_box(node: dict[str, Any], box: _Box, counts: dict[str, int], named: list[str]) -> str:
    name = str(node.get("name"))
    total = sum(counts.values())
    passed = counts.get("passed", 0) + counts.get("xpassed", 0)
    bad = sum(counts.get(o, 0) for o in FAILED)
    skipped = total - passed - bad
    status = (f"{bad} failed / {total} checks" if bad else
              _named_status(named) if named else
              f"{passed} passed, {skipped} skipped" if total else "no checks")
    cls = "fail" if bad or named else ("pass" if passed else "none")
    ports = _ports(node)
    port_line = " ".join(f"{t} {s}" for t, s in ports)
    rank = node.get("rank")
    title = f"{name} ({node.get('role')}, rank {rank}) {node.get('address')}\n" + \
        "\n".join(f"{t}: {s}" for t, s in ports) + f"\n{status}" + "".join(f"\n{why}" for why in named)
    x, y = box.x, box.y
    return (f'<g class="node {cls}" data-node="{e(name)}"><title>{e(title)}</title>'
            f'<rect class="box {cls}" x="{x}" y="{y}" width="{W}" height="{H}" rx="6"/>'
            f'<text class="name" x="{x + 8}" y="{y + 17}">{e(_clip(name, 16))}'
            f'<tspan class="sub" dx="6">{e(_clip(str(node.get("role")), 12))} · rank {e(rank)}</tspan></text>'
            f'<text x="{x + 8}" y="{y + 34}">{e(_clip(str(node.get("address")), 34))}</text>'
            f'<text class="sub" x="{x + 8}" y="{y + 50}">{e(_clip(port_line or "no listening ports", 38))}</text>'
            f'<text class="st {cls}" x="{x + 8}" y="{y + 67}">{e(status)}</text></g>')


def _named_status(named: list[str]) -> str:
    """The box's status line for a node without a failed check of its own that a failure or the diagnosis names."""
    diag = [w.removeprefix("diagnosis: ") for w in named if w.startswith("diagnosis: ")]
    fails = sum(w.startswith("named by ") for w in named)
    return ", ".join(([f"named by {fails} failure(s)"] if fails else []) + ([f"diagnosis: {diag[0]}"] if diag else [])
                     ) or named[0]


def _service_box(box: _Box, title: str, url: str, note: str) -> str:
    return (f'<g class="svc"><rect class="svc" x="{box.x}" y="{box.y}" width="{W}" height="{H}" rx="6"/>'
            f'<text class="name" x="{box.x + 8}" y="{box.y + 20}">{e(title)}</text>'
            f'<text x="{box.x + 8}" y="{box.y + 40}">{e(_clip(str(url), 34))}</text>'
            f'<text class="sub" x="{box.x + 8}" y="{box.y + 58}">{e(_clip(note, 36))}</text></g>')
