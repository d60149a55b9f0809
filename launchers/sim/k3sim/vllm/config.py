"""The resolved serve configuration and the checks the API process makes before any engine.

Everything here is what vLLM validates while building ``VllmConfig`` (model dir, max_model_len,
parallel/DP-mode rules, TP vs heads, speculative draft TP, parsers): failures exit 1 with the
real exception text before the API port is bound.
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3sim.vllm.errors import StartupError

REASONING_PARSERS = ("deepseek_r1", "deepseek_v3", "ernie45", "glm45", "gpt_oss", "granite", "hunyuan_a13b",
                     "k2_horizon", "kimi_k2", "kimi_k3", "minimax_m2", "minimax_m2_append_think", "mistral",
                     "olmo3", "qwen3", "seed_oss", "step3")
TOOL_PARSERS = ("deepseek_v3", "deepseek_v31", "glm45", "granite", "hermes", "internlm", "jamba", "k2_horizon",
                "kimi_k2", "kimi_k3", "llama3_json", "llama4_json", "minimax_m2", "mistral", "openai",
                "pythonic", "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "xlam")
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
ASCEND_BLOCK_SIZE = 128  # vllm-ascend sets 128 when --block-size is not given


def _invalid_model(path: str) -> StartupError:
    return StartupError("ValueError", (
        f"Invalid repository ID or local directory specified: '{path}'.\n"
        "Please verify the following requirements:\n"
        "1. Provide a valid Hugging Face repository ID.\n"
        "2. Specify a local directory that contains a recognized configuration file.\n"
        "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
        "   - For Mistral models: ensure the presence of a 'params.json'."), "vllm/transformers_utils/config.py")


def read_model(path: str) -> dict[str, Any]:
    cfg = Path(path) / "config.json"
    if not Path(path).is_dir() or not cfg.is_file():
        raise _invalid_model(path)
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError) as exc:
        raise StartupError("OSError", f"It looks like the config file at '{cfg}' is not a valid JSON file.",
                           "transformers/configuration_utils.py") from exc
    return data if isinstance(data, dict) else {}


def _text_value(hf: dict[str, Any], *keys: str) -> Any:
    """``hf_text_config``: multimodal checkpoints keep the LM's numbers under ``text_config``."""
    for scope in (hf.get("text_config") or {}, hf.get("language_config") or {}, hf):
        for key in keys:
            if isinstance(scope, dict) and scope.get(key) is not None:
                return scope[key]
    return None


