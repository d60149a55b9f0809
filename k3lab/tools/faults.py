"""The fault catalog: every known failure mode, how it is injected, and which checks must fail.

A row names what must fail by check id (the registry, :mod:`k3lab.model.checks`; ``k3lab checks``
lists each check with the rows that prove it): ``PF-*``, ``LPF-*``, ``HST-*``, or a suite check's id with
its parameter (``npu.test_npu_smi_devices_healthy[d1]``), as read from the run's conformance-results.json;
or ``gate:<stage>`` for a readiness gate.

Static faults mutate an inventory, a plan or a rendered file and are caught by preflight.
Live faults run on the simulator: injected at start (simulated hardware, container settings, a
port held before the engines start) or into a running deployment (``k3sim-fault`` in a node,
a stray process), then caught by a readiness gate or by the conformance suite. ``run_matrix``
proves each one is caught by exactly its intended checks and prints the table.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NotRequired, TypedDict

from k3lab import formats, outputs, settings
from k3lab.conform import toolparse
from k3lab.errors import ChecksFailed, EnvError
from k3lab.launch import suite
from k3lab.model import checks, runs, siminventory, targetkinds
from k3lab.model.inventory import Inventory
from k3lab.model.plan import Process, Topology
from k3lab.preflight import checks as preflight
from k3lab.preflight import registry
from k3lab.render import artefacts as render

if TYPE_CHECKING:
    from k3lab.model.checks import CheckInfo


@dataclass(frozen=True)
class Fault:
    id: str
    mode: str  # the failure mode, with the prior-art number where one exists
    scenario: str
    expect: frozenset[str]  # check ids (a suite check's with its [param]), or "gate:<stage>"
    mutate: Callable[[], render.Rendered] | None = None  # static
    at_start: dict = field(default_factory=dict)  # live, before the stages: {"hw": {node: faults}, ...}
    running: list[tuple[str, list[str]]] = field(default_factory=list)  # live: (node, command) after up
    message: str = ""  # text the gate failure must contain
    # live, running: commands that undo the fault, so the next fault shares the bring-up
    revert: list[tuple[str, list[str]]] = field(default_factory=list)
    env: dict = field(default_factory=dict)  # live, at start: the kit's environment for up and the suite
    suite_args: tuple[str, ...] = ()  # live: extra pytest options for this row's suite (an opt-in module)
    # live: the top diagnosis the run's logs must give (k3lab.diagnosis): "<cause id>" or "<cause id>@<node>"
    diagnosis: str = ""
    lab: str = ""  # lab: how one emulated host breaks (k3lab.tools.labfaults.BREAK)
    lab_node: str = ""  # lab: the node whose host breaks
    host: tuple[str, str] | None = None  # host stage on the emulated lab: (node, labemu host fault)

    @property
    def hardware(self) -> bool:
        """A host row the hardware stage judges: it expects the suite's checks, not HST-* findings."""
        return any(registry.stage_of(e, _known()) in ("hardware", "conformance") for e in self.expect)

    @property
    def lab_preflight(self) -> bool:
        """A host row the lab preflight judges (LPF-* findings, before the host stage)."""
        return any(registry.stage_of(e, _known()) == "lab" for e in self.expect)

    @property
    def kind(self) -> str:
        return "static" if self.mutate else "lab" if self.lab else "host" if self.host else "live"


_KNOWN: dict[str, CheckInfo] = {}


def _known() -> dict[str, CheckInfo]:
    """The registry by id, read once (the suite's marks are parsed from its files)."""
    if not _KNOWN:
        _KNOWN.update(registry.by_id())
    return _KNOWN


# ------------------------------------------------------------------------- static mutations


def rendered(sid: str) -> render.Rendered:
    return render.build(sid, siminventory.default(sid))


def _proc(r: render.Rendered, pid: str) -> Process:
    return next(p for p in r.plan.processes() if p.id == pid)


def _set_flag(proc: Process, name: str, value: str | None) -> None:
    """Change one option of an engine's command, as a renderer that got it wrong would have rendered it: the
    plan's record of the engine's topology follows the command (the renderer records it from the argv it built)."""
    argv = proc.argv
    i = argv.index(name)
    if value is None:
        del argv[i:i + 2]
    else:
        argv[i + 1] = value
    proc.topology = Topology.of(argv)


def _ranks(sid: str, ranks: dict[str, int]) -> render.Rendered:
    inv = siminventory.default(sid).model_dump()
    for node, rank in ranks.items():
        next(n for n in inv["nodes"] if n["name"] == node)["rank"] = rank
    return render.build(sid, Inventory.model_validate(inv))


def _ports(sid: str, **update) -> render.Rendered:
    inv = siminventory.default(sid)
    return render.build(sid, inv.model_copy(update={"ports": inv.ports.model_copy(update=update)}))


def _inv(sid: str, nodes: dict[str, dict], target: str = "sim", options: dict | None = None,
         **top) -> render.Rendered:
    inv = siminventory.default(sid).model_dump()
    if not targetkinds.kind(target).names_containers:  # the sim inventory's nodes share one endpoint: keep them apart
        for n in inv["nodes"]:
            n["container_name"] = f"vllm-{n['name']}"
    for name, update in nodes.items():
        next(n for n in inv["nodes"] if n["name"] == name).update(update)
    inv.update(top)
    return render.build(sid, Inventory.model_validate(inv), options, target)


def m_addr_placeholder():
    return _inv("a3_pd", {"d0": {"local_ip": "192.0.2.30"}}, target="lab")


def m_addr_loopback():
    return _inv("k3_a3_mixed", {"node1": {"local_ip": "127.0.0.2"}}, target="lab")


def m_sim_subnet():
    return _inv("k3_a3_mixed", {"node2": {"local_ip": "10.9.9.9"}})


def m_container_shared():
    same = {"endpoint": "ssh://root@10.0.0.1", "container_name": "vllm"}
    return _inv("k3_a2_mixed", {"node0": same, "node1": same}, target="lab")


def m_option_unused():
    return _inv("a3_pd", {}, options={"parsers": "off"})


def m_checkpoint():
    return _inv("k3_a3_mixed", {}, model_path="/models/not-in-fixtures")


def m_mount_paths():
    # issue #21: the guide mounts only /root/.cache; a model elsewhere renders but no engine could load it
    return _inv("a3_pd_1m", {}, target="lab", model_path="/mnt/weights/Kimi-K3")


def m_dp_ranks():
    return _ranks("k3_a3_mixed", {"node2": 1})


def m_pp_ranks():
    return _ranks("a3_pd", {"p2": 1})


def m_devices():
    r = rendered("a3_pd")
    _proc(r, "d0/engine0").devices = list(range(8))
    return r


def m_ports():
    return _ports("a3_pd", proxy=8000)


def m_kv_reserved():
    return _ports("a3_pd", kv_prefill=30000)


def m_kv_collide():
    return _ports("k3_a3_pd", api=36005)


def m_addresses():
    r = rendered("a3_pd")
    _proc(r, "d1/engine1").env["HCCL_IF_IP"] = "172.28.0.99"
    return r


def m_mmc_urls():
    r = rendered("a3_pd_pooled")
    r.files["p1"]["mmc-local.conf"] = r.files["p1"]["mmc-local.conf"].replace("172.28.0.5:5000", "172.28.0.6:5000")
    return r


def m_pd_sizes():
    r = rendered("a3_pd")
    engine = _proc(r, "d0/engine0")
    kv = json.loads(preflight.flag(engine.argv, "--kv-transfer-config"))
    kv["kv_connector_extra_config"]["decode"]["tp_size"] = 8
    _set_flag(engine, "--kv-transfer-config", json.dumps(kv))
    return r


def m_parsers():
    r = rendered("a3_pd")
    _set_flag(_proc(r, "p1/engine"), "--tool-call-parser", None)
    return r


def m_hashseed():
    r = rendered("a3_pd")
    _proc(r, "d2/engine2").env.pop("PYTHONHASHSEED")
    return r


def m_pp_partition():
    r = rendered("a3_pd")
    _proc(r, "p1/engine").env["VLLM_PP_LAYER_PARTITION"] = "25,25,24"
    return r


def m_dspark():
    r = rendered("a3_pd_pooled")
    engine = _proc(r, "d0/engine0")
    spec = json.loads(preflight.flag(engine.argv, "--speculative-config"))
    spec["draft_tensor_parallel_size"] = 4
    _set_flag(engine, "--speculative-config", json.dumps(spec))
    return r


def m_mmc_pool():
    r = rendered("a3_pd_pooled")
    r.files["d3"]["mmc-local.conf"] = r.files["d3"]["mmc-local.conf"].replace("dram.size = 0GB", "dram.size = 1GB")
    return r


