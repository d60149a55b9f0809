"""Guide-shaped engine scripts, one builder per script family of the two guides.

Each builder returns a :class:`~k3lab.render.shell.Script` laid out line by line as its guide
section writes it, with the guide's placeholders filled from the inventory. Where the kit
changes a guide command the change is made here and explained in ``k3lab.model.deviations``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import cast

from k3lab.model.catalog import Scenario
from k3lab.model.inventory import Inventory, Node
from k3lab.render.shell import (
    ArrayRef,
    Assign,
    Command,
    Computed,
    HeadlessArgs,
    Line,
    Part,
    Raw,
    Scope,
    Script,
    Source,
    Unset,
    Var,
    Word,
    plain_words,
    w,
    words,
)

PROXY_VARS = ("ftp_proxy", "FTP_PROXY", "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")
MOONCAKE_LIB = "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages/mooncake"
KIMI_PARSERS = ("--enable-auto-tool-choice", "--reasoning-parser", "--tool-call-parser")


@dataclass(frozen=True)
class Ctx:
    """Everything a builder needs about one node."""

    sc: Scenario
    inv: Inventory
    node: Node
    model: str
    draft: str | None  # draft checkpoint when DSpark3 is on
    head_ip: str  # rank-0 node of this node's role (DP master / PP master)
    parsers: bool  # render the reasoning/tool parser flags where the guide makes them optional
    engine_id: str

    @property
    def ports(self):
        return self.inv.ports

    @property
    def paths(self):
        return self.inv.paths

    @property
    def all_devices(self) -> str:
        return ",".join(str(i) for i in range(self.sc.devices))


def export(name: str, *parts: str | int | Var) -> Assign:
    return Assign(name, w(*parts), export=True)


def setv(name: str, *parts: str | int | Var) -> Assign:
    return Assign(name, w(*parts))


class Cmd:
    """Collects the lines of a command as the guide breaks them."""

    def __init__(self, *head: Part | int | Word | ArrayRef) -> None:
        self.lines = [words(*head)]

    def __call__(self, *tokens: Part | int | Word | ArrayRef) -> "Cmd":
        self.lines.append(words(*tokens))
        return self

    def done(self, exec_: bool = False) -> Command:
        return Command(self.lines, exec_=exec_)


def jword(obj: object, indent: int | None = None, compact: bool = True, **splices: Var) -> Word:
    """JSON as one shell word; ``splices`` become the guides' ``'"$VAR"'`` insertions."""
    text = json.dumps(obj, separators=(",", ":")) if indent is None and compact else json.dumps(obj, indent=indent)
    parts: list[str | Var] = [text]
    for name, var in splices.items():
        marker = f"@@{name}@@"
        nxt: list[str | Var] = []
        for part in parts:
            if isinstance(part, str) and marker in part:
                pieces = part.split(marker)
                for i, piece in enumerate(pieces):
                    if i:
                        nxt.append(var)
                    nxt.append(piece)
            else:
                nxt.append(part)
        parts = nxt
    return Word(tuple(parts))


def _dspark(ctx: Ctx, tp: int, eager: bool, kv_dtype: str) -> dict:
    return {"method": "dspark", "model": ctx.draft, "num_speculative_tokens": 3, "draft_tensor_parallel_size": tp,
            "draft_sample_method": "greedy", "kv_cache_dtype": kv_dtype, "enforce_eager": eager}


def _socket_env(ip_var: str, nic_var: str, braces: bool = False) -> list[Assign]:
    return [export("HCCL_IF_IP", Var(ip_var)), export("GLOO_SOCKET_IFNAME", Var(nic_var)),
            export("TP_SOCKET_IFNAME", Var(nic_var)), export("HCCL_SOCKET_IFNAME", Var(nic_var))]


# ------------------------------------------------------------------ Kimi-K3 (vLLM-Ascend 0.23.0)


def _k3_values(ctx: Ctx) -> list:
    """The 'Values that must be adapted' block the K3 mixed commands start with (Node 0 or a worker)."""
    node0 = ctx.node.rank == 0
    st: list = [Raw("#!/usr/bin/env bash"), Raw("# Values that must be adapted to the target environment."),
                export("MODEL_PATH", ctx.model), export("LOCAL_IP", ctx.node.local_ip)]
    if not node0:
        st.append(export("NODE0_IP", ctx.head_ip))
    st += [export("NIC_NAME", ctx.node.nic), export("PORT", ctx.ports.api), export("RPC_PORT", ctx.ports.dp_rpc)]
    if not node0:
        st.append(export("DP_START_RANK", ctx.node.rank))
    return st + [Raw("")]