@dataclass
class ServeConfig:
    args: argparse.Namespace
    model: str
    served_names: list[str]
    hf: dict[str, Any]
    num_heads: int
    num_layers: int
    max_model_len: int
    tp: int
    pp: int
    pcp: int
    dcp: int
    dp: int
    dp_local: int
    dp_start: int
    dp_rank_explicit: int | None
    dp_address: str
    dp_rpc_port: int
    nnodes: int
    node_rank: int
    headless: bool
    mode: str  # single | internal | hybrid | external
    local_ranks: list[int]
    managed_ranks: list[int]
    block_size: int
    prefix_caching: bool
    kv: dict[str, Any] | None
    speculative: dict[str, Any] | None
    limit_mm: dict[str, int]
    api_keys: list[str]
    log_stats: bool
    additional: dict[str, Any] = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        """The first served name: /v1/models id and the metrics ``model_name`` label (§1.6)."""
        return self.served_names[0]

    @property
    def local_world(self) -> int:
        return self.tp * self.pp * self.pcp // self.nnodes

    @property
    def pp_ranks(self) -> list[int]:
        """PP stages held by this node (one per node in the guides)."""
        stage = self.tp * self.pcp
        per_node = self.tp * self.pp * self.pcp // self.nnodes
        first = self.node_rank * per_node
        return sorted({r // stage for r in range(first, first + per_node)})

    @property
    def kv_role(self) -> str | None:
        return (self.kv or {}).get("kv_role")

    @property
    def num_gpu_blocks(self) -> int:
        """KV blocks of each engine: ``--num-gpu-blocks-override`` as in vLLM, else what the simulated HBM
        holds: ``K3SIM_NUM_GPU_BLOCKS``, by default two requests of ``max_model_len`` (vLLM refuses to
        start below one). Small on purpose: filling it costs the external-cache checks seconds here."""
        if self.args.num_gpu_blocks_override:
            return int(self.args.num_gpu_blocks_override)
        default = -(-2 * self.max_model_len // self.block_size)
        return int(os.environ.get("K3SIM_NUM_GPU_BLOCKS") or default)

    def cache_config_info(self) -> dict[str, str]:
        """The labels of ``vllm:cache_config_info``: ``CacheConfig.metrics_info()``, every field of
        ``vllm/config/cache.py`` (0.33 wheel) ``str()``-ed in declaration order, with this engine's values;
        ``num_gpu_blocks`` x ``block_size`` is the size of its local prefix cache."""
        bs, blocks = self.block_size, self.num_gpu_blocks
        fields: dict[str, object] = {
            "block_size": bs, "user_specified_block_size": self.args.block_size is not None, "kv_cache_layout": None,
            "prefix_match_unit": None, "gpu_memory_utilization": self.args.gpu_memory_utilization,
            "cache_dtype": self.args.kv_cache_dtype, "is_attention_free": False,
            "num_gpu_blocks_override": self.args.num_gpu_blocks_override, "sliding_window": None,
            "enable_prefix_caching": self.prefix_caching, "prefix_caching_hash_algo": "sha256",
            "prefix_cache_retention_interval": 0, "kv_cache_dtype_skip_layers": [], "mamba_page_size_padded": None,
            "skip_page_size_padded": None, "mamba_block_size": None, "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto", "mamba_cache_mode": "none", "enable_mamba_shared_prefix_checkpoint": False,
            "replayssm_buffer_len": 16, "use_replayssm": False, "use_kda_recoverssm": False, "num_gpu_blocks": blocks,
            "num_cpu_blocks": None, "simple_cpu_offload_num_blocks": None, "effective_attention_block_size": bs,
            "kv_cache_size_tokens": blocks * bs, "kv_cache_max_concurrency": blocks * bs / self.max_model_len,
            "hash_block_size": bs, "cache_hit_alignment_tokens": bs, "kv_sharing_fast_prefill": False,
            "swa_bounded_replay": True, "kv_cache_memory_bytes": None, "kv_offloading_size": None,
            "kv_offloading_backend": "native", "_block_size_resolved": True}
        return {k: str(v) for k, v in fields.items()}

    def fingerprint(self) -> dict[str, Any]:
        """Settings every member of one PP/DP group must share."""
        return {"model": self.model, "served_model_name": self.model_name, "max_model_len": self.max_model_len,
                "tensor_parallel_size": self.tp, "pipeline_parallel_size": self.pp,
                "prefill_context_parallel_size": self.pcp, "decode_context_parallel_size": self.dcp,
                "data_parallel_size": self.dp, "nnodes": self.nnodes, "block_size": self.block_size,
                "kv_cache_dtype": self.args.kv_cache_dtype, "quantization": self.args.quantization,
                "VLLM_PP_LAYER_PARTITION": os.environ.get("VLLM_PP_LAYER_PARTITION") if self.pp > 1 else None}


_ARG_UTILS = "vllm/engine/arg_utils.py"


def _lb_modes(args: argparse.Namespace) -> tuple[bool, bool]:
    """(hybrid, external) data parallel load balancing; at most one of them."""
    dp, rank, start = args.data_parallel_size, args.data_parallel_rank, args.data_parallel_start_rank
    hybrid = bool(args.data_parallel_hybrid_lb or (start and not args.headless))
    external = bool(args.data_parallel_external_lb or rank is not None)
    if hybrid and external:
        raise StartupError("ValueError", "Cannot use more than one data parallel load balancing mode.", _ARG_UTILS)
    if rank is not None and not 0 <= rank < dp:
        raise StartupError("ValueError", f"data_parallel_rank ({rank}) must be in the range [0, {dp})", _ARG_UTILS)
    return hybrid, external


def _dp_local(args: argparse.Namespace, external: bool) -> int:
    dp, local = args.data_parallel_size, args.data_parallel_size_local
    if external and dp > 1:
        if local not in (None, 1):
            raise StartupError("ValueError", "data_parallel_size_local must be 1 or None when data_parallel_rank "
                               f"is set (external LB mode), got {local}", _ARG_UTILS)
        local = 1
    if local is None:
        local = 1 if (args.headless and args.data_parallel_start_rank) else dp
    if local > dp:
        raise StartupError("ValueError", f"data_parallel_size_local ({local}) must be <= data_parallel_size ({dp})",
                           _ARG_UTILS)
    if args.headless and local <= 0:
        raise StartupError("ValueError", "data_parallel_size_local must be > 0 in headless mode",
                           "vllm/entrypoints/cli/serve.py")
    return local


def _check_nodes(args: argparse.Namespace) -> None:
    nnodes, node_rank = args.nnodes, args.node_rank
    if nnodes > 1 and args.data_parallel_backend != "mp":
        raise StartupError("ValueError", f"--nnodes {nnodes} requires --data-parallel-backend mp", _ARG_UTILS)
    if not 0 <= node_rank < nnodes:
        raise StartupError("ValueError", f"node_rank ({node_rank}) must be in the range [0, {nnodes})", _ARG_UTILS)
    world = args.tensor_parallel_size * args.pipeline_parallel_size * args.prefill_context_parallel_size
    if world % nnodes:
        raise StartupError("ValueError", f"world_size ({world}) must be divisible by nnodes ({nnodes})",
                           "vllm/config/parallel.py")
    if nnodes > 1 and node_rank > 0 and not args.headless:
        raise StartupError("ValueError", f"node_rank {node_rank} of a multi-node (nnodes={nnodes}) engine "
                           "must run with --headless; only node 0 serves the API", "vllm/entrypoints/cli/serve.py")


def _mode(args: argparse.Namespace, hybrid: bool, external: bool) -> tuple[str, int]:
    """(load balancing mode, first local DP rank)."""
    if args.data_parallel_size == 1:
        return "single", 0
    if external:
        return "external", args.data_parallel_rank
    return ("hybrid" if hybrid else "internal"), args.data_parallel_start_rank or 0


def _parallel(args: argparse.Namespace) -> dict[str, Any]:
    dp = args.data_parallel_size
    hybrid, external = _lb_modes(args)
    local = _dp_local(args, external)
    _check_nodes(args)
    mode, first = _mode(args, hybrid, external)
    if mode == "single":
        local = 1
    local_ranks = list(range(first, first + local))
    if args.headless:
        managed: list[int] = []
    elif mode == "internal":
        managed = list(range(dp))
    else:
        managed = local_ranks
    return dict(dp=dp, dp_local=local, dp_start=first, dp_rank_explicit=args.data_parallel_rank, mode=mode,
                local_ranks=local_ranks, managed_ranks=managed)


def _check_parsers(args: argparse.Namespace) -> None:
    where = "vllm/entrypoints/openai/cli_args.py"
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise StartupError("TypeError", "Error: --enable-auto-tool-choice requires --tool-call-parser", where)
    if args.tool_call_parser and args.tool_call_parser not in TOOL_PARSERS:
        raise StartupError("KeyError", repr(f"invalid tool call parser: {args.tool_call_parser} "
                                            f"(chose from {{ {','.join(TOOL_PARSERS)} }})"), where)
    if args.reasoning_parser and args.reasoning_parser not in REASONING_PARSERS:
        raise StartupError("KeyError", repr(f"invalid reasoning parser: {args.reasoning_parser} "
                                            f"(chose from {{ {','.join(REASONING_PARSERS)} }})"), where)


def _dims(hf: dict) -> tuple[Any, Any]:
    """(attention heads, hidden layers) from the model's config.json."""
    heads = _text_value(hf, "num_attention_heads", "n_head")
    layers = _text_value(hf, "num_hidden_layers", "n_layer", "num_layers")
    if heads is None or layers is None:
        raise StartupError("AttributeError", "'PretrainedConfig' object has no attribute "
                           f"'{'num_attention_heads' if heads is None else 'num_hidden_layers'}'",
                           "transformers/configuration_utils.py")
    return heads, layers


def _max_model_len(args: argparse.Namespace, hf: dict) -> int:
    derived = _text_value(hf, "max_position_embeddings", "max_sequence_length", "seq_length")
    mml = args.max_model_len
    if mml is None or mml == -1:
        return int(derived) if derived else 2048
    if mml <= 0:
        raise StartupError("ValueError", f"max_model_len ({mml}) must be a positive integer or -1 (auto)",
                           "vllm/config/model.py")
    if derived and mml > int(derived) and os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0") not in ("1", "true"):
        raise StartupError("ValueError", (
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). To allow "
            "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN "
            "must be used with extreme caution. If the model uses relative position encoding (RoPE), positions "
            "exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
            "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."), "vllm/config/model.py")
    return mml


def _limit_mm(args: argparse.Namespace) -> dict[str, int]:
    limit = {key: int(value["count"]) if isinstance(value, dict) else int(value)
             for key, value in (args.limit_mm_per_prompt or {}).items()}
    return {"image": 0, "video": 0, "audio": 0, "vision_chunk": 0} if args.language_model_only else limit


def _api_keys(args: argparse.Namespace) -> list[str]:
    keys = list(args.api_key or [])
    if not keys and os.environ.get("VLLM_API_KEY"):
        keys = [os.environ["VLLM_API_KEY"]]
    return keys


def resolve(args: argparse.Namespace) -> ServeConfig:
    model = args.model_tag or args.model or DEFAULT_MODEL
    _check_parsers(args)
    hf = read_model(model)
    heads, layers = _dims(hf)
    mml = _max_model_len(args, hf)
    par = _parallel(args)
    tp = args.tensor_parallel_size
    if int(heads) % tp:
        raise StartupError("ValueError", f"Total number of attention heads ({heads}) must be divisible by tensor "
                           f"parallel size ({tp}).", "vllm/config/model.py")
    spec = args.speculative_config
    if spec is not None:
        _check_speculative(spec, tp)
    limit = _limit_mm(args)
    prefix = True if args.enable_prefix_caching is None else bool(args.enable_prefix_caching)
    return ServeConfig(
        args=args, model=model, served_names=list(args.served_model_name or [model]), hf=hf,
        num_heads=int(heads), num_layers=int(layers), max_model_len=int(mml), tp=tp,
        pp=args.pipeline_parallel_size, pcp=args.prefill_context_parallel_size,
        dcp=args.decode_context_parallel_size, dp_address=args.data_parallel_address or args.master_addr,
        dp_rpc_port=args.data_parallel_rpc_port or 29550, nnodes=args.nnodes, node_rank=args.node_rank,
        headless=args.headless, block_size=args.block_size or ASCEND_BLOCK_SIZE, prefix_caching=prefix,
        kv=args.kv_transfer_config, speculative=spec, limit_mm=limit, api_keys=_api_keys(args),
        log_stats=not args.disable_log_stats, additional=dict(args.additional_config or {}), **par)


def _check_speculative(spec: Any, tp: int) -> None:
    where = "vllm/config/speculative.py"
    if not isinstance(spec, dict):
        raise StartupError("ValueError", f"speculative_config must be a dict, got {type(spec).__name__}", where)
    n = spec.get("num_speculative_tokens")
    if n is not None and (not isinstance(n, int) or n <= 0):
        raise StartupError("ValueError", f"Expected num_speculative_tokens to be greater than zero ({n}).", where)
    draft_tp = spec.get("draft_tensor_parallel_size")
    # The guides require draft TP == target TP on every role (upstream also allows 1).
    if draft_tp is not None and draft_tp != tp:
        raise StartupError("ValueError", f"speculative_draft_tensor_parallel_size={draft_tp} cannot be other value "
                           f"than target model tensor_parallel_size ({tp})", where)
    if spec.get("model"):
        read_model(str(spec["model"]))


def pp_partition(cfg: ServeConfig) -> list[int] | None:
    """vllm/distributed/utils.py::get_pp_indices's VLLM_PP_LAYER_PARTITION checks (worker init)."""
    text = os.environ.get("VLLM_PP_LAYER_PARTITION")
    if cfg.pp <= 1 or not text:
        return None
    where = "vllm/distributed/utils.py"
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError:
        raise StartupError("ValueError", f"Invalid partition string: {text}", where, stage="engine") from None
    if len(parts) != cfg.pp:
        raise StartupError("ValueError", f"len(partitions)={len(parts)} does not match pp_size={cfg.pp}.", where,
                           stage="engine")
    if sum(parts) != cfg.num_layers:
        raise StartupError("ValueError", f"sum(partitions)={sum(parts)} does not match "
                           f"num_hidden_layers={cfg.num_layers}.", where, stage="engine")
    return parts