def m_one_m():
    r = rendered("k3_a3_mixed")
    r.plan.expect.max_model_len = 1048576
    for p in r.plan.processes():
        if p.kind == "engine":
            _set_flag(p, "--max-model-len", "1048576")
    return r


def m_max_len():
    r = rendered("a3_pd_1m")
    _set_flag(_proc(r, "d1/engine1"), "--max-model-len", "204800")
    return r


def m_proxy_vars():
    r = rendered("a3_pd")
    _proc(r, "p0/engine").unset.remove("http_proxy")
    return r


def m_model():
    r = rendered("a3_pd")
    _set_flag(_proc(r, "d3/engine3"), "--served-model-name", "kimi-k3")
    return r


def m_shm():
    r = rendered("a3_pd")
    r.plan.node("d1").container.shm_size = "64m"
    return r


def m_driver_mount():
    r = rendered("k3_a3_mixed")
    c = r.plan.node("node1").container
    c.mounts = [m for m in c.mounts if "hccn_tool" not in m.target]
    return r


def m_launcher():
    r = rendered("k3_a3_pd")
    _proc(r, "d0/launcher").argv.extend(["--pp-size", "1"])
    return r


def m_wrong_nic():
    r = rendered("k3_a2_mixed")
    _proc(r, "node3/engine").env["GLOO_SOCKET_IFNAME"] = "ib0"
    return r


S = frozenset
# The healthy baselines also run the opt-in checks the simulator can answer, so they show those pass too.
BASELINE_ARGS = ("--long-requests",)
SIM_OPT_IN = ("longreq.py",)
STATIC = [
    Fault("S-DP-RANK-DUP", "F4 duplicate DP rank", "k3_a3_mixed", S({"PF-DP-RANKS"}), m_dp_ranks),
    Fault("S-PP-RANK-DUP", "F4 duplicate PP node rank", "a3_pd", S({"PF-PP-RANKS"}), m_pp_ranks),
    Fault("S-DEVICES", "visible devices != TP x PCP", "a3_pd", S({"PF-DEVICES"}), m_devices),
    Fault("S-PORT-PROXY-API", "F2 proxy port on the P0 API port", "a3_pd", S({"PF-PORTS"}), m_ports),
    Fault("S-KV-RESERVED", "F1 kv_port inside the Mooncake range", "a3_pd", S({"PF-KV-RESERVED"}), m_kv_reserved),
    Fault("S-KV-COLLIDE", "F1/F2 engine API port inside its own KV range", "k3_a3_pd", S({"PF-PORTS"}),
          m_kv_collide),
    Fault("S-HCCL-IF-IP", "F6 HCCL_IF_IP of another node", "a3_pd", S({"PF-ADDRESSES"}), m_addresses),
    Fault("S-WRONG-NIC", "F6 socket interface not the node's NIC", "k3_a2_mixed", S({"PF-ADDRESSES"}), m_wrong_nic),
    Fault("S-MMC-URL", "F10 client config names another MetaService", "a3_pd_pooled", S({"PF-MMC-URLS"}), m_mmc_urls),
    Fault("S-PD-SIZES", "F9 connector sizes disagree with the engines", "a3_pd", S({"PF-PD-SIZES"}), m_pd_sizes),
    Fault("S-PARSERS", "F12 parser flags differ between engines", "a3_pd", S({"PF-PARSERS"}), m_parsers),
    Fault("S-HASHSEED", "F11 PYTHONHASHSEED missing on one engine", "a3_pd", S({"PF-HASHSEED"}), m_hashseed),
    Fault("S-PP-PARTITION", "layer partition with the wrong entry count", "a3_pd", S({"PF-PP-PARTITION"}),
          m_pp_partition),
    Fault("S-DSPARK-TP", "draft TP != target TP", "a3_pd_pooled", S({"PF-DSPARK"}), m_dspark),
    Fault("S-MMC-DRAM", "F10 engine client holds DRAM beside providers", "a3_pd_pooled", S({"PF-MMC-POOL"}),
          m_mmc_pool),
    Fault("S-1M-4NODES", "F13 1M context on four A3 nodes", "k3_a3_mixed", S({"PF-1M-NODES"}), m_one_m),
    Fault("S-MAXLEN", "max_model_len wrong for a 1M scenario", "a3_pd_1m", S({"PF-MODEL"}), m_max_len),
    Fault("S-PROXY-VARS", "F7 proxy variables left set", "a3_pd", S({"PF-PROXY-VARS"}), m_proxy_vars),
    Fault("S-SERVED-NAME", "served name differs on one engine", "a3_pd", S({"PF-MODEL"}), m_model),
    Fault("S-SMALL-SHM", "F15 64 MB shm", "a3_pd", S({"PF-CONTAINER"}), m_shm),
    Fault("S-DRIVER-MOUNT", "F15 hccn_tool not mounted", "k3_a3_mixed", S({"PF-CONTAINER"}), m_driver_mount),
    Fault("S-LAUNCHER-PP", "seed defect: launch_online_dp.py --pp-size", "k3_a3_pd", S({"PF-LAUNCHER"}), m_launcher),
    Fault("S-ADDR-PLACEHOLDER", "documentation address left in the inventory", "a3_pd", S({"PF-ADDR-PLACEHOLDER"}),
          m_addr_placeholder),
    Fault("S-ADDR-LOOPBACK", "loopback node address", "k3_a3_mixed", S({"PF-ADDR-SPECIAL"}), m_addr_loopback),
    Fault("S-SIM-SUBNET", "node address outside the sim subnet", "k3_a3_mixed", S({"PF-SIM-SUBNET"}), m_sim_subnet),
    Fault("S-CONTAINER-SHARED", "two nodes, one endpoint, one container name", "k3_a2_mixed",
          S({"PF-CONTAINER-SHARED"}), m_container_shared),
    Fault("S-OPTION-UNUSED", "-o parsers=off where it changes nothing", "a3_pd", S({"PF-OPTION-UNUSED"}),
          m_option_unused),
    Fault("S-CHECKPOINT", "model path with no checkpoint config.json", "k3_a3_mixed", S({"PF-CHECKPOINT"}),
          m_checkpoint),
    Fault("S-MOUNT-PATHS", "lab model path under no container mount (/mnt/weights with only /root/.cache)",
          "a3_pd_1m", S({"PF-MOUNT-PATHS"}), m_mount_paths),
]

_TEMPLATE = "/root/k3lab/run_dp_template.sh"
_START = "/root/k3lab/start_engine.sh"
# an edited script on a node no longer equals the rendered one: the golden check sees it too
_EDITED_D = {f"golden.test_staged_artefacts_match_rendered[d{i}]" for i in range(4)}
# Conformance test ids a broken PD request path fails (all go through the proxy).
# (the external-cache check measures producers on the pool, so it does not apply to a3_pd_1m)
_PD_REQUESTS = {"parsers.test_reasoning_is_parsed", "parsers.test_tool_call", "parsers.test_tool_call_not_forced",
                "parsers.test_streaming_content_is_clean", "images.test_image_request", "parsers.test_openai_client_parses_responses"}

Command = tuple[str, list[str]]  # (node, argv) run in that node's container


class Injection(TypedDict):
    """A running fault's ``running`` and ``revert`` commands (Fault's fields of the same names)."""

    running: list[Command]
    revert: list[Command]


def _unreachable_from_all(sid: str, node: str, dev: int) -> Injection:
    """Every other node of the scenario loses the path to ``node``'s device ``dev`` (reverted in place)."""
    others = [n.name for n in siminventory.default(sid).nodes if n.name != node and n.role != "metaservice"]
    return Injection(running=[(o, ["k3sim-fault", "add", "unreachable", f"@vnic:{node}:{dev}"]) for o in others],
                     revert=[(o, ["k3sim-fault", "clear", "unreachable"]) for o in others])


def _conf_line_gone(node: str, dev: int) -> Injection:
    """``node``'s /etc/hccn.conf without device ``dev``'s address line (restored after the row)."""
    keep = "/tmp/k3lab-fault-hccn.conf"
    return Injection(running=[(node, ["sh", "-c", f"cp /etc/hccn.conf {keep} && sed -i '/^address_{dev}=/d' /etc/hccn.conf"])],
                     revert=[(node, ["sh", "-c", f"cp {keep} /etc/hccn.conf && rm -f {keep}"])])


def _stray(node: str, name: str, program: str) -> Injection:
    """Another process started on ``node`` after start-up, stopped again by its pid file."""
    pid = f"/tmp/k3lab-stray-{name}.pid"
    return Injection(running=[(node, ["bash", "-c", f"nohup {program} >/dev/null 2>&1 & echo $! > {pid}"])],
                     revert=[(node, ["bash", "-c", f'kill "$(cat {pid})" && rm -f {pid}'])])