def k3_mixed(ctx: Ctx) -> Script:
    """K3 §5.1.1 (and the §5.1.1 note, §7.5, §8.2 variants): Node 0 or a headless worker."""
    p = cast("dict[str, int | str]", ctx.sc.params)  # the catalog's K3 mixed values: ints and strings
    node0 = ctx.node.rank == 0
    st = _k3_values(ctx) + [*_socket_env("LOCAL_IP", "NIC_NAME")]
    if node0:
        st.append(export("VLLM_ENGINE_READY_TIMEOUT_S", 7200))
    st += [export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"), export("OMP_PROC_BIND", "false"),
           export("OMP_NUM_THREADS", 1), export("TASK_QUEUE_ENABLE", 1), export("HCCL_BUFFSIZE", 800),
           export("ASCEND_RT_VISIBLE_DEVICES", ctx.all_devices), Raw("")]
    c = Cmd("vllm", "serve", w(Var("MODEL_PATH")))
    if not node0:
        c("--headless")
    c("--served-model-name", ctx.sc.served_name)("--port", w(Var("PORT")))("--allowed-local-media-path", "/")
    c("--trust-remote-code")("--tensor-parallel-size", 16)("--data-parallel-size", p["dp"])
    c("--data-parallel-size-local", 1)
    if not node0:
        c("--data-parallel-start-rank", w(Var("DP_START_RANK")))
    c("--data-parallel-address", w(Var("LOCAL_IP" if node0 else "NODE0_IP")))("--data-parallel-rpc-port", w(Var("RPC_PORT")))
    c("--enable-prefix-caching")("--enable-expert-parallel")("--max-num-seqs", p["max_num_seqs"])
    c("--max-model-len", ctx.sc.max_model_len)("--max-num-batched-tokens", p["max_num_batched_tokens"])
    c("--gpu-memory-utilization", p["gpu_memory_utilization"])
    c("--compilation-config", jword({"cudagraph_mode": "FULL_DECODE_ONLY"}))("--mm-processor-cache-gb", 0)
    c("--additional-config", w('{"enable_cpu_binding":true, "enable_flashcomm1":true}'))
    c("--mm-encoder-tp-mode", "data")("--limit-mm-per-prompt", w('{"vision_chunk": 2}'))
    c("--enable-auto-tool-choice")("--reasoning-parser", "kimi_k3")("--tool-call-parser", "kimi_k3")
    return Script([*st, c.done()])


