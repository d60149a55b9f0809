"""``--kv-transfer-config``: vLLM's KVTransferConfig plus vLLM-Ascend's connector rules.

CLI stage (vllm-upstream.md §7): JSON parsed into the pydantic dataclass ``configs.KVTransferConfig``
(extra keys forbidden, ``kv_role`` literal, "Please specify kv_role ..." from ``__post_init__``). Engine stage
(vllm-ascend-internals.md §3): unknown connector, MultiConnector children, Mooncake
``prefill``/``decode`` extra-config asserts and the prefill/decode TP rule.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from k3sim.vllm import configs
from k3sim.vllm.errors import StartupError

# Upstream 0.33 registry (§7) plus what vLLM-Ascend registers (internals §3). MooncakeConnectorV2
# is not in the snapshot the reference read but the 0.30.0 guide runs it: same ports as V1.
UPSTREAM = {"ExampleConnector", "ExampleHiddenStatesConnector", "LMCacheConnectorV1", "LMCacheMPConnector",
            "NixlConnector", "NixlPullConnector", "NixlPushConnector", "MultiConnector", "HiSparseConnector",
            "MoRIIOConnector", "OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector",
            "MooncakeStoreConnector", "FlexKVConnectorV1", "SimpleCPUOffloadConnector", "HF3FSKVConnector"}
ASCEND = {"MooncakeConnectorV1", "MooncakeConnectorV2", "MooncakeHybridConnector", "MooncakeLayerwiseConnector",
          "AscendStoreConnector", "MooncakeConnectorStoreV1", "UCMConnector", "RecomputeCPUOffloadConnector",
          "SfaRemoteD2HConnector"}
MOONCAKE_P2P = {"MooncakeConnectorV1", "MooncakeConnectorV2", "MooncakeHybridConnector", "MooncakeLayerwiseConnector"}
POOL = {"AscendStoreConnector", "MooncakeConnectorStoreV1"}

KV_PORT_DEFAULT = 14579


@dataclass
class Connector:
    name: str
    role: str
    kv_port: int
    extra: dict[str, Any]
    engine_id: str
    load_failure_policy: str = "fail"

    @property
    def is_producer(self) -> bool:
        return self.role in ("kv_producer", "kv_both")

    @property
    def is_consumer(self) -> bool:
        return self.role in ("kv_consumer", "kv_both")


@dataclass
class KVConfig:
    top: Connector
    children: list[Connector] = field(default_factory=list)

    @property
    def connectors(self) -> list[Connector]:
        return self.children or [self.top]

    @property
    def mooncake(self) -> Connector | None:
        return next((c for c in self.connectors if c.name in MOONCAKE_P2P), None)

    @property
    def pool(self) -> Connector | None:
        return next((c for c in self.connectors if c.name in POOL), None)


def _connector(data: dict, engine_id: str) -> Connector:
    return Connector(name=data["kv_connector"], role=data["kv_role"],
                     kv_port=int(data.get("kv_port", KV_PORT_DEFAULT)),
                     extra=dict(data.get("kv_connector_extra_config") or {}),
                     engine_id=str(data.get("engine_id") or engine_id),
                     load_failure_policy=data.get("kv_load_failure_policy", "fail"))


def _check_name(name: str) -> None:
    if name not in UPSTREAM | ASCEND:
        raise StartupError("ValueError", f"Unsupported connector type: {name}",
                           "vllm/distributed/kv_transfer/kv_connector/factory.py")


def build(data: dict | None, dp_size: int, dp_rank: int) -> KVConfig | None:
    """Engine-side construction (names, MultiConnector children). ``None`` if no connector."""
    if not data or data.get("kv_connector") is None:
        return None
    engine_id = data.get("engine_id") or str(uuid.uuid4())
    if dp_size > 1:  # EngineCore._apply_dp_identity_suffix: one id per DP engine
        engine_id = f"{engine_id}_dp{dp_rank}"
    data = dict(data, engine_id=engine_id)
    _check_name(data["kv_connector"])
    top = _connector(data, engine_id)
    children: list[Connector] = []
    if top.name == "MultiConnector":
        items = top.extra.get("connectors")
        if not isinstance(items, list) or not items:
            raise StartupError("AssertionError", "", "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py",
                               stage="engine")
        for item in items:
            try:  # KVTransferConfig(**conn_config)
                child = configs.validate_python(configs.KVTransferConfig, item)
            except ValidationError as exc:
                raise StartupError("pydantic_core._pydantic_core.ValidationError", str(exc),
                                   "vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py",
                                   stage="engine") from None
            child.setdefault("engine_id", engine_id)
            if child.get("kv_connector") is None:
                continue
            _check_name(child["kv_connector"])
            children.append(_connector(child, engine_id))
    return KVConfig(top, children)


def check_mooncake_extra(conn: Connector) -> dict[str, int]:
    """MooncakeConnectorWorker._get_prefill_decode_size and the TP rule (internals §3)."""
    where = "vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py"
    prefill = conn.extra.get("prefill", {}) or {}
    decode = conn.extra.get("decode", {}) or {}
    for side in (prefill, decode):
        for key in ("tp_size", "dp_size"):
            if key not in side:
                raise StartupError("AssertionError", "", where, stage="engine")
    sizes = {
        "prefill_tp": int(prefill["tp_size"]), "prefill_dp": int(prefill["dp_size"]),
        "prefill_pp": int(prefill.get("pp_size", 1)), "prefill_pcp": int(prefill.get("pcp_size", 1)),
        "decode_tp": int(decode["tp_size"]), "decode_dp": int(decode["dp_size"]),
        "decode_pp": int(decode.get("pp_size", 1)),
    }
    if sizes["decode_pp"] != 1:
        raise StartupError("AssertionError", "decode pp size must be 1", where, stage="engine")
    # V2 exchanges real layouts in its handshake and the 0.30.0 guide runs P TP4/PCP4 -> D TP16
    # with it, so only the connectors the reference quotes keep the hard TP gate.
    if conn.name in ("MooncakeConnectorV1", "MooncakeLayerwiseConnector") and sizes["prefill_tp"] < sizes["decode_tp"]:
        raise StartupError("ValueError", f"prefill_tp_size: {sizes['prefill_tp']} must be greater than"
                           f" or equal to the decode_tp_size: {sizes['decode_tp']}", where, stage="engine")
    return sizes


def handshake_ports(conn: Connector, dp_rank: int, tp: int, pp: int, pcp: int,
                    pp_rank: int) -> list[tuple[int, int, int]]:
    """(port, tp_rank, pcp_rank) this node binds: its own pp_rank, all local tp/pcp ranks (§3)."""
    out = []
    for pcp_rank in range(pcp):
        for tp_rank in range(tp):
            if conn.name == "MooncakeLayerwiseConnector":
                port = conn.kv_port + dp_rank * pcp * tp + pcp_rank * tp + tp_rank
            elif conn.name == "MooncakeHybridConnector":
                port = conn.kv_port + dp_rank * tp * pp + pp_rank * tp + tp_rank
            else:
                side = conn.kv_port + dp_rank * tp * pp * pcp
                port = side + (pp_rank * pcp + pcp_rank) * tp + tp_rank
            out.append((port, tp_rank, pcp_rank))
    return out


def side_channel_port(conn: Connector, dp_rank: int, tp: int, pp: int, pcp: int) -> int:
    if conn.name == "MooncakeLayerwiseConnector":
        return conn.kv_port + dp_rank * pcp * tp
    if conn.name == "MooncakeHybridConnector":
        return conn.kv_port + dp_rank * tp * pp
    return conn.kv_port + dp_rank * tp * pp * pcp
