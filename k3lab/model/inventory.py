"""Lab and sim inventories: which hosts, addresses, NICs, ports and paths a scenario runs on.

An inventory is YAML validated by pydantic in strict mode with unknown keys forbidden: a misspelt
key is an error naming the field (with a did-you-mean), ``true`` is never a number, YAML octal is
refused by the loader (``k3lab.model.safeyaml``), and every pattern must match the whole value. Values
that end up in scripts or JSON are restricted to characters that survive both, and the renderer
still quotes and serialises them. ``siminventory`` derives the default inventory the simulator
uses; every scenario renders with it when no inventory is given.

Errors are one line per problem: ``FIELD (node NAME, FILE:LINE): what is wrong``.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from k3lab import paths
from k3lab.errors import InputError
from k3lab.model import hints, validation
from k3lab.model.accept import AcceptedFinding

Role = Literal["mixed", "prefill", "decode", "metaservice"]

NAME_RE = r"[a-z0-9][a-z0-9_.-]{0,62}"
NIC_RE = r"[A-Za-z0-9_.:-]{1,15}"
IDENT_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
# Docker image reference: [host[:port]/]path[:tag][@digest] (distribution/reference grammar)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
IMAGE_RE = (rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
            r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
# C0 and C1 controls and the bidi marks, embeddings, overrides and isolates: a value holding one
# shows on a terminal as another text than it is (or drives the terminal)
UNSAFE_CHARS = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# absolute, one line, and nothing that would need escaping inside a JSON string or printf format
PATH_RE = rf"/[^{UNSAFE_CHARS}\"\\%]{{0,4095}}"
_ENDPOINT_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
ENDPOINT_RE = (rf"unix:///[^\s{UNSAFE_CHARS}]+|tcp://{_ENDPOINT_HOST}:[0-9]{{1,5}}"
               rf"|ssh://[A-Za-z0-9_][A-Za-z0-9_.-]{{0,31}}@{_ENDPOINT_HOST}(?::[0-9]{{1,5}})?")
RANGE_RE = r"[0-9]{1,5}-[0-9]{1,5}"
# Matched with re.fullmatch (compiled on first use, then cached by re): without --inventory nothing is
# validated, and compiling these at import was 1% of a render process.


RESERVED_NODE_NAMES = {"plan.json"}  # render writes OUT/<node>/ beside OUT/plan.json
MAX_NODES = 256
MAX_RANK = 1023


class InventoryError(InputError, ValueError):
    """Bad inventory: one line per problem, each naming the field (exit code 2)."""


# mmc-local.conf: sizes like 134217728, 2048KB, 200MB, 2.5GB, 1TB; the protocols MemCache 1.3.0 accepts.
MMC_SIZE_RE = r"[0-9]+(?:\.[0-9]+)?(?:KB|MB|GB|TB)?"
MmcProtocol = Literal["device_rdma", "device_urma", "device_uboe", "device_sdma", "host_shm", "host_urma",
                      "host_rdma", "host_tcp"]


class _Strict(BaseModel):
    # strict: no bool or float for an int, no number for a string (YAML's 'yes' and 8000 stay what they are).
    # defer_build: validators are built on first validation (a file given with -i), not at import: the
    # default sim inventory is built from known-good values (``siminventory``) and needs none.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


def _pattern(regex: str) -> dict:
    return {"pattern": f"^(?:{regex})$"}


Port = Annotated[int, Field(ge=1, le=65535, json_schema_extra={"minimum": 1, "maximum": 65535})]


def _port_field(default: int, description: str) -> Any:  # a pydantic FieldInfo standing for the value
    return Field(default, description=description, examples=[default])


def _range_field(default: str, description: str) -> Any:
    return Field(default, description=description, examples=[default], json_schema_extra=_pattern(RANGE_RE))


def _path_field(default: str | None, description: str, example: str | None = None) -> Any:
    return Field(default, description=description + "; absolute, no quotes, backslashes, '%' or control characters",
                 examples=[example or default], json_schema_extra=_pattern(PATH_RE))


def _check_path(v: str | None, name: str) -> str | None:
    if v is not None and not re.fullmatch(PATH_RE, v):
        raise ValueError(f"{name} {v!r} must be an absolute path on one line without quotes, backslashes or '%' "
                         f"(it reaches shell scripts and JSON options)")
    return v


class Ports(_Strict):
    """Ports the guides leave as placeholders, with defaults a real user could keep.

    Derived ranges (API ports of each DP rank, Mooncake handshake ranges) are checked against
    65535 when the scenario is rendered, because their size depends on the scenario.
    """

    api: Port = _port_field(8000, "engine API port (mixed SERVICE_PORT; PD: P0 API and D --vllm-start-port; "
                                  "the launcher's DP ranks use api, api+1, ...)")
    dp_rpc: Port = _port_field(12345, "DP RPC port of the mixed group or of the Decode group")
    prefill_dp_rpc: Port = _port_field(12355, "DP RPC port of the Prefill group (launcher or pooled P)")
    master: Port = _port_field(29500, "Prefill PP master port (--master-port)")
    kv_prefill: Port = _port_field(36000, "Mooncake kv_port of Prefill, the base of a per-rank range; keep outside "
                                          "[20000, 20000+devices*1000)")
    kv_decode: Port = _port_field(36200, "Mooncake kv_port of Decode, the base of a per-rank range")
    hccl_base_prefill: Port = _port_field(45000, "HCCL host socket base port on Prefill nodes")
    hccl_range_prefill: str = _range_field("45000-45511", "HCCL host socket port range on Prefill nodes, START-END")
    hccl_base_decode: Port = _port_field(46000, "HCCL host socket base port on Decode nodes")
    hccl_range_decode: str = _range_field("46000-46511", "HCCL host socket port range on Decode nodes, START-END")
    proxy: Port = _port_field(8080, "PD proxy port (the URL clients use)")
    meta_service: Port = _port_field(5000, "MemCache MetaService meta_service_url port")
    config_store: Port = _port_field(6000, "MemCache config_store_url port")
    meta_metrics: Port = _port_field(8099, "MemCache MetaService metrics port")

    @field_validator("hccl_range_prefill", "hccl_range_decode")
    @classmethod
    def _range(cls, v: str, info):
        if not re.fullmatch(RANGE_RE, v):
            raise ValueError(f"{info.field_name} must look like START-END, got {v!r}")
        lo, hi = (int(x) for x in v.split("-"))
        if not (1 <= lo <= hi <= 65535):
            raise ValueError(f"{info.field_name} {v!r} is not an ascending range within 1..65535")
        return v


class Paths(_Strict):
    """Directories on every node (created by the kit's staging)."""

    workdir: str = _path_field("/root/k3lab", "where the rendered scripts are staged on each node")
    memcache_config_dir: str = _path_field("/root/k3lab/memcache", "where the MemCache configs are staged")
    profiler_dir: str = _path_field("/root/k3lab/profile", "torch profiler output directory")
    vllm_ascend_source_dir: str = _path_field("/vllm-workspace/vllm-ascend", "vllm-ascend checkout inside the image "
                                                                             "(launcher and proxy examples)")

    @field_validator("*")
    @classmethod
    def _absolute(cls, v: str, info):
        return _check_path(v, info.field_name)


# What the rendered containers need at these paths (the guides' driver and tool mounts, /root/.cache, the
# emulated driver of the labemu profile): an inventory mount may sit below one (a checkpoint directory
# inside /root/.cache), never on one or above it, nor in the kernel's pseudo-filesystems.
CONTAINER_MOUNT_TARGETS = ("/usr/local/dcmi", "/usr/local/Ascend/driver", "/usr/local/bin/npu-smi",
                           "/etc/ascend_install.info", "/etc/hccn.conf", "/root/.cache", "/etc/k3lab-sim")
KERNEL_DIRS = ("/proc", "/sys", "/dev")
MAX_MOUNTS = 32


def mount_path_problem(v: str) -> str | None:
    """Why a mount path cannot be one (None when it can): absolute, one line, no '..' or '.', no ':'."""
    if not re.fullmatch(PATH_RE, v):
        return "must be an absolute path on one line without quotes, backslashes or '%'"
    if ":" in v or "," in v:
        return "must not contain ':' or ',' (docker run -v SOURCE:TARGET[:ro] splits on ':')"
    parts = v.split("/")[1:]
    if any(p in (".", "..") for p in parts) or "//" in v.rstrip("/"):
        return "must be a normal path: no '.' or '..' components and no '//'"
    return None


def _within(path: str, base: str) -> bool:
    """``path`` is ``base`` or below it (both absolute, normalised)."""
    return path == base or base == "/" or path.startswith(base + "/")


class HostMount(_Strict):
    """A host directory bind-mounted into the node's container: ``docker run -v SOURCE:TARGET[:ro]``."""

    source: str = Field(description="directory (or file) on the node's host, e.g. the lab's shared weights; "
                        "absolute, no '..', ':' or control characters", examples=["/mnt/weights"],
                        json_schema_extra=_pattern(PATH_RE))
    target: str | None = Field(None, description="where the container sees it (default: the same path as "
                               "source); not on or above a path the container needs (/root/.cache, the driver "
                               "and tool mounts, the kit's work directories)", examples=["/mnt/weights"],
                               json_schema_extra=_pattern(PATH_RE))
    read_only: bool = Field(False, description="mount read-only (:ro); the engines only read checkpoints, the "
                            "caches must stay writable", examples=[True])

    @field_validator("source", "target")
    @classmethod
    def _path(cls, v: str | None, info):
        if v is None:
            return v
        if problem := mount_path_problem(v):
            raise ValueError(f"mount {info.field_name} {v!r} {problem}")
        return v.rstrip("/") or "/"

    @property
    def container_path(self) -> str:
        return self.target or self.source


def _mount_target_problem(target: str, needed: dict[str, str], image_dir: str) -> str | None:
    """Why a mount target would hide what the container needs (``needed``: path -> what it is)."""
    for base in KERNEL_DIRS:
        if _within(target, base):
            return f"is in {base}, which the container runtime provides"
    if _within(target, image_dir):
        return f"is inside {image_dir} (paths.vllm_ascend_source_dir, the image's own checkout)"
    for path, what in needed.items():
        if path == target:
            return f"is {what} already"
        if _within(path, target):
            return f"would hide {path} ({what}) inside the container"
    return None


def _duplicate_targets(mounts: list[HostMount]) -> str | None:
    seen: set[str] = set()
    for m in mounts:
        if m.container_path in seen:
            return m.container_path
        seen.add(m.container_path)
    return None


def _mounts_field(description: str) -> Any:
    return Field(default_factory=list, max_length=MAX_MOUNTS, description=description,
                 examples=[[{"source": "/mnt/weights", "target": "/mnt/weights", "read_only": True}]])


class Node(_Strict):
    """One host. ``rank`` is role-local: the rank-0 node of each role is its head."""

    name: str = Field(description="node name, used for directories and messages; lower-case letters, digits, "
                                  "'-', '_', '.'; not 'plan.json'", examples=["p0", "d1", "node3"],
                      json_schema_extra=_pattern(NAME_RE))
    role: Role = Field(description="prefill / decode (PD scenarios), mixed, or metaservice (pooled scenarios); "
                                   "k3lab list shows how many of each a scenario needs", examples=["prefill"])
    rank: int = Field(0, ge=0, le=MAX_RANK, description="role-local index from 0: the DP start rank (mixed, "
                      "decode) or the PP node rank (prefill); the rank-0 node is the role's head (DP address, "
                      "PP master)", examples=[0, 1])
    local_ip: str = Field(description="IPv4 address of the node on the cluster network (HCCL_IF_IP, DP address); "
                                      "IPv6 is refused: the guides' scripts and URLs take IPv4",
                          examples=["10.20.0.11"])
    nic: str = Field(description="the interface that owns local_ip (GLOO/TP/HCCL_SOCKET_IFNAME)",
                     examples=["enp189s0f0"], json_schema_extra=_pattern(NIC_RE))
    endpoint: str = Field("unix:///var/run/docker.sock",
                          description="Docker endpoint of this node: unix:///path, tcp://host:port or "
                                      "ssh://user@host[:port] (IPv6 hosts in brackets)",
                          examples=["ssh://root@10.20.0.11", "tcp://10.20.0.11:2375"],
                          json_schema_extra=_pattern(ENDPOINT_RE))
    container_name: str | None = Field(None, description="container name (default: the guide's); nodes that share "
                                       "an endpoint need distinct names", examples=["vllm-ascend-p0"],
                                       json_schema_extra=_pattern(IDENT_RE))
    engine_id: str | None = Field(None, description="950DT ENGINE_ID of this node (default: 'prefill' on P nodes, "
                                  "'decode<rank>' on D nodes)",
                                  examples=["prefill"], json_schema_extra=_pattern(IDENT_RE))
    # MemCache sizes the pool per node and per fabric (K3.1 Pro §5.3.2); None keeps the guide's values.
    memcache_dram_size: str | None = Field(
        None, description="ock.mmc.local_service.dram.size of the pool members on this node (standalone provider "
        "on A3, engine client on 950DT; default: the guide's 1GB); engine clients beside a provider keep 0GB",
        examples=["40GB"], pattern=f"^(?:{MMC_SIZE_RE})$")
    memcache_protocol: MmcProtocol | None = Field(
        None, description="ock.mmc.local_service.protocol of this node's MemCache clients (default: the guide's "
        "device_sdma)", examples=["device_rdma"])
    mounts: list[HostMount] = _mounts_field(
        "extra host directories for this node's container; an entry overrides the inventory's mounts entry "
        "with the same target (this node keeps its weights elsewhere)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(NAME_RE, v):
            raise ValueError(f"node name {v!r} must be 1-63 lower-case letters, digits, '-', '_' or '.', "
                             f"starting with a letter or digit")
        if v in RESERVED_NODE_NAMES:
            raise ValueError(f"node name {v!r} is reserved (the render output holds a file of that name)")
        return v

    @field_validator("local_ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"local_ip {v!r} is not an IP address") from None
        if ip.version == 6:
            raise ValueError(f"local_ip {v!r} is IPv6: the guides' scripts and URLs (HCCL_IF_IP, MemCache "
                             f"tcp://IP:port, http://IP:port) take IPv4 here; give the node's IPv4 address")
        if ip.is_unspecified or ip.is_multicast:
            raise ValueError(f"local_ip {v!r} cannot be a node address")
        return str(ip)

    @field_validator("nic")
    @classmethod
    def _nic(cls, v: str) -> str:
        if not re.fullmatch(NIC_RE, v):
            raise ValueError(f"nic {v!r} must name a network interface (1-15 characters, no spaces)")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not re.fullmatch(ENDPOINT_RE, v):
            # a password in the URL (ssh://user:PASS@host) is never echoed back
            shown = re.sub(r"^(\w+://[^:@/]*):.*@", r"\1:***@", v)
            hint = "; give no password in it (SSH keys: lab.identity_file)" if shown != v else ""
            raise ValueError(f"endpoint {shown!r} must be unix:///path, tcp://host:port or ssh://user@host[:port]{hint}")
        port = re.search(r":([0-9]{1,5})$", v) if not v.startswith("unix://") else None
        if port and not 1 <= int(port.group(1)) <= 65535:
            raise ValueError(f"endpoint {v!r}: port {port.group(1)} is out of range 1..65535")
        return v

    @field_validator("container_name", "engine_id")
    @classmethod
    def _ident(cls, v: str | None, info):
        if v is not None and not re.fullmatch(IDENT_RE, v):
            raise ValueError(f"{info.field_name} {v!r} must be 1-64 letters, digits, '.', '_' or '-', starting with "
                             f"a letter or digit")
        return v


class Sim(_Strict):
    """Addresses of the private network the sim target creates (ignored by the lab target)."""

    subnet: str = Field("172.28.0.0/24", description="IPv4 bridge network of the sim nodes; node addresses must be "
                        "host addresses in it other than the first (the gateway)", examples=["172.28.0.0/24"])
    device_subnet: str = Field("172.29.0.0/16", description="IPv4 network for the simulated NPU device addresses",
                               examples=["172.29.0.0/16"])

    @field_validator("subnet", "device_subnet")
    @classmethod
    def _net(cls, v: str, info) -> str:
        try:
            net = ipaddress.ip_network(v)
        except ValueError as exc:
            raise ValueError(f"{info.field_name} {v!r} is not a network: {exc}") from None
        if net.version != 4:
            raise ValueError(f"{info.field_name} {v!r}: the sim network is IPv4")
        if net.num_addresses < 8:
            raise ValueError(f"{info.field_name} {v!r} is too small for a topology")
        return v


class Lab(_Strict):
    """How the kit reaches lab nodes, and which listed runtime profile they need."""

    known_hosts: str | None = _path_field(None, "known_hosts file for ssh:// endpoints (default ~/.ssh/known_hosts); "
                                          "an unknown host key is refused, never added", "/root/.ssh/known_hosts")
    identity_file: str | None = _path_field(None, "SSH private key for ssh:// endpoints (default: ~/.ssh/config)",
                                            "/root/.ssh/id_ed25519")
    profile: Literal["hardware", "emulator"] = Field(
        "hardware", description="'emulator': the k3lab labemu hosts, whose runtime refuses --privileged and has no "
        "NPUs; the plan lists exactly what this profile changes (deviations emu-*)", examples=["hardware"])

    @field_validator("known_hosts", "identity_file")
    @classmethod
    def _abs(cls, v: str | None, info):
        return _check_path(v, info.field_name)


# Kubernetes names: a DNS-1123 label (namespace, claim), a qualified resource or label key, a label value
K8S_LABEL_RE = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
K8S_SUBDOMAIN_RE = r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?"
K8S_KEY_RE = r"(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
K8S_VALUE_RE = r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?"
K8S_CONTEXT_RE = r"[A-Za-z0-9@:/_.-]{1,253}"
K8S_QUANTITY_RE = r"[0-9]+(?:Ki|Mi|Gi|Ti)"
# vllm-ascend's nightly multi-node LWS templates (tests/e2e/nightly/multi_node/scripts/lws.yaml.jinja2 and
# lws-a2.yaml.jinja2) both ask each pod for huawei.com/ascend-1980: 16; the name is whatever the cluster's Ascend
# device plugin advertises (kubectl describe node shows it), hence a setting
DEFAULT_NPU_RESOURCE = "huawei.com/ascend-1980"


def _k8s_field(default: Any, description: str, regex: str, example: Any = None) -> Any:
    return Field(default, description=description, examples=[example if example is not None else default],
                 json_schema_extra=_pattern(regex))


def _k8s_check(value: str, regex: str, what: str) -> str:
    if not re.fullmatch(regex, value):
        raise ValueError(f"{what} {value!r} is not a valid Kubernetes name here")
    return value


class K8sWeights(_Strict):
    """The volume the engines read the checkpoints from (the guides' -v /root/.cache:/root/.cache): a
    PersistentVolumeClaim (vllm-ascend's nightly shares one PVC at /root/.cache) or a directory of each host."""

    claim: str | None = _k8s_field(None, "PersistentVolumeClaim name in the namespace", K8S_SUBDOMAIN_RE, "k3-weights")
    host_path: str | None = _path_field(None, "directory on every Kubernetes node (hostPath) instead of a claim",
                                        "/root/.cache")
    mount_path: str = _path_field("/root/.cache", "where the pods see it (the guides' /root/.cache)")
    read_only: bool = Field(False, description="mount read-only; the kit's logs and profiles are written elsewhere")

    @field_validator("claim")
    @classmethod
    def _claim(cls, v: str | None) -> str | None:
        return None if v is None else _k8s_check(v, K8S_SUBDOMAIN_RE, "k8s.weights.claim")

    @field_validator("host_path", "mount_path")
    @classmethod
    def _abs(cls, v: str | None, info):
        return _check_path(v, f"k8s.weights.{info.field_name}")

    @model_validator(mode="after")
    def _one(self) -> "K8sWeights":
        if (self.claim is None) == (self.host_path is None):
            raise ValueError("k8s.weights: name exactly one of claim (a PersistentVolumeClaim) or host_path")
        return self


class K8s(_Strict):
    """Where the k8s target's manifests go (`k3lab render --target k8s`): cluster, namespace, NPU resource,
    weights volume. The image is the inventory's `image`; the nodes' addresses and NICs stay the lab's,
    since the pods use host networking and run the same scripts."""

    context: str = _k8s_field(..., "kubeconfig context the RUNBOOK's kubectl commands use (--context)",
                              K8S_CONTEXT_RE, "ascend-a3")
    namespace: str = _k8s_field(..., "namespace of every object", K8S_LABEL_RE, "k3lab")
    npu_resource: str = _k8s_field(DEFAULT_NPU_RESOURCE, "extended resource of the Ascend device plugin; each "
                                   "engine pod requests the scenario's devices per node of it", K8S_KEY_RE)
    weights: K8sWeights = Field(description="checkpoint volume mounted in every pod",
                                examples=[{"claim": "k3-weights", "mount_path": "/root/.cache"}])
    shm_size: str | None = _k8s_field(None, "size limit of /dev/shm (an emptyDir in memory); default: the guides' "
                                      "--shm-size=1g as 1Gi", K8S_QUANTITY_RE, "1Gi")
    node_names: dict[str, str] = Field(default_factory=dict, max_length=MAX_NODES, description="Kubernetes node "
                                       "name of each inventory node whose name differs (default: the same name); "
                                       "each pod is pinned to its node's host",
                                       examples=[{"p0": "a3-node-01"}])
    node_selector: dict[str, str] = Field(default_factory=dict, max_length=32, description="labels every pod's "
                                          "node must have, besides its host name",
                                          examples=[{"accelerator": "huawei-Ascend910"}])

    @field_validator("context", "namespace", "npu_resource", "shm_size")
    @classmethod
    def _names(cls, v: str | None, info) -> str | None:
        regex = {"context": K8S_CONTEXT_RE, "namespace": K8S_LABEL_RE, "npu_resource": K8S_KEY_RE,
                 "shm_size": K8S_QUANTITY_RE}[info.field_name]
        return None if v is None else _k8s_check(v, regex, f"k8s.{info.field_name}")

    @field_validator("node_names", "node_selector")
    @classmethod
    def _maps(cls, v: dict[str, str], info) -> dict[str, str]:
        for key, value in v.items():
            if info.field_name == "node_names":
                _k8s_check(value, K8S_SUBDOMAIN_RE, f"k8s.node_names.{key}")
            else:
                _k8s_check(key, K8S_KEY_RE, "k8s.node_selector key")
                _k8s_check(value, K8S_VALUE_RE, f"k8s.node_selector.{key}")
        return v

    def node_name(self, node: str) -> str:
        return self.node_names.get(node, node)


class Inventory(_Strict):
    """A lab (or sim) inventory: `k3lab init SCENARIO --out lab.yaml` writes a commented one."""

    scenario: str | None = Field(None, description="scenario this inventory was written for; must match when set",
                                 examples=["a3_pd_1m"])
    image: str | None = Field(None, description="container image reference [registry/]name[:tag][@digest]; default "
                              "is the guide's image for the platform",
                              examples=["quay.io/ascend/vllm-ascend:v0.30.0-a3"], json_schema_extra=_pattern(IMAGE_RE))
    model_path: str | None = _path_field(None, "model checkpoint directory on every node (default: the guide's)",
                                         "/root/.cache/Kimi-K3.1-Pro-w4a8")
    draft_model_path: str | None = _path_field(None, "DSpark3 draft checkpoint directory (default: the guide's)",
                                               "/root/.cache/Kimi-K3.1-Pro-DSpark3")
    proxy_node: str | None = Field(None, description="node that runs the PD proxy; default is the Prefill head",
                                   examples=["p0"])
    metaservice_node: str | None = Field(None, description="node that runs the MemCache MetaService, when no node "
                                         "has role metaservice", examples=["p0"])
    mounts: list[HostMount] = _mounts_field(
        "host directories bind-mounted into every node's container beside the guide's (-v SOURCE:TARGET[:ro]): "
        "weights on a shared or parallel filesystem outside /root/.cache; listed as deviation inventory-mounts")
    ports: Ports = Field(Ports.model_construct(), description="ports; omitted keys take the documented defaults")
    paths: Paths = Field(Paths.model_construct(), description="directories on the nodes")
    sim: Sim = Field(Sim.model_construct(), description="sim target network (ignored on a lab)")
    lab: Lab = Field(Lab.model_construct(), description="lab target access (ignored on the sim)")
    k8s: K8s | None = Field(None, description="k8s target: cluster, namespace, NPU resource and weights volume "
                            "(required by --target k8s, ignored by the others)")
    nodes: list[Node] = Field(min_length=1, max_length=MAX_NODES, description="the hosts; counts per role must "
                              "match the scenario (k3lab list)")
    accept: list[AcceptedFinding] = Field(default_factory=list, max_length=256, description="preflight warnings "
                                          "this lab accepts on purpose, by check id and node, each with a reason "
                                          "(--strict fails on the others; every report lists them)",
                                          examples=[[{"check": "PF-ADDR-PLACEHOLDER", "nodes": ["p0"],
                                                      "reason": "staging lab on the documentation network"}]])

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 255 or not re.fullmatch(IMAGE_RE, v)):
            raise ValueError(f"image {v!r} is not an image reference ([registry/]name[:tag][@digest], "
                             f"lower-case name, no leading '-')")
        return v

    @field_validator("model_path", "draft_model_path")
    @classmethod
    def _abs(cls, v: str | None, info):
        return _check_path(v, info.field_name)

    @model_validator(mode="after")
    def _unique(self) -> "Inventory":
        seen_names: set[str] = set()
        seen_ips: dict[str, str] = {}
        for node in self.nodes:
            if node.name in seen_names:
                raise ValueError(f"nodes: duplicate node name {node.name!r}")
            seen_names.add(node.name)
            if node.local_ip in seen_ips:
                raise ValueError(f"nodes: {node.name} and {seen_ips[node.local_ip]} share local_ip {node.local_ip}")
            seen_ips[node.local_ip] = node.name
        for field in ("proxy_node", "metaservice_node"):
            value = getattr(self, field)
            if value is not None and value not in seen_names:
                raise ValueError(f"{field}: {value!r} is not a node in this inventory{_nodes_hint(value, seen_names)}")
        self._check_mounts()
        if self.k8s is not None:
            for name in self.k8s.node_names:
                if name not in seen_names:
                    raise ValueError(f"k8s.node_names: {name!r} is not a node in this inventory"
                                     f"{_nodes_hint(name, seen_names)}")
        for i, acc in enumerate(self.accept):
            for value in acc.nodes:
                if value not in seen_names:
                    raise ValueError(f"accept.{i}.nodes: {value!r} is not a node in this inventory"
                                     f"{_nodes_hint(value, seen_names)}")
        return self

    def _check_mounts(self) -> None:
        """No duplicate targets in one list; no target on or above what the container needs."""
        needed = {p: "a mount of the guide's docker run" for p in CONTAINER_MOUNT_TARGETS}
        needed.update({getattr(self.paths, k): f"paths.{k}" for k in Paths.model_fields})
        lists = [("mounts", self.mounts)] + [(f"nodes.{n.name}.mounts", n.mounts) for n in self.nodes]
        for where, mounts in lists:
            if dup := _duplicate_targets(mounts):
                raise ValueError(f"{where}: two entries have target {dup}")
            for m in mounts:
                if problem := _mount_target_problem(m.container_path, needed, self.paths.vllm_ascend_source_dir):
                    raise ValueError(f"{where}: target {m.container_path} {problem}")

    def mounts_for(self, node: Node) -> list[HostMount]:
        """The node's mounts: the inventory's, each replaced by the node's entry of the same target, then the
        node's own."""
        own = {m.container_path: m for m in node.mounts}
        out = [own.pop(m.container_path, m) for m in self.mounts]
        return out + list(own.values())

    def by_role(self, role: Role) -> list[Node]:
        return sorted((n for n in self.nodes if n.role == role), key=lambda n: n.rank)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


# -------------------------------------------------------------------------------- messages

def _say(err: Mapping[str, Any]) -> str | None:
    """The inventory's own wording (ports), else validation.message."""
    if err["type"] in ("less_than_equal", "greater_than_equal") and err["loc"] and err["loc"][0] == "ports":
        return f"port {err.get('input')} is out of range 1..65535"
    return None


def _node_name(data: object) -> Callable[[tuple], list[str]]:
    def where(loc: tuple) -> list[str]:
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int) and isinstance(data, dict):
            nodes = data.get("nodes")
            if isinstance(nodes, list) and loc[1] < len(nodes) and isinstance(nodes[loc[1]], dict):
                name = nodes[loc[1]].get("name")
                if isinstance(name, str):
                    return [f"node {name!r}"]
        return []
    return where


def _format_error(exc: ValidationError, data: object, source: str, lines=None) -> str:
    return validation.describe(exc, data, source, Inventory, lines, where=_node_name(data), say=_say)


def parse(data: object, source: str = "inventory", lines=None) -> Inventory:
    """Validate plain data (``lines``: the safeyaml line map, so errors can name FILE:LINE)."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise InventoryError(f"{source}: an inventory is a mapping with a 'nodes' list, got {got}")
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        raise InventoryError(f"{source}: invalid inventory\n{_format_error(exc, data, source, lines)}") from None


def load(path: str | Path) -> Inventory:
    """Read an inventory file (``-``: standard input) with the size, nesting and duplicate-key checks of
    ``k3lab.model.safeyaml``."""
    from k3lab.model import safeyaml

    try:
        data, lines = safeyaml.load(path, "inventory")
    except InputError as exc:
        raise InventoryError(str(exc)) from None
    return parse(data, paths.source_name(path), lines)


def json_schema() -> dict:
    schema = Inventory.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "k3lab inventory"
    return schema


def _nodes_hint(value: str, names: set[str]) -> str:
    return hints.hint(value, sorted(names)) or f" (nodes: {', '.join(sorted(names))})"