def _stray_listener(node: str, port: int) -> Injection:
    """A process that only listens on ``port`` (accepts nothing)."""
    listen = (f"import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(86400)")
    return _stray(node, f"listen-{port}", f'python3 -c "{listen}"')


def _hw(node: str, path: str, value: str) -> Injection:
    """A simulated hardware fault set in a running node and cleared after its row."""
    return Injection(running=[(node, ["k3sim-fault", "set", path, value])], revert=[(node, ["k3sim-fault", "clear", path])])


LIVE = [
    Fault("L-DEVICE-ALARM", "F15 NPU health Alarm", "a3_pd_1m", S({"npu.test_npu_smi_devices_healthy[d1]"}),
          running=[("d1", ["k3sim-fault", "set", "devices.3.health", "Alarm"])],
          revert=[("d1", ["k3sim-fault", "clear", "devices.3.health"])]),
    Fault("L-LINK-DOWN", "F5 device link DOWN (net health follows)", "a3_pd_1m",
          S({"hccl.test_hccn_links_up[p1]", "hccl.test_hccn_net_health[p1]", "hccl.test_hccn_lldp[p1]"}),
          running=[("p1", ["k3sim-fault", "set", "devices.2.link", "DOWN"])],
          revert=[("p1", ["k3sim-fault", "clear", "devices.2.link"])]),
    Fault("L-NET-HEALTH", "F5 device net health Fault", "a3_pd_1m", S({"hccl.test_hccn_net_health[d0]"}),
          running=[("d0", ["k3sim-fault", "set", "devices.5.net_health", "Fault"])],
          revert=[("d0", ["k3sim-fault", "clear", "devices.5.net_health"])]),
    Fault("L-TLS", "TLS switch differs on one device", "a3_pd_1m", S({"hccl.test_hccn_tls_consistent"}),
          running=[("p2", ["k3sim-fault", "set", "devices.1.tls_switch", "1"])],
          revert=[("p2", ["k3sim-fault", "clear", "devices.1.tls_switch"])]),
    # Reachability samples every device as a source and as a target once per run, in a rotation; a
    # device that no other node reaches is caught whatever the rotation. On-sample d0/0, off-sample p2/11.
    Fault("L-PEER-UNREACHABLE", "F5 peer device unreachable", "a3_pd_1m", S({"hccl.test_cross_node_reachability"}),
          **_unreachable_from_all("a3_pd_1m", "d0", 0),
          message="-> d0 device 0 (-hccs_ping"),
    Fault("L-PEER-UNREACHABLE-OFF", "F5 peer device unreachable (another node, another device)", "a3_pd_1m",
          S({"hccl.test_cross_node_reachability"}), **_unreachable_from_all("a3_pd_1m", "p2", 11),
          message="-> p2 device 11 (-hccs_ping"),
    # One device pair only: every device is pinged from every other node (the second round), so a
    # path lost between two particular nodes is caught in the run where it exists, whatever the rotation.
    Fault("L-PAIR-UNREACHABLE", "F5 one node cannot reach one device of another (all other paths fine)", "a3_pd_1m",
          S({"hccl.test_cross_node_reachability"}),
          running=[("p1", ["k3sim-fault", "add", "unreachable", "@vnic:d2:9"])],
          revert=[("p1", ["k3sim-fault", "clear", "unreachable"])], message="-> d2 device 9 (-hccs_ping"),
    Fault("L-PAIR-UNREACHABLE-OFF", "F5 one node cannot reach one device of another (other nodes, device 0)",
          "a3_pd_1m", S({"hccl.test_cross_node_reachability"}),
          running=[("d3", ["k3sim-fault", "add", "unreachable", "@vnic:p0:0"])],
          revert=[("d3", ["k3sim-fault", "clear", "unreachable"])], message="-> p0 device 0 (-hccs_ping"),
    # The rest of the guides' §3.2 procedure, each check on-sample and off-sample (another node, device).
    Fault("L-LLDP", "a device learns no switch port over LLDP (link UP)", "a3_pd_1m", S({"hccl.test_hccn_lldp[p2]"}),
          **_hw("p2", "devices.5.no_lldp", "true"), message="p2: device(s) [5] learn no switch port over LLDP"),
    Fault("L-LLDP-OFF", "no LLDP neighbour (another node, another device)", "a3_pd_1m", S({"hccl.test_hccn_lldp[d1]"}),
          **_hw("d1", "devices.14.no_lldp", "true"), message="d1: device(s) [14] learn no switch port"),
    Fault("L-NETDETECT", "a device without its netdetect address (0.0.0.0)", "a3_pd_1m",
          S({"hccl.test_hccn_netdetect_gateway[d0]"}), **_hw("d0", "devices.3.no_netdetect", "true"),
          message="netdetect address unset on device(s) [3]"),
    Fault("L-GATEWAY-OFF", "a device without its default gateway (another node, another device)", "a3_pd_1m",
          S({"hccl.test_hccn_netdetect_gateway[p3]"}), **_hw("p3", "devices.10.no_gateway", "true"),
          message="default gateway unset on [10]"),
    Fault("L-HCCN-CONF", "/etc/hccn.conf in a container lacks a device's address", "a3_pd_1m",
          S({"hccl.test_hccn_conf_names_every_device[d2]"}), **_conf_line_gone("d2", 6),
          message="d2: /etc/hccn.conf names no address for device(s) [6]"),
    Fault("L-HCCN-CONF-OFF", "/etc/hccn.conf lacks a device's address (another node, device 0)", "a3_pd_1m",
          S({"hccl.test_hccn_conf_names_every_device[p0]"}), **_conf_line_gone("p0", 0),
          message="/etc/hccn.conf names no address for device(s) [0]"),
    Fault("L-SPOD-INFO", "an A3 node's driver answers no spod-info", "a3_pd_1m", S({"hccl.test_spod_info[p1]"}),
          **_hw("p1", "spod_unsupported", "true"), message="p1: npu-smi info -t spod-info -i 0 -c 0 gave no"),
    Fault("L-SPOD-INFO-OFF", "no spod-info on another node (a Decode; spod-info is per node)", "a3_pd_1m",
          S({"hccl.test_spod_info[d3]"}), **_hw("d3", "spod_unsupported", "true"),
          message="d3: npu-smi info -t spod-info -i 0 -c 0 gave no"),
    # Off-sample variants of the hardware faults above: another node, another device index.
    Fault("L-DEVICE-ALARM-OFF", "F15 NPU health Alarm (another node, another device)", "a3_pd_1m",
          S({"npu.test_npu_smi_devices_healthy[p0]"}), **_hw("p0", "devices.12.health", "Alarm"),
          message="device(s) [12] report health ['Alarm'], expected OK"),
    Fault("L-NPU-MISSING", "a die the driver no longer lists (npu-smi prints 15 of 16 rows)", "a3_pd_1m",
          S({"npu.test_npu_smi_devices_healthy[d2]"}), **_hw("d2", "devices.9.missing", "true"),
          message="prints 15 health rows, expected 16 for A3 (one per die)"),
    Fault("L-NPU-MISSING-OFF", "a die the driver no longer lists (another node, device 0)", "a3_pd_1m",
          S({"npu.test_npu_smi_devices_healthy[p3]"}), **_hw("p3", "devices.0.missing", "true"),
          message="prints 15 health rows, expected 16"),
    Fault("L-LINK-DOWN-OFF", "F5 device link DOWN (another node, another device)", "a3_pd_1m",
          S({"hccl.test_hccn_links_up[d3]", "hccl.test_hccn_net_health[d3]", "hccl.test_hccn_lldp[d3]"}),
          **_hw("d3", "devices.15.link", "DOWN"), message="d3: link DOWN on device(s) [15]"),
    Fault("L-NET-HEALTH-OFF", "F5 device net health Fault (another node, another device)", "a3_pd_1m",
          S({"hccl.test_hccn_net_health[p2]"}), **_hw("p2", "devices.11.net_health", "Fault"),
          message="state {11: 'Fault'}"),
    Fault("L-TLS-OFF", "TLS switch differs (another node, another device)", "a3_pd_1m", S({"hccl.test_hccn_tls_consistent"}),
          **_hw("d3", "devices.14.tls_switch", "1"), message="('d3', 14)"),
    Fault("L-TLS-UNPARSED", "hccn_tool -tls -g fails on one device (no tls switch printed)", "a3_pd_1m",
          S({"hccl.test_hccn_tls_consistent"}),
          **_hw("d1", "devices.6.tls_error", "dsmi_get_tls_cfg failed, ret = 87"),
          message="unparsed output of hccn_tool -tls -g on (node, device) [('d1', 6)]"),
    # A3 checks -vnic: a die without a vNIC address fails the address check and, as every device is
    # a source and a target once per run, the reachability check names it too. On-sample d1/4, off p3/13.
    Fault("L-DEVICE-ADDR", "a die without its vNIC address (hccn_tool prints 0.0.0.0)", "a3_pd_1m",
          S({"hccl.test_hccn_device_addresses[d1]", "hccl.test_cross_node_reachability"}), **_hw("d1", "devices.4.no_vnic", "true"),
          message="d1 device 4: no address (vnic ipaddr 0.0.0.0)"),
    Fault("L-DEVICE-ADDR-OFF", "a die without its vNIC address (another node, another device)", "a3_pd_1m",
          S({"hccl.test_hccn_device_addresses[p3]", "hccl.test_cross_node_reachability"}), **_hw("p3", "devices.13.no_vnic", "true"),
          message="p3 device 13: no address (vnic ipaddr 0.0.0.0)"),
    # The vNIC link can be DOWN while an address is set (hccn_tool prints both): the address check
    # names it, and reachability finds no usable vNIC to ping there.
    Fault("L-VNIC-LINK-DOWN", "a die's vNIC link DOWN with its address set", "a3_pd_1m",
          S({"hccl.test_hccn_device_addresses[d2]", "hccl.test_cross_node_reachability"}),
          **_hw("d2", "devices.7.vnic_link", "DOWN"), message="d2 device 7: vnic link DOWN (address "),
    # -hccs_ping answers a busy device "The device is occupied. Please try again later." and did
    # nothing: the check retries it, so a device busy for a while passes and one that stays busy fails.
    Fault("L-HCCS-BUSY-CLEARS", "healthy control: -hccs_ping busy three times, then answering (the retry passes)", "a3_pd_1m", S(),
          **_hw("p1", "devices.5.hccs_busy", "3")),
    Fault("L-HCCS-BUSY", "-hccs_ping busy on every try", "a3_pd_1m", S({"hccl.test_cross_node_reachability"}),
          **_hw("p1", "devices.5.hccs_busy", "always"),
          message="still busy after the retries: 'The device is occupied"),
    # A table row no reader knows fails the health check as unparsed output, never as healthy.
    Fault("L-NPU-SMI-UNPARSED", "npu-smi info prints a row the readers cannot read", "a3_pd_1m",
          S({"npu.test_npu_smi_devices_healthy[p2]"}), **_hw("p2", "npu_smi.table", "garbled"),
          message="p2: unparsed output of npu-smi info"),
    # A2 checks -ip: a device with no IP also reports net health Init (it cannot reach its netdetect address)
    Fault("L-DEVICE-IP-A2", "an A2 NPU without its device IP", "k3_a2_mixed",
          S({"hccl.test_hccn_device_addresses[node2]", "hccl.test_hccn_net_health[node2]", "hccl.test_cross_node_reachability"}),
          **_hw("node2", "devices.5.no_ip", "true"), message="node2 device 5: no address (none preset)"),
    # vLLM closes the DP RPC port after the handshake: a listener there after start-up is another process
    Fault("L-DP-RPC-HELD", "the DP RPC port listens after start-up (a stray process holds it)", "k3_a3_mixed",
          S({"ranks-ports.test_startup_ports_closed[node0]"}), **_stray_listener("node0", 12345),
          message="seen listening: DP RPC (--data-parallel-rpc-port) 12345 of node0/engine"),
    Fault("L-HEADLESS-API", "a headless node exposes an API", "a3_pd_1m", S({"ranks-ports.test_headless_nodes_expose_no_api"}),
          **_stray("p2", "http-8000", "python3 -m http.server 8000"), message="p2:8000 answered"),
    # Real vLLM fails a request whose KV the Decode cannot load (kv_load_failure_policy defaults to
    # "fail"), so every PD request fails and each Decode/Prefill pair is named. The external-cache check
    # measures pool producers (Decode counts every pull as hits): a3_pd_1m has no pool, it does not apply.
    Fault("L-KV-HANDSHAKE", "F8 Mooncake handshake dropped", "a3_pd_1m",
          S(_PD_REQUESTS | {"request-paths.test_decode_pulls_kv_from_every_prefill", "request-paths.test_proxy_reaches_every_engine"}),
          running=[("p0", ["k3sim-fault", "set", "engine.drop_kv_handshake", "true"])],
          revert=[("p0", ["k3sim-fault", "clear", "engine.drop_kv_handshake"])],
          message="Decode d3 did not pull KV from Prefill p0"),
    # The proxy's /healthcheck still counts 4 Decode instances (it never probes them); test_proxy_answers
    # sees them counted but silent. The Decode DP group goes down with its rank, as vLLM's does.
    Fault("L-DECODE-STOPPED", "a Decode engine stops (the proxy keeps counting and routing to it)", "a3_pd_1m",
          S({"models.test_proxy_answers", "ranks-ports.test_engine_ranks_claimed_once", *_PD_REQUESTS, "request-paths.test_every_api_engine_serves",
             "request-paths.test_decode_pulls_kv_from_every_prefill", "request-paths.test_proxy_reaches_every_engine",
             *{f"{c}[d{i}:8000]" for c in ("models.test_health", "models.test_models_lists_served_name_and_limit",
                                           "limits.test_max_model_len_enforced") for i in range(4)},
             *{f"ranks-ports.test_planned_ports_listen[d{i}]" for i in range(4)}}),
          running=[("d3", ["k3sim-fault", "set", "engine.crash_after_s", "0"])]),
    # K3.1 §5.2.2's long requests (opt-in --long-requests, the only opt-in module the simulator runs): every
    # Prefill runs out of device memory on prompts past 128K, so the guide's short requests all pass and
    # only a prompt near max_model_len fails. Its engine dies (torch_npu's OOM), so the row runs the
    # long-request check alone, and the next fault gets a fresh deployment.
    Fault("L-LONG-OOM", "Prefill engines run out of HBM on a prompt near max_model_len (K3.1 §5.2.2)", "a3_pd_1m",
          S({"long-requests.test_long_requests_complete_through_the_entrypoint"}),
          running=[(f"p{i}", ["k3sim-fault", "set", "engine.oom_prompt_tokens", "131072"]) for i in range(4)],
          suite_args=("--long-requests", "-m", "long_requests"), message="request 0: HTTP 500", diagnosis="npu-oom"),
    # Off-sample: only a Decode runs out (another node and role). The proxy picks the Decode with the
    # fewest active tokens, ties to the first listed: an idle d0 takes the one request, always. (Spreading
    # 4 requests to reach d3 relied on prefill and decode timing and missed d3 under load.)
    Fault("L-LONG-OOM-OFF", "Decode d0 runs out of HBM on a prompt near max_model_len (another node)", "a3_pd_1m",
          S({"long-requests.test_long_requests_complete_through_the_entrypoint"}),
          running=[("d0", ["k3sim-fault", "set", "engine.oom_prompt_tokens", "131072"])],
          suite_args=("--long-requests", "-m", "long_requests"),
          message="HTTP 502: Decode backend request to /completions failed", diagnosis="npu-oom@d0"),
    # Service faults (issue 10): each fails its strengthened request check and nothing else, and is
    # reverted in place so the rows share one bring-up.
    Fault("L-TOOL-FORCED", "the model calls the first tool whatever it is asked (served by d0)", "a3_pd_1m",
          S({"parsers.test_tool_call", "parsers.test_tool_call_not_forced"}),
          running=[("d0", ["k3sim-fault", "set", "engine.tool_choice_first", "true"])],
          revert=[("d0", ["k3sim-fault", "clear", "engine.tool_choice_first"])]),
    Fault("L-TOOL-ARGS", "tool arguments ignore the request's schema (\"rack\": \"rack\")", "a3_pd_1m",
          S({"parsers.test_tool_call"}),
          running=[("d0", ["k3sim-fault", "set", "engine.tool_args_blind", "true"])],
          revert=[("d0", ["k3sim-fault", "clear", "engine.tool_args_blind"])]),
    # The proxy sends sequential requests to d0 only: a Decode that cannot pull KV stays unseen
    # except by the per-pair and concurrent checks. On-sample d2, off-sample d3.
    Fault("L-KV-PULL-D2", "Decode d2 cannot reach the Prefill KV ports", "a3_pd_1m",
          S({"request-paths.test_decode_pulls_kv_from_every_prefill", "request-paths.test_proxy_reaches_every_engine"}),
          running=[("d2", ["k3sim-fault", "set", "engine.kv_pull_refused", "true"])],
          revert=[("d2", ["k3sim-fault", "clear", "engine.kv_pull_refused"])],
          message="Decode d2 did not pull KV from Prefill p0", diagnosis="mooncake-connect-failure"),
    Fault("L-KV-PULL-D3", "Decode d3 cannot reach the Prefill KV ports (off-sample)", "a3_pd_1m",
          S({"request-paths.test_decode_pulls_kv_from_every_prefill", "request-paths.test_proxy_reaches_every_engine"}),
          running=[("d3", ["k3sim-fault", "set", "engine.kv_pull_refused", "true"])],
          revert=[("d3", ["k3sim-fault", "clear", "engine.kv_pull_refused"])],
          message="Decode d3 did not pull KV from Prefill p0", diagnosis="mooncake-connect-failure"),
    Fault("L-DP-RANK-IGNORED", "the head API ignores X-data-parallel-rank (status codes stay right)", "k3_a3_mixed",
          S({"dp-routing.test_dp_rank_routing", "request-paths.test_every_api_engine_serves"}),
          running=[("node0", ["k3sim-fault", "set", "engine.ignore_dp_rank_header", "true"])],
          revert=[("node0", ["k3sim-fault", "clear", "engine.ignore_dp_rank_header"])],
          message="pinned to rank 3, vllm:request_success_total moved on engines"),
    # the one pooled producer's cross-engine checks read the MetaService's capacity before their fill (#24)
    Fault("L-METASERVICE-DOWN", "F10 MetaService down", "a3_pd_pooled",
          S({"metaservice.test_metaservice_capacity", "external-cache.test_pool_stores_blocks", "ranks-ports.test_planned_ports_listen[meta]",
             "external-cache.test_external_cache_hits_on_repeated_prefix", "external-cache.test_pool_hits_across_engines"}),
          running=[("meta", ["k3sim-fault", "set", "metaservice.exit", "true"])]),
    Fault("L-PROVIDER-GONE", "F10 a provider exits", "a3_pd_pooled", S({"metaservice.test_metaservice_capacity"}),
          running=[("d2", ["bash", "-c", 'kill "$(cat /root/k3lab/memcache/.k3lab/d2_provider.pid)"'])]),
    Fault("L-CONTAINER-STOPPED", "a node container exits (vLLM takes the whole DP group down)", "k3_a3_mixed",
          S({"containers.test_container_running[node3]", "containers.test_container_matches_plan[node3]", "npu.test_npu_smi_devices_healthy[node3]",
             "hccl.test_hccn_links_up[node3]", "hccl.test_hccn_net_health[node3]", "hccl.test_hccn_device_addresses[node3]",
             "hccl.test_hccn_lldp[node3]", "hccl.test_hccn_netdetect_gateway[node3]", "hccl.test_hccn_conf_names_every_device[node3]",
             "hccl.test_spod_info[node3]",
             "hccl.test_hccn_tls_consistent", "hccl.test_cross_node_reachability", "golden.test_staged_artefacts_match_rendered[node3]",
             "ranks-ports.test_engine_ranks_claimed_once", "ranks-ports.test_planned_ports_listen[node0]", "models.test_health[node0:8000]",
             "models.test_models_lists_served_name_and_limit[node0:8000]", "limits.test_max_model_len_enforced[node0:8000]",
             "dp-routing.test_dp_rank_routing", "parsers.test_reasoning_is_parsed", "parsers.test_tool_call", "parsers.test_streaming_content_is_clean",
             "parsers.test_tool_call_not_forced", "request-paths.test_every_api_engine_serves",
             "images.test_image_request", "parsers.test_openai_client_parses_responses"}),
          running=[("@docker", ["stop", "node3"])]),
    Fault("L-PROVIDER-SHORT", "F10 a provider registers 512 MB", "a3_pd_pooled", S({"gate:providers"}),
          at_start={"hw": {"d1": {"provider": {"dram_size": "512MB"}}}}, message="to report 8589934592 bytes"),
    # the pool ring p0->p1->...->p7->p0 and the external-cache pair p0->p1: on-sample p1, off-sample p6
    Fault("L-HASH-SEED", "F11 one Prefill engine hashes with another seed", "k3_a3_pd",
          S({"external-cache.test_pool_hits_across_engines", "external-cache.test_external_cache_hits_on_repeated_prefix"}),
          at_start={"hw": {"p1": {"engine": {"hash_seed": "7"}}}}),
    Fault("L-HASH-SEED-P6", "F11 another Prefill engine hashes with another seed (off-sample)", "k3_a3_pd",
          S({"external-cache.test_pool_hits_across_engines"}), at_start={"hw": {"p6": {"engine": {"hash_seed": "7"}}}}),
    # P1 (PP rank 1) binds handshake ports 36016-36031; it starts in the workers stage
    Fault("L-KV-PORT-TAKEN", "F1/F2 a KV port is held before the engine starts", "a3_pd_1m", S({"gate:workers"}),
          at_start={"hold_port": {"p1": 36016}}, message="Address already in use", diagnosis="mooncake-kv-port-in-use@p1"),
    Fault("L-SMALL-SHM", "F15 container started with 64 MB shm", "k3_a3_mixed",
          S({"containers.test_container_matches_plan[node1]"}), at_start={"shm": {"node1": "64m"}}),
    Fault("L-PARSERS-MISSING", "F12 Decode engines started without the kimi_k3 parsers", "a3_pd_1m",
          S({"parsers.test_reasoning_is_parsed", "parsers.test_tool_call", "parsers.test_tool_call_not_forced", "parsers.test_streaming_content_is_clean",
             "parsers.test_openai_client_parses_responses", *_EDITED_D}),
          at_start={"edit": {d: [(_TEMPLATE, r"/--enable-auto-tool-choice\|--reasoning-parser\|--tool-call-parser/d")]
                             for d in ("d0", "d1", "d2", "d3")}}),
    # the Decode DP group refuses a rank whose config differs, so this is caught at launch
    Fault("L-MAXLEN-WRONG", "max_model_len 204800 on one Decode of a 1M scenario", "a3_pd_1m", S({"gate:workers"}),
          message="Configuration mismatch detected",
          at_start={"edit": {"d2": [(_TEMPLATE, "s/--max-model-len 1048576/--max-model-len 204800/")]}}),
    Fault("L-IMAGE-PD", "F16 image requests fail under PD (Decode started language-model-only)", "a3_pd_1m",
          S({"images.test_image_request", *_EDITED_D}),
          at_start={"edit": {d: [(_TEMPLATE, r"s/^--skip-mm-profiling \\$/--skip-mm-profiling --language-model-only \\/")]
                             for d in ("d0", "d1", "d2", "d3")}}),
    # Ranks started on the wrong nodes: the groups still form (ranks 1 and 2 both join), only the owners
    # differ from the plan. The edited scripts also differ from the rendered ones.
    Fault("L-DP-RANKS-SWAPPED", "DP start ranks of node1 and node2 swapped", "k3_a3_mixed",
          S({"ranks-ports.test_engine_ranks_claimed_once", "golden.test_staged_artefacts_match_rendered[node1]",
             "golden.test_staged_artefacts_match_rendered[node2]"}),
          at_start={"edit": {"node1": [(_START, "s/^export DP_START_RANK=1$/export DP_START_RANK=2/")],
                             "node2": [(_START, "s/^export DP_START_RANK=2$/export DP_START_RANK=1/")]}}),
    # A PP node rank on the wrong node also binds the other stage's KV handshake ports.
    Fault("L-PP-RANKS-SWAPPED", "Prefill PP node ranks of p1 and p2 swapped", "a3_pd_1m",
          S({"ranks-ports.test_engine_ranks_claimed_once", "ranks-ports.test_planned_ports_listen[p1]", "ranks-ports.test_planned_ports_listen[p2]",
             "golden.test_staged_artefacts_match_rendered[p1]", "golden.test_staged_artefacts_match_rendered[p2]"}),
          at_start={"edit": {"p1": [(_TEMPLATE, "s/^NODE_RANK=1$/NODE_RANK=2/")],
                             "p2": [(_TEMPLATE, "s/^NODE_RANK=2$/NODE_RANK=1/")]}}),
    # With a key configured, every API must refuse a bare request: one engine started without it is open.
    Fault("L-API-KEY-MISSING", "the head engine starts without the API key (VLLM_API_KEY unset in its script)",
          "k3_a2_mixed", S({"security.test_api_key_enforced[node0:8000]", "golden.test_staged_artefacts_match_rendered[node0]"}),
          at_start={"edit": {"node0": [(_START, "1a unset VLLM_API_KEY")]}}, env={"K3LAB_API_KEY": "k3lab-fault-key"},
          message="node0: /v1/models without a key answered 200"),
    Fault("L-DEVICE-ALARM-AT-START", "F15 unhealthy device at start", "k3_a3_mixed", S({"gate:workers"}),
          at_start={"hw": {"node2": {"devices": {"7": {"health": "Alarm"}}}}},
          message="open device 7 failed, runtime result = 507033", diagnosis="npu-device-abnormal@node2"),
    # /dev/shm full on one node: its engine dies at start with torch's shared-memory error (errno 28)
    Fault("L-SHM-FULL", "/dev/shm full on one node (torch cannot share a tensor)", "k3_a3_mixed", S({"gate:workers"}),
          at_start={"hw": {"node1": {"engine": {"shm_exhausted": True}}}},
          message="No space left on device (28)", diagnosis="shm-too-small@node1"),
    Fault("L-SHM-FULL-OFF", "/dev/shm full on one node (another scenario, a Decode node)", "a3_pd_1m",
          S({"gate:workers"}), at_start={"hw": {"d2": {"engine": {"shm_exhausted": True}}}},
          message="No space left on device (28)", diagnosis="shm-too-small@d2"),
    # One node's HCCL links never come up: it gives up first (EI0006), then every rank of its group times out
    # in the same link setup; the diagnosis names the node that failed first, not the ones after it.
    Fault("L-HCCL-LINK-TIMEOUT", "HCCL link setup times out on one DP node; its group times out after it",
          "k3_a3_mixed", S({"gate:workers"}), at_start={"hw": {"node2": {"engine": {"hccl_link_timeout_s": 2}}}},
          message="Get_Socket_Timeout(EI0006)", diagnosis="hccl-link-timeout@node2"),
    Fault("L-HCCL-LINK-TIMEOUT-OFF", "HCCL link setup times out on one Prefill PP node (another node, PP group)",
          "a3_pd_1m", S({"gate:workers"}), at_start={"hw": {"p2": {"engine": {"hccl_link_timeout_s": 2}}}},
          message="Get_Socket_Timeout(EI0006)", diagnosis="hccl-link-timeout@p2"),
]