def k3_a2(ctx: Ctx) -> Script:
    """K3 §5.2.1: eight A2 nodes, DP8/TP8, language model only."""
    node0 = ctx.node.rank == 0
    st = _k3_values(ctx) + [Source(w("/usr/local/Ascend/ascend-toolkit/set_env.sh")),
           Source(w("/vllm-workspace/vllm-ascend/vllm_ascend/_cann_ops_custom/vendors/custom_transformer/bin/set_env.bash")),
           Raw(""), export("PYTHONPATH", "/vllm-workspace/vllm-ascend:", Var("PYTHONPATH", default_empty=True)),
           export("VLLM_HOST_IP", Var("LOCAL_IP")), *_socket_env("LOCAL_IP", "NIC_NAME"),
           export("HCCL_CONNECT_TIMEOUT", 1800), export("HCCL_EXEC_TIMEOUT", 1800), export("HCCL_BUFFSIZE", 256),
           export("HCCL_INTRA_ROCE_ENABLE", 1), export("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 30000),
           export("OMP_PROC_BIND", "false"), export("OMP_NUM_THREADS", 10),
           export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"), export("VLLM_LOGGING_LEVEL", "INFO"),
           export("TASK_QUEUE_ENABLE", 1), export("TIKTOKEN_CACHE_DIR", "/root/.cache/tiktoken-k3"),
           export("ASCEND_RT_VISIBLE_DEVICES", ctx.all_devices), Raw("")]
    c = Cmd("vllm", "serve", w(Var("MODEL_PATH")))
    if not node0:
        c("--headless")
    c("--host", "0.0.0.0")("--port", w(Var("PORT")))("--served-model-name", ctx.sc.served_name)("--trust-remote-code")
    c("--language-model-only")("--mm-encoder-tp-mode", "data")("--skip-mm-profiling")
    c("--limit-mm-per-prompt", w('{"vision_chunk":2}'))("--data-parallel-size", 8)("--data-parallel-size-local", 1)
    c("--data-parallel-start-rank", 0 if node0 else w(Var("DP_START_RANK")))
    c("--data-parallel-address", w(Var("LOCAL_IP" if node0 else "NODE0_IP")))("--data-parallel-rpc-port", w(Var("RPC_PORT")))
    c("--tensor-parallel-size", 8)("--enable-expert-parallel")("--dtype", "bfloat16")
    c("--max-model-len", ctx.sc.max_model_len)("--gpu-memory-utilization", "0.90")("--enable-prefix-caching")
    c("--compilation-config", w('{"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[1,2,4,8]}'))
    c("--tokenizer-mode", "kimi_k3")("--enable-auto-tool-choice")("--reasoning-parser", "kimi_k3")
    c("--tool-call-parser", "kimi_k3")
    c("--additional-config", w('{"enable_flashcomm1":false,"ascend_compilation_config":'
                               '{"enable_npugraph_ex":true,"enable_static_kernel":false},"enable_cpu_binding":true}'))
    return Script([*st, c.done()])


def k3_pd(ctx: Ctx) -> Script:
    """K3 §5.1.2.2: the Prefill or Decode ``run_dp_template.sh`` driven by ``launch_online_dp.py``."""
    prefill = ctx.node.role == "prefill"
    kv_port = ctx.ports.kv_prefill if prefill else ctx.ports.kv_decode
    role = "PREFILL" if prefill else "DECODE"
    st: list = [Raw("#!/usr/bin/env bash"), setv("KV_PORT", kv_port), Raw(""),
                Unset(("ftp_proxy", "FTP_PROXY")), Unset(("https_proxy", "HTTPS_PROXY")),
                Unset(("http_proxy", "HTTP_PROXY")), Raw(""),
                export("VLLM_RPC_TIMEOUT", 3600000), export("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 30000),
                export("HCCL_EXEC_TIMEOUT", 204), export("HCCL_CONNECT_TIMEOUT", 120), Raw(""),
                Raw(f"# {role}_NIC_NAME / {role}_LOCAL_IP"),
                setv("nic_name", ctx.node.nic), setv("local_ip", ctx.node.local_ip), Raw(""),
                *_socket_env("local_ip", "nic_name"), export("OMP_PROC_BIND", "false"), export("OMP_NUM_THREADS", 10),
                export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"), export("VLLM_ASCEND_ENABLE_MLAPO", 1),
                export("HCCL_BUFFSIZE", 1024), export("TASK_QUEUE_ENABLE", 1)]
    if not prefill:
        st.append(export("HCCL_OP_EXPANSION_MODE", "AIV"))
    st += [export("VLLM_USE_V1", 1), export("ASCEND_RT_VISIBLE_DEVICES", Var("1")),
           export("ASCEND_ENABLE_USE_FABRIC_MEM", 1),
           export("LD_LIBRARY_PATH", MOONCAKE_LIB + ":", Var("LD_LIBRARY_PATH", default_empty=True))]
    if prefill:
        st += [Raw(""), export("MMC_LOCAL_CONFIG_PATH", f"{ctx.paths.memcache_config_dir}/mmc-local.conf"),
               export("PYTHONHASHSEED", 0), export("ACL_OP_INIT_MODE", 1)]
    st.append(Raw(""))
    c = Cmd("vllm", "serve", ctx.model)("--host", "0.0.0.0")("--port", w(Var("2")))
    c("--data-parallel-size", w(Var("3")))("--data-parallel-rank", w(Var("4")))("--data-parallel-address", w(Var("5")))
    c("--data-parallel-rpc-port", w(Var("6")))("--tensor-parallel-size", w(Var("7")))("--enable-expert-parallel")
    c("--seed", 1024)("--served-model-name", ctx.sc.served_name)("--max-model-len", ctx.sc.max_model_len)
    c("--max-num-batched-tokens", 8192)("--max-num-seqs", 16)
    if prefill:
        c("--enforce-eager")
    c("--trust-remote-code")("--gpu-memory-utilization", "0.9")("--mm-encoder-tp-mode", "data")("--skip-mm-profiling")
    if not prefill:
        c("--compilation-config", w('{"cudagraph_mode": "FULL_DECODE_ONLY"}'))
    c("--safetensors_load_strategy", "prefetch")("--mamba-cache-mode", "align")("--enable-prefix-caching")
    c("--additional-config", w('{"recompute_scheduler_enable":false}'))
    c("--limit-mm-per-prompt", w('{"vision_chunk": 2}' if prefill else '{"vision_chunk":2}'))
    if ctx.parsers:  # K3 §10: required for reasoning and tool calling; the §5.1.2 templates omit them
        c("--enable-auto-tool-choice")("--reasoning-parser", "kimi_k3")("--tool-call-parser", "kimi_k3")
    sizes = {"prefill": {"dp_size": 8, "tp_size": 16}, "decode": {"dp_size": 8, "tp_size": 16}}
    kv: dict[str, object]
    mooncake: dict[str, object] = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if prefill else "kv_consumer",
                "kv_port": "@@KV@@", "kv_connector_extra_config": sizes}
    if prefill:
        kv = {"kv_connector": "MultiConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"connectors": [
            mooncake, {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
                       "kv_connector_extra_config": {"backend": "memcache", "lookup_rpc_port": "0"}}]}}
    else:
        kv = mooncake
    c("--kv-transfer-config")(jword(kv, indent=2, KV=Var("KV_PORT")))
    return Script([*st, c.done()])


