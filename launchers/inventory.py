"""Lab and sim inventories: which hosts, addresses, NICs, ports and paths a scenario runs on.

An inventory is YAML validated by pydantic with unknown keys forbidden, so a misspelt key is an
error naming the field instead of a silently ignored value. ``sim_inventory`` derives the default
inventory the simulator uses; every scenario renders with it when no inventory is given.
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InputError

Role = Literal["mixed", "prefill", "decode", "metaservice"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_NIC = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_ENDPOINT = re.compile(r"^(unix:///\S+|tcp://[^\s/]+:\d+|ssh://[^\s@/]+@[^\s/:]+(:\d+)?)$")
_IDENT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class InventoryError(InputError, ValueError):
    """Bad inventory: one line per problem, each naming the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Port = int


def _port(v: int) -> int:
    if not 1 <= v <= 65535:
        raise ValueError(f"port {v} is out of range 1..65535")
    return v


class Ports(_Strict):
    """Ports the guides leave as placeholders, with defaults a real user could keep."""

    api: Port = Field(8000, description="engine API port (mixed SERVICE_PORT; PD: P0 API and D --vllm-start-port)")
    dp_rpc: Port = Field(12345, description="DP RPC port of the mixed group or of the Decode group")
    prefill_dp_rpc: Port = Field(12355, description="DP RPC port of the Prefill group (launcher or pooled P)")
    master: Port = Field(29500, description="Prefill PP master port (--master-port)")
    kv_prefill: Port = Field(36000, description="Mooncake kv_port of Prefill; keep outside [20000, 20000+devices*1000)")
    kv_decode: Port = Field(36200, description="Mooncake kv_port of Decode")
    hccl_base_prefill: Port = 45000
    hccl_range_prefill: str = "45000-45511"
    hccl_base_decode: Port = 46000
    hccl_range_decode: str = "46000-46511"
    proxy: Port = 8080
    meta_service: Port = 5000
    config_store: Port = 6000
    meta_metrics: Port = 8099

    @field_validator("*")
    @classmethod
    def _in_range(cls, v, info):
        if isinstance(v, int):
            return _port(v)
        if not re.fullmatch(r"\d+-\d+", v):
            raise ValueError(f"{info.field_name} must look like START-END, got {v!r}")
        lo, hi = (int(x) for x in v.split("-"))
        if not (1 <= lo <= hi <= 65535):
            raise ValueError(f"{info.field_name} {v!r} is not an ascending range within 1..65535")
        return v


class Paths(_Strict):
    workdir: str = "/root/k3lab"
    memcache_config_dir: str = "/root/k3lab/memcache"
    profiler_dir: str = "/root/k3lab/profile"
    vllm_ascend_source_dir: str = "/vllm-workspace/vllm-ascend"

    @field_validator("*")
    @classmethod
    def _absolute(cls, v: str, info):
        if not v.startswith("/") or "\n" in v or "\x00" in v:
            raise ValueError(f"{info.field_name} must be an absolute path on one line")
        return v


class Node(_Strict):
    name: str
    role: Role
    rank: int = Field(0, ge=0, description="role-local index: DP start rank, or PP node rank on Prefill")
    local_ip: str
    nic: str = Field(description="the interface that owns local_ip")
    endpoint: str = Field("unix:///var/run/docker.sock", description="Docker endpoint: unix://, tcp:// or ssh://user@host")
    container_name: str | None = None
    engine_id: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"node name {v!r} must be lower-case letters, digits, '-', '_' or '.'")
        return v

    @field_validator("local_ip")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"local_ip {v!r} is not an IP address") from None
        if ip.is_unspecified or ip.is_multicast:
            raise ValueError(f"local_ip {v!r} cannot be a node address")
        return v

    @field_validator("nic")
    @classmethod
    def _nic(cls, v: str) -> str:
        if not v or not _NIC.match(v):
            raise ValueError(f"nic {v!r} must name a network interface (1-15 characters, no spaces)")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if not _ENDPOINT.match(v):
            raise ValueError(f"endpoint {v!r} must be unix:///path, tcp://host:port or ssh://user@host")
        return v

    @field_validator("container_name", "engine_id")
    @classmethod
    def _ident(cls, v: str | None, info):
        if v is not None and not _IDENT.match(v):
            raise ValueError(f"{info.field_name} {v!r} may use only letters, digits, '.', '_' and '-'")
        return v


class Sim(_Strict):
    """Addresses of the private network the sim target creates (ignored by the lab target)."""

    subnet: str = "172.28.0.0/24"
    device_subnet: str = "172.29.0.0/16"

    @field_validator("subnet", "device_subnet")
    @classmethod
    def _net(cls, v: str) -> str:
        try:
            ipaddress.ip_network(v)
        except ValueError as exc:
            raise ValueError(f"{v!r} is not a network: {exc}") from None
        return v


class Lab(_Strict):
    """How the kit reaches lab nodes, and which listed runtime profile they need."""

    known_hosts: str | None = Field(None, description="known_hosts file for ssh:// endpoints (default ~/.ssh/known_hosts); "
                                    "an unknown host key is refused, never added")
    identity_file: str | None = Field(None, description="SSH private key for ssh:// endpoints (default: ~/.ssh/config)")
    profile: Literal["hardware", "emulator"] = Field(
        "hardware", description="'emulator': the k3lab labemu hosts, whose runtime refuses --privileged and has no "
        "NPUs; the plan lists exactly what this profile changes (deviations emu-*)")

    @field_validator("known_hosts", "identity_file")
    @classmethod
    def _abs(cls, v: str | None, info):
        if v is not None and (not v.startswith("/") or "\n" in v):
            raise ValueError(f"{info.field_name} must be an absolute path on one line")
        return v


class Inventory(_Strict):
    scenario: str | None = Field(None, description="scenario this inventory was written for; must match when set")
    image: str | None = Field(None, description="container image; default is the guide's image for the platform")
    model_path: str | None = None
    draft_model_path: str | None = None
    proxy_node: str | None = Field(None, description="node that runs the PD proxy; default is P0")
    metaservice_node: str | None = Field(None, description="node that runs the MemCache MetaService")
    ports: Ports = Ports()
    paths: Paths = Paths()
    sim: Sim = Sim()
    lab: Lab = Lab()
    nodes: list[Node]

    @field_validator("model_path", "draft_model_path")
    @classmethod
    def _abs(cls, v: str | None, info):
        if v is not None and (not v.startswith("/") or "\n" in v):
            raise ValueError(f"{info.field_name} must be an absolute path on one line")
        return v

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
                raise ValueError(f"{field}: {value!r} is not a node in this inventory")
        return self

    def by_role(self, role: Role) -> list[Node]:
        return sorted((n for n in self.nodes if n.role == role), key=lambda n: n.rank)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


def _format_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (misspelt?)"
        lines.append(f"{loc}: {msg}" if loc else msg)  # whole-inventory errors already name their field
    return "\n".join(lines)


def parse(data: object, source: str = "inventory") -> Inventory:
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        raise InventoryError(f"{source}: invalid inventory\n{_format_error(exc)}") from None


def load(path: str | Path) -> Inventory:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InventoryError(f"{path}: no such inventory file") from None
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not valid YAML: {exc}") from None
    return parse(data, str(path))


def json_schema() -> dict:
    return Inventory.model_json_schema()