# On the emulated lab (root): one host broken; the kit's commands end in time, name the node and its host,
# leave nothing on the hosts that answer, and down RUN finishes once the host is repaired (labfaults).
_LAB_EXPECT = frozenset({"ends in time", "names node and host", "nothing left on reachable hosts",
                         "down RUN finishes once repaired"})
LAB = [
    Fault("L-LAB-ENGINE-HUNG", "one host's Docker engine hung (SIGSTOP): check <= 300 s + 2 min, down <= 90 s + 2 min",
          "a3_pd_1m", _LAB_EXPECT, lab="engine-hung", lab_node="d3"),
    Fault("L-LAB-SSHD-DOWN", "one host's sshd down (ssh:// refused): down <= 90 s + 2 min", "a3_pd_1m", _LAB_EXPECT,
          lab="sshd-down", lab_node="p1"),
    Fault("L-LAB-UNREACHABLE", "one host unreachable during teardown (link down, clients connected): "
          "teardown <= 90 s + 2 min", "a3_pd_1m", _LAB_EXPECT, lab="unreachable", lab_node="d2"),
]


def _host_fault(fid: str, node: str, fault: str, check: str, mode: str) -> Fault:
    return Fault(fid, mode, "a3_pd_1m", S({f"{check}[{node}]"}), host=(node, fault))