# ------------------------------------------------------------ Kimi K3.1 Pro (vLLM-Ascend 0.30.0)

_A3_SIZES = {"prefill": {"dp_size": 1, "tp_size": 4, "pp_size": 4, "pcp_size": 4, "dcp_size": 1},
             "decode": {"dp_size": 4, "tp_size": 16, "pp_size": 1, "pcp_size": 1, "dcp_size": 16}}
_A5_SIZES = {"prefill": {"pp_size": 4, "pcp_size": 8, "dp_size": 1, "tp_size": 1},
             "decode": {"dp_size": 4, "tp_size": 8}}


def _prefill_head(ctx: Ctx, quote: str = '"') -> list:
    """The top-level variables every K3.1 Prefill template starts with."""
    return [setv("API_PORT", ctx.ports.api), setv("NODE_RANK", ctx.node.rank), setv("MASTER_ADDR", ctx.head_ip),
            setv("MASTER_PORT", ctx.ports.master)]


def k31_a3(ctx: Ctx) -> Script:
    """K3.1 Pro §5.1.1 / §5.2.1 A3 templates (basic and 1M differ only in --max-model-len)."""
    return Script([*_k31_a3_env(ctx), _k31_a3_serve(ctx).done()])


def _k31_a3_env(ctx: Ctx) -> list:
    """The template lines before vllm serve: variables and exports."""
    prefill = ctx.node.role == "prefill"
    st: list = [Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail")]
    if prefill:
        st += [*_prefill_head(ctx), HeadlessArgs("headless_args", "NODE_RANK")]
    st += [setv("KV_PORT", ctx.ports.kv_prefill if prefill else ctx.ports.kv_decode),
           setv("nic_name", ctx.node.nic), setv("local_ip", ctx.node.local_ip), Unset(PROXY_VARS),
           Unset(("LD_PRELOAD", "HCCL_OP_EXPANSION_MODE", "VLLM_PP_LAYER_PARTITION") if prefill
                 else ("LD_PRELOAD", "VLLM_PP_LAYER_PARTITION")),
           export("HCCL_IF_IP", Var("local_ip")), export("HCCL_SOCKET_IFNAME", Var("nic_name")),
           export("GLOO_SOCKET_IFNAME", Var("nic_name")), export("TP_SOCKET_IFNAME", Var("nic_name"))]
    if not prefill:
        st.append(export("HCCL_OP_EXPANSION_MODE", "AIV"))
    base = ctx.ports.hccl_base_prefill if prefill else ctx.ports.hccl_base_decode
    rng = ctx.ports.hccl_range_prefill if prefill else ctx.ports.hccl_range_decode
    st += [export("HCCL_BUFFSIZE", 1024), export("HCCL_CONNECT_TIMEOUT", 1200), export("HCCL_IF_BASE_PORT", base),
           export("HCCL_HOST_SOCKET_PORT_RANGE", rng), export("HCCL_NPU_SOCKET_PORT_RANGE", "auto"),
           export("ASCEND_RT_VISIBLE_DEVICES", ctx.all_devices if prefill else Var("1")),
           export("LD_LIBRARY_PATH", MOONCAKE_LIB + ":", Var("LD_LIBRARY_PATH", default_empty=True)),
           export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"), export("PYTHONHASHSEED", 0),
           export("OMP_NUM_THREADS", 1), export("OMP_PROC_BIND", "false"), export("VLLM_USE_V2_MODEL_RUNNER", 1),
           export("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 30000), export("VLLM_HOST_IP", Var("local_ip"))]
    if prefill:
        st.append(export("VLLM_PP_LAYER_PARTITION", str(ctx.sc.params["layer_partition"])))
    st.append(export("FLA_STABLE_DEBUG_DESC", 0))
    return st


def _k31_a3_serve(ctx: Ctx) -> Cmd:
    """The vllm serve command."""
    prefill = ctx.node.role == "prefill"
    c = Cmd("vllm", "serve", ctx.model)("--host", "0.0.0.0")("--port", w(Var("API_PORT" if prefill else "2")))
    c("--quantization", "ascend")("--enable-auto-tool-choice")("--reasoning-parser", "kimi_k3")
    c("--tool-call-parser", "kimi_k3")("--tokenizer-mode", "kimi_k3")
    if prefill:
        c("--data-parallel-size", w("1"))("--pipeline-parallel-size", 4)("--prefill-context-parallel-size", 4)
        c("--decode-context-parallel-size", 1)("--nnodes", 4)("--node-rank", w(Var("NODE_RANK")))
        c(ArrayRef("headless_args"))("--distributed-executor-backend", "mp")("--data-parallel-backend", "mp")
        c("--master-addr", w(Var("MASTER_ADDR")))("--master-port", w(Var("MASTER_PORT")))
        c("--tensor-parallel-size", w("4"))
    else:
        c("--data-parallel-size", w(Var("3")))("--data-parallel-size-local", 1)("--data-parallel-rank", w(Var("4")))
        c("--data-parallel-address", w(Var("5")))("--data-parallel-rpc-port", w(Var("6")))
        c("--distributed-executor-backend", "mp")("--tensor-parallel-size", w(Var("7")))
        c("--pipeline-parallel-size", 1)("--prefill-context-parallel-size", 1)("--decode-context-parallel-size", 16)
        c("--cp-kv-cache-interleave-size", 768)("--block-size", 768)
    c("--enable-expert-parallel")("--seed", 1024)("--served-model-name", ctx.sc.served_name)
    c("--max-model-len", ctx.sc.max_model_len)("--max-num-batched-tokens", 8192)("--max-num-seqs", 12)
    if prefill:
        c("--enforce-eager")
    c("--trust-remote-code")("--gpu-memory-utilization", "0.90" if prefill else "0.80")
    if prefill:
        c("--block-size", 768)
    c("--kv-cache-dtype", "int8")("--attention_config.indexer_kv_dtype", "int8")("--mm-encoder-tp-mode", "data")
    c("--mm-processor-cache-gb", 1)("--skip-mm-profiling")
    if not prefill:
        c("--compilation-config", jword({"cudagraph_mode": "FULL_DECODE_ONLY"}))
    c("--enable-prefix-caching")
    if prefill:
        c("--additional-config", jword({"enable_flashcomm1": False, "multistream_overlap_shared_expert": False,
                                        "enable_fused_mc2": 0, "enable_shared_expert_dp": False}))
    else:
        c("--additional-config", jword({"enable_fused_mc2": 0, "multistream_overlap_shared_expert": True,
                                        "enable_shared_expert_dp": False, "enable_mlapo": True,
                                        "scheduler_config": {"recompute_scheduler_enable": True}}))
    c("--limit-mm-per-prompt", jword({"vision_chunk": 2}))
    kv = {"kv_connector": "MooncakeConnectorV2", "kv_role": "kv_producer" if prefill else "kv_consumer",
          "kv_port": "@@KV@@", "kv_connector_extra_config": _A3_SIZES}
    c("--kv-transfer-config")(jword(kv, indent=2, KV=Var("KV_PORT")))
    if ctx.draft:
        c("--speculative-config", jword(_dspark(ctx, 4 if prefill else 16, prefill, "bfloat16")))
    return c


def k31_a3_pooled(ctx: Ctx) -> Script:
    """K3.1 Pro §5.3.5 A3 pooled templates."""
    return Script([*_k31_a3_pooled_env(ctx), _k31_a3_pooled_serve(ctx).done(exec_=True)])


def _k31_a3_pooled_env(ctx: Ctx) -> list:
    """The template lines before vllm serve: variables, exports, the pool environment."""
    prefill = ctx.node.role == "prefill"
    mmc = f"{ctx.paths.memcache_config_dir}/runtime_env.sh"
    st: list = [Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail")]
    if prefill:
        st += [*_prefill_head(ctx), setv("local_ip", ctx.node.local_ip), setv("dp_rank", 0),
               setv("PREFILL_DP_RPC_PORT", ctx.ports.prefill_dp_rpc),
               HeadlessArgs("worker_args", "NODE_RANK", style="string"), setv("nic_name", ctx.node.nic)]
    else:
        st += [setv("local_ip", ctx.node.local_ip), setv("nic_name", ctx.node.nic)]
    st += [Unset(("ftp_proxy", "FTP_PROXY", "https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")),
           Unset(("LD_PRELOAD", "HCCL_OP_EXPANSION_MODE", "VLLM_PP_LAYER_PARTITION") if prefill
                 else ("LD_PRELOAD", "VLLM_PP_LAYER_PARTITION")),
           export("HCCL_IF_IP", Var("local_ip")), export("HCCL_SOCKET_IFNAME", Var("nic_name")),
           export("GLOO_SOCKET_IFNAME", Var("nic_name")), export("HCCL_BUFFSIZE", 1024)]
    if prefill:
        st += [export("HCCL_IF_BASE_PORT", ctx.ports.hccl_base_prefill),
               export("HCCL_HOST_SOCKET_PORT_RANGE", ctx.ports.hccl_range_prefill),
               export("HCCL_NPU_SOCKET_PORT_RANGE", "auto")]
    else:
        st.append(export("HCCL_OP_EXPANSION_MODE", "AIV"))
    st += [export("HCCL_CONNECT_TIMEOUT", 1200), export("ASCEND_RT_VISIBLE_DEVICES", ctx.all_devices if prefill else Var("1")),
           export("LD_LIBRARY_PATH", MOONCAKE_LIB + ":", Var("LD_LIBRARY_PATH", default_empty=True)),
           Source(w(mmc), effect=runtime_env_effect),
           export("MMC_LOCAL_CONFIG_PATH", f"{ctx.paths.memcache_config_dir}/mmc-local.conf"),
           Line(plain_words("test", "-r", w(Var("MMC_LOCAL_CONFIG_PATH"))))]
    if prefill:
        st.append(export("VLLM_PP_LAYER_PARTITION", str(ctx.sc.params["layer_partition"])))
    st += [export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True" if prefill else "expandable_segments:False"),
           export("PYTHONHASHSEED", 0), export("VLLM_HOST_IP", Var("local_ip")), export("VLLM_USE_V2_MODEL_RUNNER", 1),
           export("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 30000), export("FLA_STABLE_DEBUG_DESC", 0)]
    return st


def _k31_a3_pooled_serve(ctx: Ctx) -> Cmd:
    """The vllm serve command."""
    prefill = ctx.node.role == "prefill"
    c = Cmd("vllm", "serve", ctx.model)
    if prefill:
        c("--host", "0.0.0.0", "--port", w(Var("API_PORT")))("--quantization", "ascend")
        c("--tensor-parallel-size", w("4"))("--nnodes", 4)("--node-rank", w(Var("NODE_RANK")))
        c("--master-addr", w(Var("MASTER_ADDR")))("--master-port", w(Var("MASTER_PORT")))(ArrayRef("worker_args"))
        c("--prefill-context-parallel-size", 4)("--pipeline-parallel-size", 4)("--decode-context-parallel-size", 1)
        c("--data-parallel-size", w("1"))("--data-parallel-size-local", 1)("--data-parallel-rank", w(Var("dp_rank")))
        c("--data-parallel-address", w(Var("MASTER_ADDR")))("--data-parallel-rpc-port", w(Var("PREFILL_DP_RPC_PORT")))
        c("--distributed-executor-backend", "mp")
    else:
        c("--host", "0.0.0.0", "--port", w(Var("2")))("--quantization", "ascend")
        c("--tensor-parallel-size", w(Var("7")))("--data-parallel-size", w(Var("3")))
        c("--data-parallel-rank", w(Var("4")))("--data-parallel-address", w(Var("5")))
        c("--data-parallel-rpc-port", w(Var("6")))("--decode-context-parallel-size", 16)
        c("--cp-kv-cache-interleave-size", 768)("--block-size", 768)
    c("--enable-expert-parallel", "--seed", 1024)("--tokenizer-mode", "kimi_k3")("--enable-auto-tool-choice")
    c("--reasoning-parser", "kimi_k3")("--tool-call-parser", "kimi_k3")("--served-model-name", ctx.sc.served_name)
    c("--max-model-len", ctx.sc.max_model_len)("--max-num-batched-tokens", 8192)("--max-num-seqs", 32)
    if prefill:
        c("--enforce-eager", "--trust-remote-code")("--gpu-memory-utilization", "0.9")("--block-size", 768)
    else:
        c("--trust-remote-code")("--gpu-memory-utilization", "0.80")
    c("--kv-cache-dtype", "int8")("--attention_config.indexer_kv_dtype", "int8")
    c("--speculative-config", jword(_dspark(ctx, 4 if prefill else 16, prefill, "bfloat16")))
    if not prefill:
        c("--compilation-config", jword({"cudagraph_mode": "FULL_DECODE_ONLY"}))
    c("--mm-encoder-tp-mode", "data")("--mm-processor-cache-gb", 1)("--skip-mm-profiling")("--enable-prefix-caching")
    c("--limit-mm-per-prompt", jword({"vision_chunk": 2}))
    c("--profiler-config", jword({"profiler": "torch", "torch_profiler_dir": ctx.paths.profiler_dir,
                                  "torch_profiler_with_stack": False}))
    if prefill:
        c("--additional-config", jword({"enable_flashcomm1": True, "multistream_overlap_shared_expert": False,
                                        "enable_fused_mc2": 0, "enable_shared_expert_dp": True}))
    else:
        c("--additional-config", jword({"multistream_overlap_shared_expert": True, "enable_mlapo": True,
                                        "scheduler_config": {"recompute_scheduler_enable": True}}))
    role = "kv_producer" if prefill else "kv_consumer"
    sizes = {k: dict(v) for k, v in _A3_SIZES.items()}
    if not prefill:
        sizes["decode"].pop("pp_size")  # the guide's pooled Decode omits it (optional, defaults to 1)
    kv = {"kv_connector": "MultiConnector", "kv_role": role, "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "MooncakeConnectorV2", "kv_role": role,
         "kv_port": str(ctx.ports.kv_prefill if prefill else ctx.ports.kv_decode), "kv_connector_extra_config": sizes},
        {"kv_connector": "AscendStoreConnector", "kv_role": role, "kv_connector_extra_config": {
            "backend": "memcache", "lookup_rpc_port": "33101" if prefill else "33501", "use_layerwise": False}}]}}
    c("--kv-transfer-config", jword(kv, indent=2))
    return c


def _fill_draft(fmt: str, scope: Scope) -> str:
    """SPECULATIVE_CONFIG as the template's printf computes it."""
    return fmt % scope.get("DRAFT_MODEL_PATH")


def runtime_env_effect(scope) -> None:
    """What ``runtime_env.sh`` exports (K3.1 Pro §5.3.1), so resolved env includes it."""
    scope.env.setdefault("MEMC_PYTHON", "python3")
    scope.env["PYTHONHASHSEED"] = "0"


def k31_a5(ctx: Ctx) -> Script:
    """K3.1 Pro §5.1.1 / §5.2.1 / §5.3.5 950DT templates (basic, 1M and pooled)."""
    return Script([*_k31_a5_env(ctx), _k31_a5_serve(ctx).done()])


def _k31_a5_env(ctx: Ctx) -> list:
    """The template lines before vllm serve: variables, exports, the DSpark3 and pool settings."""
    prefill = ctx.node.role == "prefill"
    pooled = bool(ctx.sc.params.get("pooled"))
    st: list = [Raw("#!/usr/bin/env bash"), Raw("set -e")]
    if prefill:
        st += _prefill_head(ctx)
    st += [Unset(("ftp_proxy", "FTP_PROXY")), Unset(("https_proxy", "HTTPS_PROXY")), Unset(("http_proxy", "HTTP_PROXY")),
           setv("nic_name", ctx.node.nic), setv("local_ip", ctx.node.local_ip),
           setv("KV_PORT", ctx.ports.kv_prefill if prefill else ctx.ports.kv_decode),
           setv("ENGINE_ID", ctx.engine_id), setv("DRAFT_MODEL_PATH", ctx.draft or ctx.sc.draft_default)]
    if prefill:
        st.append(HeadlessArgs("headless_args", "NODE_RANK"))
    st += [export("ASCEND_RT_VISIBLE_DEVICES", ctx.all_devices if prefill else Var("1")),
           export("HCCL_IF_IP", Var("local_ip")), export("VLLM_HOST_IP", Var("local_ip")),
           export("GLOO_SOCKET_IFNAME", Var("nic_name")), export("TP_SOCKET_IFNAME", Var("nic_name")),
           export("HCCL_SOCKET_IFNAME", Var("nic_name")), export("ASCEND_LOCAL_COMM_RES", '{"version":"1.3"}'),
           export("VLLM_RPC_TIMEOUT", 3600000), export("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", 30000),
           export("HCCL_EXEC_TIMEOUT", 2040), export("HCCL_CONNECT_TIMEOUT", 1200),
           export("HCCL_BUFFSIZE", 2000 if prefill else 800), export("OMP_PROC_BIND", "false"),
           export("OMP_NUM_THREADS", 10), export("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
           export("TASK_QUEUE_ENABLE", 1)]
    spec_fmt = json.dumps({"method": "dspark", "model": "%s", "num_speculative_tokens": 3,
                           "draft_tensor_parallel_size": 1 if prefill else 8, "draft_sample_method": "greedy",
                           "enforce_eager": False, "kv_cache_dtype": "auto"}, separators=(",", ":"))
    st += [Computed("SPECULATIVE_CONFIG", f'"$(\nprintf \\\n{Word((spec_fmt,)).render()} \\\n"$DRAFT_MODEL_PATH"\n)"',
                    partial(_fill_draft, spec_fmt)),
           export("HCCL_OP_EXPANSION_MODE", "CCU_SCHED"), export("VLLM_USE_V2_MODEL_RUNNER", 1)]
    if prefill:
        st.append(export("VLLM_PP_LAYER_PARTITION", str(ctx.sc.params["layer_partition"])))
    if pooled:
        if prefill:
            st.append(setv("LOOKUP_RPC_PORT", 0))
        else:
            st.append(Computed("LOOKUP_RPC_PORT", "$(($4 + 4))", lambda s: str(int(s.get("4")) + 4)))
        # The guide's guard is a real expansion (``: "${VAR:?msg}"``): it aborts when the variable is unset.
        st += [Raw(': "${MMC_LOCAL_CONFIG_PATH:?Load the node-specific pool environment before starting vLLM}"'),
               Line(plain_words("test", "-r", w(Var("MMC_LOCAL_CONFIG_PATH")))),
               export("LD_LIBRARY_PATH", MOONCAKE_LIB + ":", Var("LD_LIBRARY_PATH", default_empty=True))]
    return st


def _k31_a5_serve(ctx: Ctx) -> Cmd:
    """The vllm serve command."""
    prefill = ctx.node.role == "prefill"
    pooled = bool(ctx.sc.params.get("pooled"))
    c = Cmd("vllm", "serve", ctx.model)("--host", "0.0.0.0")
    if prefill:
        c("--port", w(Var("API_PORT")))("--data-parallel-size", w("1"))("--tensor-parallel-size", w("1"))
        c("--prefill-context-parallel-size", 8)("--nnodes", 4)("--node-rank", w(Var("NODE_RANK")))
        c("--master-addr", w(Var("MASTER_ADDR")))("--master-port", w(Var("MASTER_PORT")))
        c("--pipeline-parallel-size", 4)(ArrayRef("headless_args"))
    else:
        c("--port", w(Var("2")))("--data-parallel-size", w(Var("3")))("--data-parallel-rank", w(Var("4")))
        c("--data-parallel-address", w(Var("5")))("--data-parallel-rpc-port", w(Var("6")))
        c("--tensor-parallel-size", w(Var("7")))("--decode-context-parallel-size", 8)
    c("--block-size", 1536)("--cp-kv-cache-interleave-size", 1536)("--served-model-name", ctx.sc.served_name)
    c("--allowed-local-media-path", "/")("--trust-remote-code")
    c("--model-loader-extra-config", jword({"enable_multithread_load": True, "num_threads": 128}))
    c("--enable-expert-parallel")("--max-num-seqs", 64)("--max-model-len", ctx.sc.max_model_len)
    c("--max-num-batched-tokens", 16384 if prefill else 768)("--gpu-memory-utilization", "0.90" if prefill else "0.92")
    c("--enable-prefix-caching")("--kv-cache-dtype", "fp8")("--quantization", "ascend")
    c("--attention_config.indexer_kv_dtype", "fp8")("--tokenizer-mode", "kimi_k3")
    if ctx.parsers:
        c("--enable-auto-tool-choice")("--reasoning-parser", "kimi_k3")("--tool-call-parser", "kimi_k3")
    c("--mm-processor-cache-gb", 0)("--mm-encoder-tp-mode", "data")
    if prefill:
        c("--enforce-eager")
        c("--additional-config", jword({"enable_mlapo": False, "enable_flashcomm1": True, "enable_shared_expert_dp": True,
                                        "multistream_overlap_shared_expert": False, "enable_fused_mc2": 0,
                                        "enable_force_eplb": False}))
    else:
        c("--compilation-config", jword({"cudagraph_mode": "FULL_DECODE_ONLY"}))
        c("--additional-config", jword({"enable_mlapo": True, "multistream_overlap_shared_expert": True,
                                        "scheduler_config": {"recompute_scheduler_enable": True}}))
    c("--profiler-config", jword({"profiler": "torch", "torch_profiler_dir": ctx.paths.profiler_dir,
                                  "torch_profiler_with_stack": False}))
    role = "kv_producer" if prefill else "kv_consumer"
    mooncake = {"kv_connector": "MooncakeConnectorV2", "kv_role": role, "kv_port": "@@KV@@",
                "engine_id": "@@EID@@", "kv_connector_extra_config": _A5_SIZES}
    if pooled:
        kv = {"kv_connector": "MultiConnector", "kv_role": role, "kv_connector_extra_config": {"connectors": [
            mooncake, {"kv_connector": "AscendStoreConnector", "kv_role": role, "kv_connector_extra_config": {
                "backend": "memcache", "use_layerwise": False, "lookup_rpc_port": "@@LOOKUP@@"}}]}}
        word = jword(kv, indent=2, KV=Var("KV_PORT"), EID=Var("ENGINE_ID"), LOOKUP=Var("LOOKUP_RPC_PORT"))
    else:
        word = jword(mooncake, indent=2, KV=Var("KV_PORT"), EID=Var("ENGINE_ID"))
    c("--kv-transfer-config", word)("--speculative-config", w(Var("SPECULATIVE_CONFIG")))
    return c
