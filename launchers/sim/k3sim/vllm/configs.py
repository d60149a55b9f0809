"""vLLM's config dataclasses, as pydantic dataclasses validated the way vLLM validates them.

vLLM declares its configs with ``@config`` (``vllm/config/utils.py``: a pydantic dataclass with
``extra="forbid"``) and parses ``--kv-transfer-config`` and friends with
``TypeAdapter(cls).validate_json`` (``parse_dataclass`` in ``vllm/engine/arg_utils.py``), turning a
``ValidationError`` into an argparse error. pydantic itself does that here, so the lax-mode
coercion (numeric strings become ints, ints never become strings) and the error text are the real
ones. Only the fields the stand-in reads are typed; the others accept any value.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

from pydantic import ConfigDict, TypeAdapter
from pydantic.dataclasses import dataclass
from pydantic_core import from_json

FORBID = ConfigDict(extra="forbid")
KVRole = Literal["kv_producer", "kv_consumer", "kv_both"]
ROLES = get_args(KVRole)


@dataclass(config=FORBID)
class KVTransferConfig:
    """``vllm/config/kv_transfer.py`` (0.33) without ``engine_id``'s uuid default (the engine sets it)."""

    kv_connector: str | None = None
    engine_id: str | None = None
    kv_buffer_device: str = "npu"
    kv_role: KVRole | None = None
    kv_port: int = 14579
    kv_connector_extra_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    kv_connector_module_path: str | None = None
    enable_permute_local_kv: bool = False
    kv_load_failure_policy: Literal["recompute", "fail"] = "fail"

    def __post_init__(self) -> None:
        if self.kv_role is not None and self.kv_role not in ROLES:
            raise ValueError(f"Unsupported kv_role: {self.kv_role}. Supported roles are {ROLES}")
        if self.kv_connector is not None and self.kv_role is None:
            raise ValueError(f"Please specify kv_role when kv_connector is set, supported roles are {ROLES}")


def _config(name: str, untyped: tuple[str, ...], typed: dict[str, Any]) -> type:
    """A ``@config`` dataclass whose ``untyped`` fields take any value (the stand-in ignores them)."""
    fields: list[tuple[str, Any, Any]] = [(k, Any, dataclasses.field(default=None)) for k in untyped]
    fields += [(k, hint, dataclasses.field(default=None)) for k, hint in typed.items()]
    return dataclass(dataclasses.make_dataclass(name, fields), config=FORBID)


CUDAGRAPH_MODES = Literal["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"]
CompilationConfig = _config("CompilationConfig", (
    "level", "mode", "debug_dump_path", "cache_dir", "compile_cache_save_format", "backend", "custom_ops",
    "splitting_ops", "compile_mm_encoder", "use_inductor", "compile_sizes", "inductor_compile_config",
    "inductor_passes", "use_cudagraph", "cudagraph_num_of_warmups", "cudagraph_copy_inputs",
    "cudagraph_specialize_lora", "full_cuda_graph", "use_inductor_graph_partition", "pass_config",
    "max_capture_size", "max_cudagraph_capture_size", "dynamic_shapes_config", "local_cache_dir",
    "fast_moe_cold_start"), {"cudagraph_mode": CUDAGRAPH_MODES | None, "cudagraph_capture_sizes": list | None})
AttentionConfig = _config("AttentionConfig", (
    "backend", "flash_attn_version", "use_prefill_decode_attention", "flash_attn_max_num_splits_for_cuda_graph",
    "use_cudnn_prefill", "use_trtllm_ragged_deepseek_prefill", "use_trtllm_attention",
    "disable_flashinfer_prefill", "disable_flashinfer_q_quantization"),
    {"indexer_kv_dtype": str})  # IndexerKVDType | str: int8 passes parsing (§9)
ProfilerConfig = _config("ProfilerConfig", (
    "torch_profiler_dir", "torch_profiler_with_stack", "torch_profiler_with_flops", "torch_profiler_use_gzip",
    "torch_profiler_dump_cuda_time_total", "torch_profiler_record_shapes", "torch_profiler_with_memory",
    "ignore_frontend", "delay_iterations", "max_iterations", "warmup_iterations", "active_iterations"),
    {"profiler": Literal["torch", "cuda"] | None})


def validate_json(cls: type, text: str) -> dict[str, Any]:
    """``TypeAdapter(cls).validate_json(text)``; returns the keys given, validated. Raises ValidationError."""
    return _given(TypeAdapter(cls).validate_json(text), from_json(text))


def validate_python(cls: type, data: Any) -> dict[str, Any]:
    """``cls(**data)`` for a dict (MultiConnector's children); returns the keys given, validated."""
    return _given(TypeAdapter(cls).validate_python(data), data)


def _given(obj: Any, data: dict) -> dict[str, Any]:
    return {key: getattr(obj, key) for key in data}