# Host-stage faults (issue #21), each present on one emulated host before the run: the host stage names
# that node and nothing else; -OFF is the same fault on another node (other role, other endpoint kind).
HOST = [
    _host_fault("H-NO-CONFIG", "p1", "no-config", "HST-CHECKPOINT", "config.json missing on one host"),
    _host_fault("H-NO-CONFIG-OFF", "d3", "no-config", "HST-CHECKPOINT", "config.json missing on another node"),
    _host_fault("H-OTHER-CHECKPOINT", "p2", "other-checkpoint", "HST-CHECKPOINT-SAME",
                "a different checkpoint on one host"),
    _host_fault("H-OTHER-CHECKPOINT-OFF", "d0", "other-checkpoint", "HST-CHECKPOINT-SAME",
                "a different checkpoint on another node"),
    _host_fault("H-OLD-DRIVER", "p1", "old-driver", "HST-DRIVER", "older driver on one host"),
    _host_fault("H-OLD-DRIVER-OFF", "d2", "old-driver", "HST-DRIVER", "older driver on another node"),
    _host_fault("H-HCCN-ENTRY", "d3", "hccn-entry", "HST-HCCN-CONF", "/etc/hccn.conf lacks a device"),
    _host_fault("H-HCCN-ENTRY-OFF", "p0", "hccn-entry", "HST-HCCN-CONF", "/etc/hccn.conf lacks a device, another node"),
    _host_fault("H-PORTS", "d1", "unreserved-ports", "HST-PORTS", "KV ports in the ephemeral range, not reserved"),
    _host_fault("H-PORTS-OFF", "p3", "unreserved-ports", "HST-PORTS", "ports not reserved on another node"),
    # the lab preflight's: the first SSH session meets the banner (ssh:// nodes: p0-p2, d0-d2)
    _host_fault("H-SSH-SHELL", "p1", "noisy-shell", "LPF-SSH-SHELL", "root's shell prints a banner on one ssh:// host"),
    _host_fault("H-SSH-SHELL-OFF", "d2", "noisy-shell", "LPF-SSH-SHELL",
                "root's shell prints a banner on another ssh:// host"),
]

