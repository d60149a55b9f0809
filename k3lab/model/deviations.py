"""Where the kit departs from the guides, and why. Listed in every plan.

``seed``: the guide is wrong or incomplete and the kit does what works on the real component.
``target``: the sim target cannot do what the guide does (no NPUs, no privileged containers).
``kit``: how the kit automates a step a person does by hand.
"""
from __future__ import annotations

from k3lab.model import families, targetkinds
from k3lab.model.catalog import Scenario
from k3lab.model.inventory import Inventory

# The vllm-ascend release whose example programs (the proxy, launch_online_dp.py) the sim runs per guide.
# The registry carries no 0.23.0 sdist; 0.23.0.post1 is its fix release (deviation sim-vllm-ascend).
SIM_VLLM_ASCEND_K3 = "0.23.0.post1"
SIM_VLLM_ASCEND_K31 = "0.30.0rc2"


def sim_vllm_ascend(seed: str) -> str:
    """The vllm-ascend release whose examples the simulator runs for a scenario of this guide."""
    return SIM_VLLM_ASCEND_K3 if "0.23.0" in seed else SIM_VLLM_ASCEND_K31


def for_scenario(sc: Scenario, opts: dict[str, str], target: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []

    def add(id: str, scope: str, what: str, why: str) -> None:
        out.append({"id": id, "scope": scope, "what": what, "why": why})

    add("docker-detached", "kit", "docker run -d ... IMAGE sleep infinity instead of --rm -it ... IMAGE bash",
        "the kit starts processes with docker exec and must keep logs and exit status after a failure "
        "(the K3.1 guide itself says to rerun without --rm to retain them)")
    add("hccn-conf-mount", "seed", "adds -v /etc/hccn.conf:/etc/hccn.conf to docker run",
        "the guides' docker run omits it, but the multi-node checks need /etc/hccn.conf inside the container "
        "(vllm-ascend PD tutorials mount it)")
    add("launch-wrapper", "kit", "each node's engine is started by launch.sh (cd to the work dir, then the guide's "
        "bash or launch_online_dp.py command), launch_online_dp.py is copied from the image's vllm-ascend examples",
        "the guides say to place the launcher beside run_dp_template.sh and run it from that directory")
    out += families.model_of(sc).deviations(sc, opts)  # the family's own, hash seed and pool host included
    if sc.pd:
        add("proxy-node", "kit", "the proxy runs on P0's node by default, with proxy variables unset",
            "the guide names a 'Proxy node' without fixing it; httpx honours proxy variables, which would "
            "misroute P and D traffic")
    tk = targetkinds.kind(target)
    for id, what, why in tk.deviations:
        add(id, "target", what, why)
    if tk.simulated and sc.pd:
        version = sim_vllm_ascend(sc.seed)
        if version == SIM_VLLM_ASCEND_K3:
            add("sim-vllm-ascend", "target", f"the proxy and launch_online_dp.py are the real ones of vllm-ascend "
                f"{version} (from the package registry), the fix release of the guide's 0.23.0",
                "the sim has no vllm-ascend image; the registry's sdist carries the released example programs")
        else:
            add("sim-vllm-ascend", "target", f"the proxy and launch_online_dp.py are the real ones of vllm-ascend "
                f"{version}, older than the guide's 0.30.0",
                f"0.30.0 is not on the package registry; {version} is the newest release there (its proxy has "
                "/v1/models, which the kit's gates and checks do not use)")
    return out


def for_inventory(inv: Inventory) -> list[dict[str, str]]:
    """The lab's own mounts (``mounts``, ``nodes[].mounts``): one deviation naming each and its nodes."""
    per_mount: dict[str, list[str]] = {}
    for node in inv.nodes:
        for m in inv.mounts_for(node):
            spec = f"-v {m.source}:{m.container_path}{':ro' if m.read_only else ''}"
            per_mount.setdefault(spec, []).append(node.name)
    if not per_mount:
        return []
    every = len(inv.nodes)
    listed = "; ".join(spec + ("" if len(nodes) == every else f" (nodes {', '.join(nodes)})")
                       for spec, nodes in per_mount.items())
    return [{"id": "inventory-mounts", "scope": "kit", "what": f"adds the inventory's mounts to docker run: {listed}",
             "why": "the lab keeps files the scripts use outside the guide's mounts (weights on a shared "
                    "filesystem); the guides say to update the mount path when the model directory is outside "
                    "/root/.cache/ (K3.1 Pro §4.1), and the kit does it from the inventory"}]
