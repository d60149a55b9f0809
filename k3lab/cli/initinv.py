"""``k3lab init SCENARIO --out lab.yaml``: a commented lab inventory to fill in.

Every key the scenario uses is written, with its meaning and default taken from the inventory
model (the same text as ``k3lab schema``). Addresses are documentation placeholders
(192.0.2.0/24): the file renders as is, and preflight warns (PF-ADDR-PLACEHOLDER) until each one is
replaced with the lab's own.
"""
from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from pydantic import BaseModel

from k3lab import outputs
from k3lab.model import catalog, inventory, siminventory, targetkinds

PLACEHOLDER_NET = "192.0.2"  # RFC 5737 TEST-NET-1: never a real lab's address
WIDTH = 100


def _comment(text: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, WIDTH - len(indent) - 2)]


def _value(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    import json

    text = str(v)
    # quote only what YAML would otherwise read as something else
    plain = text and text[0].isalnum() or text.startswith("/")
    risky = any(c in text for c in ":#{}[],&*!|>'\"%@`") and not text.startswith("/")
    return text if plain and not risky else json.dumps(text)


def _field(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].description or ""


def render_text(sid: str, target: str = "lab") -> str:
    sc = catalog.get(sid)
    sim = siminventory.default(sid)
    roles = dict(sc.roles)
    if sc.pool != "none":
        roles["metaservice"] = 1
    out: list[str] = []
    out += [f"# k3lab lab inventory for {sc.id}: {sc.title}",
            f"# Guide: {sc.section} ({sc.seed.split(' (')[0]}); platform {sc.platform}, "
            f"{sc.devices} NPUs per node.",
            "# Nodes: " + ", ".join(f"{n} {r}" for r, n in roles.items()) + ".",
            "#",
            *_comment("Replace every 192.0.2.x address, NIC and endpoint with your lab's (preflight warns "
                      "PF-ADDR-PLACEHOLDER until you do). Keys left as they are take the documented defaults; "
                      "commented-out keys are optional. Then: k3lab preflight " + sid + " -i THIS_FILE, and "
                      "k3lab cycle " + sid + " -i THIS_FILE. The JSON Schema is k3lab schema."),
            ""]
    out += _comment(_field(inventory.Inventory, "scenario"))
    out += [f"scenario: {sid}", ""]
    out += _comment(_field(inventory.Inventory, "image") + ". The guide also names an openEuler build of it; "
                    "to use that one, swap the two lines below")
    out += [f"image: {_value(sc.image)}", f"# image: {_value(sc.openeuler_image)}", ""]
    out += _comment(_field(inventory.Inventory, "model_path"))
    out += [f"model_path: {_value(sc.model_path)}", ""]
    if sc.dspark != "never":
        out += _comment(_field(inventory.Inventory, "draft_model_path"))
        out += [f"# draft_model_path: {_value(sc.draft_default) if getattr(sc, 'draft_default', None) else '/path'}",
                ""]
    if sc.pd:
        out += _comment(_field(inventory.Inventory, "proxy_node"))
        out += ["# proxy_node: p0", ""]
    if sc.pool != "none":
        out += _comment(_field(inventory.Inventory, "metaservice_node") + " (this file gives the MetaService its "
                        "own node, 'meta'; remove that node and set this key to run it on another node)")
        out += ["# metaservice_node: p0", ""]
    out += _sections(sid, sim)
    if targetkinds.kind(target).manifests:
        out += _k8s_section()
    out += _comment("rank is role-local, from 0: the DP start rank (mixed, decode) or the PP node rank (prefill); "
                    "the rank-0 node of each role is its head (DP address, PP master). nic is the interface that "
                    "owns local_ip; endpoint is how the kit reaches the node's Docker engine.")
    out.append("nodes:")
    for i, node in enumerate(sim.nodes):
        ip = f"{PLACEHOLDER_NET}.{11 + i}"
        out += [f"  - name: {node.name}", f"    role: {node.role}", f"    rank: {node.rank}",
                f"    local_ip: {ip}", "    nic: enp189s0f0", f"    endpoint: ssh://root@{ip}"]
        if sc.platform == "950DT" and node.role in ("prefill", "decode"):
            out.append(f"    # engine_id: {node.role}  # 950DT ENGINE_ID (default: prefill / decode<rank>)")
        out.append("    # container_name: vllm-ascend  # distinct names when nodes share an endpoint")
    return "\n".join(out) + "\n"


def _sections(sid: str, sim) -> list[str]:
    """The ports (only those the scenario uses), paths and lab sections, each key with its meaning."""
    out: list[str] = []
    used = used_ports(sid)
    for section, model in (("ports", inventory.Ports), ("paths", inventory.Paths), ("lab", inventory.Lab)):
        out += _comment(_field(inventory.Inventory, section) +
                        (f" (only the {len(used)} this scenario uses)" if section == "ports" else ""))
        out.append(f"{section}:")
        defaults = getattr(sim, section)
        for name in model.model_fields:
            if section == "ports" and name not in used:
                continue
            out += _comment(_field(model, name), "  ")
            value = getattr(defaults, name)
            out.append(f"  {'# ' if value is None else ''}{name}: {_value(value)}")
        out.append("")
    return out


def _k8s_section() -> list[str]:
    """The inventory's k8s section: the keys a render needs, the optional ones commented out."""
    k, w = inventory.K8s, inventory.K8sWeights
    out = _comment(_field(inventory.Inventory, "k8s") + ". Replace the context, namespace and claim with your "
                   "cluster's; the nodes below keep their addresses and NICs (the pods use host networking)")
    out.append("k8s:")
    for name, value in (("context", "my-cluster"), ("namespace", "k3lab"),
                        ("npu_resource", inventory.DEFAULT_NPU_RESOURCE)):
        out += _comment(_field(k, name), "  ") + [f"  {name}: {_value(value)}"]
    out += _comment(_field(k, "weights"), "  ") + ["  weights:"]
    out += _comment(_field(w, "claim"), "    ") + ["    claim: k3-weights"]
    out += _comment(_field(w, "host_path"), "    ") + ["    # host_path: /root/.cache"]
    out += _comment(_field(w, "mount_path"), "    ") + ["    # mount_path: /root/.cache"]
    out += _comment(_field(k, "shm_size"), "  ") + ["  # shm_size: 1Gi"]
    out += _comment(_field(k, "node_names"), "  ") + ["  # node_names:", "  #   p0: a3-node-01"]
    out += _comment(_field(k, "node_selector"), "  ") + ["  # node_selector:", "  #   accelerator: ascend"]
    return out + [""]


def used_ports(sid: str) -> list[str]:
    """The ``ports`` keys the scenario's artefacts depend on: rendered once per key with that port moved,
    a key whose move changes nothing (no script, no plan value) is one the scenario does not use."""
    from k3lab.render import artefacts as render

    sim = siminventory.default(sid)

    def text(inv) -> str:
        r = render.build(sid, inv)
        return render.plan_json(r.plan) + repr(sorted(r.files.items()))

    base = text(sim)
    used = []
    for name, value in sim.ports:
        moved = f"{int(value.split('-')[0]) + 1}-{int(value.split('-')[1]) + 1}" if isinstance(value, str) \
            else value + 1
        ports = sim.ports.model_copy(update={name: moved})
        if text(sim.model_copy(update={"ports": ports})) != base:
            used.append(name)
    return used


def write(sid: str, out: str, force: bool = False, target: str = "lab") -> Path:
    path = outputs.check_file(out, force, what="inventory file")
    text = render_text(sid, target)
    inventory.parse(__import__("yaml").safe_load(text), "generated inventory")  # never write an invalid file
    outputs.write_file(path, text)
    return path


def cmd_init(args: argparse.Namespace) -> int:
    from k3lab.model.select import scenario_id

    path = write(scenario_id(args.scenario), args.out, force=args.force, target=getattr(args, "target", None) or "lab")
    print(f"wrote {path}: an inventory for {args.scenario}; replace the 192.0.2.x placeholders, then "
          f"k3lab preflight {args.scenario} -i {path}")
    return 0