# Hardware-stage faults (issue #21), present on one emulated host's device table before the run: the
# hardware stage (after the containers, before any engine; `k3lab up --stages-only`) names them.
HARDWARE = [
    Fault("H-LINK-DOWN", "device 2's link DOWN on one host", "a3_pd_1m",
          S({"hccl.test_hccn_links_up[d2]", "hccl.test_hccn_net_health[d2]", "hccl.test_hccn_lldp[d2]"}), host=("d2", "link-down"),
          message="d2: link DOWN on device(s) [2]"),
    Fault("H-LINK-DOWN-OFF", "a link DOWN on another host, another device", "a3_pd_1m",
          S({"hccl.test_hccn_links_up[p0]", "hccl.test_hccn_net_health[p0]", "hccl.test_hccn_lldp[p0]"}), host=("p0", "link-down:13"),
          message="p0: link DOWN on device(s) [13]"),
    Fault("H-NPU-ALARM", "an NPU in Alarm on one host", "a3_pd_1m", S({"npu.test_npu_smi_devices_healthy[p2]"}),
          host=("p2", "npu-alarm"), message="p2: device(s) [3] report health ['Alarm']"),
    Fault("H-NPU-ALARM-OFF", "an NPU in Alarm on another host, another device", "a3_pd_1m",
          S({"npu.test_npu_smi_devices_healthy[d1]"}), host=("d1", "npu-alarm:10"),
          message="d1: device(s) [10] report health ['Alarm']"),
    Fault("H-PAIR-UNREACHABLE", "one host reaches no device of the next host", "a3_pd_1m",
          S({"hccl.test_cross_node_reachability"}), host=("p3", "pair-unreachable"), message="p3 device"),
    Fault("H-PAIR-UNREACHABLE-OFF", "another host reaches no device of the next host", "a3_pd_1m",
          S({"hccl.test_cross_node_reachability"}), host=("d0", "pair-unreachable"), message="d0 device"),
]

CATALOG = {f.id: f for f in STATIC + LIVE + LAB + HOST + HARDWARE}


# ------------------------------------------------------------------------------------ running


def run_static(fault: Fault) -> set[str]:
    assert fault.mutate is not None, f"{fault.id} is not a static fault"
    r = fault.mutate()
    return {f.check for f in preflight.run(r.plan, r.files, sim_subnet=r.sim_subnet)}


def conformance(run_dir: Path, out: Path, extra: list[str] | None = None) -> dict[str, str]:
    """The suite against ``run_dir``: failing check key (id[param]) -> its failure text, read from the
    conformance-results.json the run writes (the rows carry the check id; JUnit only names functions)."""
    results = Path(run_dir) / runs.RESULTS
    results.unlink(missing_ok=True)  # never judge a row by the previous suite run's results
    cmd = suite.command(run_dir, "-q", *(extra or []), junit=out)
    done = subprocess.run(cmd, capture_output=True, timeout=900)
    if not results.is_file():  # pytest could not even start (no results): say why instead of a traceback
        tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-3:]
        raise EnvError(f"the conformance suite did not run against {run_dir} (pytest exit {done.returncode}): "
                       + " | ".join(tail))
    return checks.failed_checks(results)


def _caught(f: Fault, failures: dict[str, str]) -> set[str]:
    """The failing checks; with an expected message, a row whose failures all lack it says so."""
    observed = set(failures)
    if f.message and observed and not any(f.message in text for text in failures.values()):
        observed.add(f"(no failure says {f.message!r})")
    return observed


def _resolve(run, arg: str) -> str:
    """``@vnic:NODE:DEV`` -> that device's address, read from the node with hccn_tool (a real interface)."""
    if not arg.startswith("@vnic:"):
        return arg
    _, node, dev = arg.split(":")
    tool = "-vnic" if run.plan.node(node).platform == "A3" else "-ip"
    out = run.backend.exec(node, ["hccn_tool", "-i", dev, tool, "-g"]).check()
    found = (toolparse.vnic if tool == "-vnic" else toolparse.ip)(out).address  # validated IPv4
    if found is None:
        raise EnvError(f"{node} device {dev}: hccn_tool {tool} -g shows no address to resolve {arg}")
    return found


