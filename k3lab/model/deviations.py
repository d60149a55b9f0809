"""Where the kit departs from the guides, and why. Listed in every plan.

``seed``: the guide is wrong or incomplete and the kit does what works on the real component.
``target``: the sim target cannot do what the guide does (no NPUs, no privileged containers).
``kit``: how the kit automates a step a person does by hand.
"""
from __future__ import annotations

from k3lab.model.catalog import Scenario

# The vllm-ascend release whose example programs (the proxy, launch_online_dp.py) the sim runs per guide.
# The registry carries no 0.23.0 sdist; 0.23.0.post1 is its fix release (deviation sim-vllm-ascend).
SIM_VLLM_ASCEND_K3 = "0.23.0.post1"
SIM_VLLM_ASCEND_K31 = "0.30.0rc2"


def sim_vllm_ascend(seed: str) -> str:
    """The vllm-ascend release whose examples the simulator runs for a scenario of this guide."""
    return SIM_VLLM_ASCEND_K3 if "0.23.0" in seed else SIM_VLLM_ASCEND_K31


def needs_hash_seed(sc: Scenario, role: str) -> bool:
    """Engines that transfer KV but whose guide template sets no PYTHONHASHSEED."""
    return (sc.family == "k3_pd" and role == "decode") or (sc.family == "k31_a5" and not sc.params.get("pooled"))


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
    if sc.family == "k3_pd":
        add("k3-pp-size", "seed", "drops --pp-size 1 from the launch_online_dp.py command (K3 §5.1.2.3)",
            "the real launch_online_dp.py has no --pp-size option and exits with 'unrecognized arguments'")
        add("k3-mmc-local", "seed", "mmc-local.conf for the Prefill engine clients uses the K3.1 Pro A3 reference keys "
            "with dram.size = 1GB", "K3 §5.1.2.1 only says to adapt the package examples; with no standalone providers "
            "the engine clients are the only pool members, so they must contribute DRAM")
        add("k3-metaservice-host", "kit", "the MetaService runs on its own node 'meta' by default",
            "K3 §5.1.2.1 does not say where; any node works and the inventory can place it")
        if opts.get("parsers", "on") == "on":
            add("k3-pd-parsers", "seed", "adds --enable-auto-tool-choice --reasoning-parser kimi_k3 "
                "--tool-call-parser kimi_k3 to both PD templates",
                "K3 §10 says all three are required for reasoning and tool calling, but the §5.1.2 templates omit "
                "them: without them reasoning markers leak into content and tool_choice auto gets HTTP 400 "
                "(option parsers=off renders the templates as written)")
        add("k3-proxy", "seed", "the proxy registers all eight P and eight D engine APIs",
            "K3 §5.1.2.3 defers the proxy to the Mooncake PD tutorial, which registers every engine API")
    if needs_hash_seed(sc, "decode"):
        add("hash-seed", "seed", "launch.sh exports PYTHONHASHSEED=0 where the guide's template sets none",
            "engines that transfer KV must hash prefixes identically; the guide sets it on the other role only "
            "or nowhere")
    if sc.family == "k31_a3_pooled":
        add("a3-pooled-kv-ports", "seed", "Mooncake kv_port 36000/36200 instead of the reference 33100/33500",
            "33100 and 33500 lie inside the Mooncake transfer-engine range [20000, 36000) of a 16-device A3 node")
    if sc.family == "k31_a3" and "draft" in opts:
        add("a3-dspark-option", "seed", "DSpark3 --speculative-config reconstructed from the Key PD Settings table "
            "and §5.3.5 (draft TP 4/16, 3 tokens, bfloat16 draft cache, eager on Prefill only)",
            "the 'Add the following option' text of §5.1.1 is missing from the guide")
    if sc.family == "k31_a5":
        if opts.get("parsers", "on") == "on":
            add("a5-parsers", "seed", "adds --enable-auto-tool-choice --reasoning-parser kimi_k3 --tool-call-parser kimi_k3",
                "the 950DT templates set only --tokenizer-mode; §5.1.1 and §10 say to configure the parsers together "
                "for reasoning and tool calling (option parsers=off renders the bare template)")
        add("a5-engine-id", "kit", "ENGINE_ID is 'prefill' on every P node (one PP engine) and 'decode<rank>' on "
            "each D node (inventory engine_id overrides)",
            "the guide asks for a unique <PREFILL_ENGINE_ID>/<DECODE_ENGINE_ID> per engine; the four P nodes form one "
            "engine, each D node is its own")
        if sc.params.get("pooled"):
            add("a5-mmc-protocol", "seed", "950DT client configs use protocol device_sdma like the A3 reference",
                "§5.3.2 gives no 950DT protocol; set the one your fabric supports (device_urma/device_uboe)")
    if sc.pool != "none" and sc.family != "k3_pd":
        add("metaservice-host", "kit", "the MetaService runs on its own node 'meta' by default",
            "the guide allows a separate MetaService host; the inventory can place it on any node")
    if sc.pd:
        add("proxy-node", "kit", "the proxy runs on P0's node by default, with proxy variables unset",
            "the guide names a 'Proxy node' without fixing it; httpx honours proxy variables, which would "
            "misroute P and D traffic")
    if target == "sim":
        add("sim-network", "target", "bridge network with a static IP per node instead of --net=host",
            "each simulated node needs its own address on one machine")
        add("sim-privileged", "target", "no --privileged", "the container runtime here refuses privileged containers")
        add("sim-devices", "target", "no --device /dev/davinci*; driver and tool mounts come from the sim image",
            "there are no NPUs; stand-ins answer npu-smi, hccn_tool and the engine from a simulated device table")
        add("sim-cache", "target", "/root/.cache is staged from fixtures/ (small checkpoints) instead of a host mount",
            "the sim has no model weights; files are copied through the Docker API")
        add("sim-net-admin", "target", "adds --cap-add NET_ADMIN", "to give simulated NPU devices their own addresses")
        if sc.pd:
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