def inject(run, fault: Fault) -> None:
    for node, cmd in fault.running:
        if node == "@docker":
            getattr(run.backend.containers[cmd[1]], cmd[0])(timeout=5)
            continue
        res = run.backend.exec(node, [_resolve(run, a) for a in cmd])
        if not res.ok:
            raise RuntimeError(f"injecting {fault.id} on {node} failed: {res.output}")
    time.sleep(1.5)  # processes notice faults within a second (engines and MetaService poll node.json)


def _revert(run, fault: Fault) -> bool:
    for node, cmd in fault.revert:
        res = run.backend.exec(node, [_resolve(run, a) for a in cmd])
        if not res.ok:
            formats.log("faults", f"reverting {fault.id} on {node} failed ({res.output.strip()[:200]}): restarting")
            return False
    time.sleep(1.5)  # as after injecting: processes re-read the node file within a second
    return True


class FaultRow(TypedDict):
    """One row of the matrix (``k3lab faults --format json``, the report's JSON): a fault or a baseline."""

    fault: str  # Fault.id, or BASELINE-<scenario>
    mode: str
    scenario: str
    kind: str  # static, live, lab, host
    expected: list[str]  # check keys that must fail, sorted
    observed: list[str]  # check keys that failed (and notes: an injection that failed, a message missing)
    verdict: str  # ok or MISMATCH; skipped: a lab row that could not run
    broken: NotRequired[str]  # lab rows (k3lab.tools.labfaults.LabDetail)
    wall_s: NotRequired[dict[str, float]]


class _Rows:
    """The matrix's rows, printed and saved as they come: a live matrix takes minutes."""

    def __init__(self, report: Path | None, live: bool) -> None:
        self.rows: list[FaultRow] = []
        self.report, self.live, self.started = report, live, time.monotonic()

    def add(self, row: FaultRow) -> None:
        self.rows.append(row)
        formats.log("faults", f"{row['fault']}: {row['verdict']} (expected {row['expected']}, observed {row['observed']})")
        if self.report:
            outputs.write_file(self.report, json.dumps(self.rows, indent=2))
            text = markdown(self.rows, time.monotonic() - self.started)
            if self.live:
                text += "\n## Every live check, its faults and controls\n\n" + coverage_markdown(self.rows, live_checks())
            outputs.write_file(self.report.with_suffix(".md"), text)


def run_matrix(ids: list[str] | None = None, live: bool = True, report: Path | None = None) -> list[FaultRow]:
    out = _Rows(report, live)
    faults = [f for f in CATALOG.values() if (not ids or f.id in ids) and (live or f.kind == "static")]
    for f in faults:
        if f.kind == "static":
            out.add(_row(f, run_static(f)))
    # reversible faults first, so they share one bring-up per scenario; the rest restart after
    _run_in_place(sorted([f for f in faults if f.kind == "live" and f.running], key=lambda f: (f.scenario, not f.revert)),
                  out.add)
    for f in [f for f in faults if f.kind == "live" and f.at_start]:
        out.add(_row(f, _run_start_fault(f)))
    _run_lab(faults, out.add)
    _run_host_faults(faults, out.add)
    return out.rows


def _run_lab(faults: list[Fault], add: Callable[[FaultRow], None]) -> None:
    """The rows on the emulated lab (k3lab.tools.labfaults), with the wall time of each step."""
    faults = [f for f in faults if f.kind == "lab"]
    if not faults:
        return
    from k3lab.tools import labfaults

    for f, observed, detail in labfaults.run_rows(faults):
        row = _row(f, observed)
        if "verdict" in detail:  # a row that could not run says why (its verdict keeps its place)
            row["verdict"] = detail["verdict"]
        if "broken" in detail:
            row["broken"] = detail["broken"]
        if "wall_s" in detail:
            row["wall_s"] = detail["wall_s"]
        add(row)


def _stage_findings_alone(scenario: str, inventory: Path, stage: Callable) -> set[str]:
    """One stage, ``stage(plan, pool, run_id)``, alone against a lab inventory: ``CHECK[node]`` per finding."""
    import uuid

    from k3lab.launch.endpoints import ClientPool, SshOptions
    from k3lab.model.select import load_inventory

    inv, name = load_inventory(scenario, str(inventory))
    plan = render.build(scenario, inv, {}, "lab", inventory_name=name).plan
    pool = ClientPool(SshOptions(inv.lab.known_hosts, inv.lab.identity_file))
    try:
        found = stage(plan, pool, f"faults-{uuid.uuid4().hex[:6]}")
    finally:
        pool.close()
    return {f"{f.check}[{','.join(f.nodes)}]" for f in found}


def host_findings(scenario: str, inventory: Path) -> set[str]:
    """The host stage alone against a lab inventory."""
    from k3lab.launch import hoststage

    return _stage_findings_alone(scenario, inventory, hoststage.run)


def lab_findings(scenario: str, inventory: Path) -> set[str]:
    """The lab preflight alone against a lab inventory."""
    from k3lab.launch import labpreflight

    return _stage_findings_alone(scenario, inventory, labpreflight.run)


def hardware_findings(scenario: str, inventory: Path) -> dict[str, str]:
    """The hardware stage's failing checks (check key -> message) on the lab ``inventory`` describes:
    ``up --stages-only`` (host stage, containers, hardware stage, teardown; no engine starts)."""
    from k3lab.launch import hwstage, lifecycle

    try:
        lifecycle.up(scenario, str(inventory), {}, "lab", stages_only=True)
    except hwstage.HardwareStageFailed as exc:
        return dict(exc.checks) or {f"stage failed: {str(exc).splitlines()[0]}": ""}
    except ChecksFailed as exc:
        return {f"up failed: {str(exc).splitlines()[0]}": ""}
    return {}


def _stage_findings(f: Fault, scenario: str, inv: Path) -> set[str]:
    """A host fault's row: the host stage's findings, or the hardware stage's where the row expects the
    suite's checks, or the lab preflight's where it expects LPF-* findings."""
    if f.hardware:
        return _caught(f, hardware_findings(scenario, inv))
    if f.lab_preflight:
        return lab_findings(scenario, inv)
    return host_findings(scenario, inv)


def _healthy_lab(faults: list[Fault], scenario: str, inv: Path) -> set[str]:
    """The healthy emulated lab's findings in every stage the rows judge: the host stage, and the
    hardware stage and the lab preflight where a row expects theirs."""
    healthy = host_findings(scenario, inv)
    if any(f.hardware for f in faults):
        healthy |= set(hardware_findings(scenario, inv))
    if any(f.lab_preflight for f in faults):
        healthy |= lab_findings(scenario, inv)
    return healthy


def _run_host_faults(faults: list[Fault], add: Callable[[FaultRow], None]) -> None:
    """The host faults among ``faults`` on the emulated lab (root): one ``labemu up`` per scenario, a healthy baseline, each fault
    broken on its host and repaired after its row; the lab always comes down."""
    from k3lab.launch import labemu

    faults = [f for f in faults if f.kind == "host"]
    if not faults:
        return
    if os.geteuid() != 0:
        for f in faults:
            add(_row(f, {"skipped: the emulated lab needs root"}))
        return
    for scenario in sorted({f.scenario for f in faults}):
        inv = Path(tempfile.mkdtemp()) / f"{scenario}.yaml"
        model_dir = Path(rendered(scenario).plan.expect.model_path).name
        try:
            labemu.up(None, scenario, inv)
            mine = [f for f in faults if f.scenario == scenario]
            add(_row(Fault(f"BASELINE-lab-{scenario}", "healthy emulated hosts", scenario, S(), host=("", "")),
                     _healthy_lab(mine, scenario, inv)))
            for f in mine:
                assert f.host is not None
                labemu.break_host(f.host[0], f.host[1], model_dir)
                try:
                    add(_row(f, _stage_findings(f, scenario, inv)))
                finally:
                    labemu.repair()
        finally:
            labemu.down()


def _run_in_place(faults: list[Fault], add: Callable[[FaultRow], None]) -> None:
    """Faults injected into a running deployment; every deployment is down when this returns or raises."""
    from k3lab.launch import lifecycle

    running: dict[str, lifecycle.Run] = {}
    baselined: set[str] = set()
    try:
        for f in faults:
            run = running.get(f.scenario) or _fresh_run(f, running, baselined, add)
            if run is None:
                continue
            try:
                inject(run, f)
            except RuntimeError as exc:
                add(_row(f, {f"injection failed: {exc}"}))
            else:
                caught = _caught(f, conformance(run.dir, Path(tempfile.mkdtemp()) / f"{f.id}.xml", list(f.suite_args)))
                if f.diagnosis:
                    lifecycle.collect(run)  # the logs as they are now, for the diagnosis
                add(_row(f, caught | diagnosed(f, run.dir)))
            if f.revert and _revert(run, f):
                continue  # undone in place: the next fault of this scenario shares the deployment
            lifecycle.down(run)  # a fault may leave a node broken: the next fault gets a fresh deployment
            running.pop(f.scenario)
        for other in list(running):
            lifecycle.down(running.pop(other))
    finally:
        for run in running.values():
            lifecycle.down(run)


def _fresh_run(f: Fault, running: dict, baselined: set[str], add: Callable[[FaultRow], None]):
    """A new deployment of ``f.scenario`` (any other one down first), with one healthy baseline per
    scenario to show 0 false positives; None when it did not come up (its row says why)."""
    from k3lab.launch import lifecycle

    for other in list(running):  # one run at a time: up refuses while another run is up
        lifecycle.down(running.pop(other))
    try:
        run = running[f.scenario] = lifecycle.up(f.scenario, None, {}, "sim")
    except ChecksFailed as exc:  # preflight or a readiness gate; an interrupt ends the matrix
        add(_row(f, {f"up failed: {str(exc).splitlines()[0]}"}))
        return None
    if f.scenario not in baselined:
        baselined.add(f.scenario)
        base = conformance(run.dir, Path(tempfile.mkdtemp()) / "baseline.xml", list(BASELINE_ARGS))
        add(_row(Fault(f"BASELINE-{f.scenario}", "healthy baseline", f.scenario, S()), set(base)))
    return run


def _run_start_fault(f: Fault) -> set[str]:
    from unittest import mock  # the fault's environment for this run only, restored after (stdlib)

    # the environment for the kit's child processes (the suite), the settings for this process
    with mock.patch.dict(os.environ, f.env), settings.patched(**settings.given(f.env)):
        return _start_fault(f)


def _start_fault(f: Fault) -> set[str]:
    from k3lab.launch import lifecycle

    try:
        run = lifecycle.up(f.scenario, None, {}, "sim", sim_faults=f.at_start)
    except (lifecycle.GateFailed, RuntimeError) as exc:
        stage = exc.stage if isinstance(exc, lifecycle.GateFailed) else str(exc).split(":", 1)[0].removeprefix("stage ")
        gate = {f"gate:{stage}"} if f.message in str(exc) else {f"gate:{stage} (message lacks {f.message!r})"}
        return gate | diagnosed(f, getattr(exc, "run_dir", None))
    try:
        caught = _caught(f, conformance(run.dir, Path(tempfile.mkdtemp()) / f"{f.id}.xml", list(f.suite_args)))
        if f.diagnosis:
            lifecycle.collect(run)
        return caught | diagnosed(f, run.dir)
    finally:
        lifecycle.down(run)


def diagnosed(f: Fault, run_dir: Path | None) -> set[str]:
    """``diagnosis:<top cause>[@<node>]`` of the run's collected logs, for a row that states one (else nothing)."""
    if not f.diagnosis:
        return set()
    from k3lab.diagnosis.engine import diagnose

    top = diagnose(run_dir).top if run_dir is not None and run_dir.is_dir() else None
    if top is None:
        return {"diagnosis:(none)"}
    return {f"diagnosis:{top.cause.id}" + (f"@{top.node}" if "@" in f.diagnosis else "")}


def _row(f: Fault, observed: set[str], want: frozenset[str] | None = None) -> FaultRow:
    want = f.expect if want is None else want
    if f.diagnosis and want == f.expect:  # a row that states its cause fails when the diagnosis misses it
        want = want | {f"diagnosis:{f.diagnosis}"}
    return FaultRow(fault=f.id, mode=f.mode, scenario=f.scenario, kind=f.kind, expected=sorted(want),
                    observed=sorted(observed), verdict="ok" if set(observed) == set(want) else "MISMATCH")


def markdown(rows: list[FaultRow], wall_s: float) -> str:
    """The results table for build/ (and a closing note): one row per fault or baseline."""
    ok = sum(r["verdict"] == "ok" for r in rows)
    out = [f"# k3lab fault matrix: {ok}/{len(rows)} rows as intended, wall {wall_s:.0f} s", "",
           "| fault | kind | scenario | mode | expected failing checks | observed failing checks | verdict |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['fault']} | {r['kind']} | {r['scenario']} | {r['mode']} | "
                   f"{', '.join(r['expected']) or '(none)'} | {', '.join(r['observed']) or '(none)'} | {r['verdict']} |")
    return "\n".join(out) + "\n"


# Controls inside a check, beside the healthy baselines: what must NOT happen for the check to pass.
NEGATIVE_CONTROLS = {
    "parsers.test_tool_call": "test_tool_call_not_forced: tools offered, unrelated question, no call",
    "parsers.test_tool_call_not_forced": "test_tool_call: the related question must call the right tool",
    "external-cache.test_external_cache_hits_on_repeated_prefix": "a fresh prompt on the same engine must not hit",
    "dp-routing.test_dp_rank_routing": "only the pinned engine's counter moves; an out-of-range rank answers 400",
    "request-paths.test_every_api_engine_serves": "no other engine's counter moves",
    "request-paths.test_decode_pulls_kv_from_every_prefill": "each pair asked directly (no proxy retry hides a pair)",
    "request-paths.test_proxy_reaches_every_engine": "per-engine counters, not status codes",
    "external-cache.test_pool_stores_blocks": "a per-run nonce keeps the prompt new on a kept deployment",
    "external-cache.test_pool_hits_across_engines": "per-run nonce; the second engine's local cache cannot serve it",
    "security.test_api_key_enforced": "the same request with the key answers 200",
    "limits.test_max_model_len_enforced": "a request within the limit answers 200",
    "hccl.test_hccn_tls_consistent": "unparsed output fails (L-TLS-UNPARSED)",
    "ranks-ports.test_headless_nodes_expose_no_api": "the head's API answers on the same port (test_health)",
    "ranks-ports.test_startup_ports_closed": "test_planned_ports_listen: the other planned ports listen",
}


def _off_sample(r: FaultRow) -> bool:
    text = f"{r['fault']} {r['mode']}".lower()
    return r["fault"].endswith("-OFF") or "off-sample" in text or "another node" in text or "another prefill" in text


def coverage_markdown(rows: list[FaultRow], checks: list[str]) -> str:
    """The closing-note table: each live check, the rows that failed it as intended (on-sample and
    off-sample), and its controls (in-check negative control, healthy baselines with 0 failures)."""
    base = [r for r in rows if r["fault"].startswith("BASELINE-")]
    clean = [r["scenario"] for r in base if r["verdict"] == "ok"]
    out = ["| check | fault that fails it (on-sample) | off-sample variant | negative control / healthy baseline |",
           "|---|---|---|---|"]
    baseline = f"0 failures on the healthy baselines ({', '.join(clean)})" if clean else "no baseline run"
    for check in checks:
        hits = _caught_as_intended(rows, check)
        on = [r["fault"] for r in hits if not _off_sample(r)]
        off = [r["fault"] for r in hits if _off_sample(r)]
        control = NEGATIVE_CONTROLS.get(check, "")
        out.append(f"| {check} | {', '.join(on) or '(none)'} | {', '.join(off) or '(none)'} | "
                   f"{control + '; ' if control else ''}{baseline} |")
    return "\n".join(out) + "\n"


def _caught_as_intended(rows: list[FaultRow], check: str) -> list[FaultRow]:
    """Fault rows (not baselines) that failed ``check`` (any of its parameters) as they were meant to."""
    return [r for r in rows if r["verdict"] == "ok" and not r["fault"].startswith("BASELINE-")
            and any(e.split("[", 1)[0] == check for e in r["expected"])]


def live_checks() -> list[str]:
    """Every check id of the suite's test files (hardware and conformance), in file order, then those of
    the opt-in modules the simulator runs (SIM_OPT_IN)."""
    suite_checks = checks.suite_checks()
    in_tests = [c.id for c in suite_checks if c.source.split("::")[0].rsplit("/", 1)[-1].startswith("test_")]
    return in_tests + [c.id for c in suite_checks if c.source.split("::")[0].rsplit("/", 1)[-1] in SIM_OPT_IN]


def print_table(rows: list[FaultRow]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="k3lab fault matrix")
    for col in ("fault", "scenario", "expected failing checks", "observed failing checks", "verdict"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["fault"], r["scenario"], ", ".join(r["expected"]) or "(none)",
                      ", ".join(r["observed"]) or "(none)", r["verdict"])
    Console(width=200).print(table)
    ok = sum(r["verdict"] == "ok" for r in rows)
    print(f"{ok}/{len(rows)} rows as intended")
