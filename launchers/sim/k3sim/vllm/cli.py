"""``vllm serve`` argument parsing with vLLM's FlexibleArgumentParser spelling rules.

vllm-upstream.md §9: underscores in a flag name become dashes up to the first ``.`` or ``=``;
``--group.key value`` collects into ``--group '{"key": value}'`` (value parsed with
``json.loads``, else kept as a string; repeated keys merge); ``--model X`` moves to the
positional with a warning; ``-O3``/``-O 3`` is ``--optimization-level``. Unknown options end in
argparse's real ``vllm: error: unrecognized arguments: ...`` (exit 2): with subcommands the
top-level parser reports leftovers. Value errors come from the ``vllm serve`` subparser.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from typing import Any, Callable

from pydantic import ValidationError

from k3sim.vllm import configs
from k3sim.vllm.log import api as log

_FLAG_HEAD = re.compile(r"(?<=--)[^\.]*")


def human_readable_int(value: str) -> int:
    """``1k`` = 1000, ``1K`` = 1024 (vllm/utils/argparse_utils.py)."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(value)


def _json_dict(value: str) -> Any:
    """vLLM's ``optional_type(json.loads)`` for dict-typed engine args."""
    if value in ("", "None"):
        return None
    try:
        return json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {json.loads}.") from None


def _dataclass(cls: type) -> Callable[[str], dict[str, Any]]:
    """vLLM's ``parse_dataclass``: ``TypeAdapter(cls).validate_json``, ``ArgumentTypeError(repr(e))`` on failure."""

    def parse(value: str) -> dict[str, Any]:
        try:
            return configs.validate_json(cls, value)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(repr(exc)) from None

    parse.__name__ = cls.__name__
    return parse


def _compilation(value: str) -> Any:
    if value.strip().isdigit():  # legacy: a bare optimization level
        return {"mode": int(value)}
    return _dataclass(configs.CompilationConfig)(value)


_compilation.__name__ = "CompilationConfig"

BOOL = argparse.BooleanOptionalAction


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="vllm", description="vLLM CLI", allow_abbrev=False)
    top.add_argument("-v", "--version", action="store_true", help="show version")
    sub = top.add_subparsers(required=False, dest="subparser")
    p = sub.add_parser("serve", prog="vllm serve", allow_abbrev=False,
                       help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
                       usage="vllm serve [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", default=None)
    a = p.add_argument
    # Frontend (vllm/entrypoints/openai/cli_args.py)
    a("--host", type=str, default=None)
    a("--port", type=int, default=8000)
    a("--uds", type=str, default=None)
    a("--uvicorn-log-level", choices=["critical", "error", "warning", "info", "debug", "trace"], default="info")
    a("--disable-uvicorn-access-log", action=BOOL, default=False)
    a("--allow-credentials", action=BOOL, default=False)
    a("--allowed-origins", type=json.loads, default=["*"])
    a("--allowed-methods", type=json.loads, default=["*"])
    a("--allowed-headers", type=json.loads, default=["*"])
    a("--api-key", type=str, nargs="+", default=None)
    a("--lora-modules", type=str, nargs="+", default=None)
    a("--chat-template", type=str, default=None)
    a("--chat-template-content-format", choices=["auto", "string", "openai"], default="auto")
    a("--trust-request-chat-template", action=BOOL, default=False)
    a("--default-chat-template-kwargs", type=_json_dict, default=None)
    a("--response-role", type=str, default="assistant")
    a("--ssl-keyfile", type=str, default=None)
    a("--ssl-certfile", type=str, default=None)
    a("--ssl-ca-certs", type=str, default=None)
    a("--root-path", type=str, default=None)
    a("--middleware", type=str, action="append", default=[])
    a("--return-tokens-as-token-ids", action=BOOL, default=False)
    a("--enable-auto-tool-choice", action=BOOL, default=False)
    a("--exclude-tools-when-tool-choice-none", action=BOOL, default=False)
    a("--tool-call-parser", type=str, default=None)
    a("--tool-parser-plugin", type=str, default="")
    a("--tool-server", type=str, default=None)
    a("--log-config-file", type=str, default=None)
    a("--max-log-len", type=int, default=None)
    a("--disable-fastapi-docs", action=BOOL, default=False)
    a("--enable-prompt-tokens-details", action=BOOL, default=False)
    a("--enable-server-load-tracking", action=BOOL, default=False)
    a("--enable-force-include-usage", action=BOOL, default=False)
    a("--enable-request-id-headers", action=BOOL, default=False)
    a("--enable-log-outputs", action=BOOL, default=False)
    a("--enable-log-requests", action=BOOL, default=False)
    a("--disable-log-requests", action=BOOL, default=True)
    a("--disable-log-stats", action="store_true", default=False)
    a("--headless", action="store_true", default=False)
    a("--api-server-count", "-asc", type=int, default=None)
    a("--config", type=str, default=None)
    a("--reasoning-parser", type=str, default="")
    a("--reasoning-parser-plugin", type=str, default="")
    # Model (vllm/config/model.py)
    a("--model", type=str, default=None)
    a("--runner", choices=["auto", "generate", "pooling", "draft"], default="auto")
    a("--tokenizer", type=str, default=None)
    a("--tokenizer-mode", type=str, default="auto")
    a("--trust-remote-code", action=BOOL, default=False)
    a("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"], default="auto")
    a("--seed", type=int, default=0)
    a("--hf-config-path", type=str, default=None)
    a("--allowed-local-media-path", type=str, default="")
    a("--allowed-media-domains", type=str, nargs="+", default=None)
    a("--revision", type=str, default=None)
    a("--code-revision", type=str, default=None)
    a("--tokenizer-revision", type=str, default=None)
    a("--max-model-len", type=human_readable_int, default=None)
    a("--quantization", "-q", type=str, default=None)
    a("--enforce-eager", action=BOOL, default=False)
    a("--max-logprobs", type=int, default=20)
    a("--logprobs-mode", type=str, default="raw_logprobs")
    a("--disable-sliding-window", action=BOOL, default=False)
    a("--disable-cascade-attn", action=BOOL, default=False)
    a("--skip-tokenizer-init", action=BOOL, default=False)
    a("--enable-prompt-embeds", action=BOOL, default=False)
    a("--served-model-name", type=str, nargs="+", default=None)
    a("--config-format", type=str, default="auto")
    a("--hf-token", type=str, nargs="?", const=True, default=None)
    a("--hf-overrides", type=_json_dict, default=None)
    a("--pooler-config", type=_json_dict, default=None)
    a("--generation-config", type=str, default="auto")
    a("--override-generation-config", type=_json_dict, default=None)
    a("--enable-sleep-mode", action=BOOL, default=False)
    a("--model-impl", type=str, default="auto")
    a("--override-attention-dtype", type=str, default=None)
    a("--logits-processors", type=str, nargs="+", default=None)
    a("--io-processor-plugin", type=str, default=None)
    # Load (vllm/config/load.py)
    a("--load-format", type=str, default="auto")
    a("--download-dir", type=str, default=None)
    a("--safetensors-load-strategy", choices=["lazy", "eager", "prefetch", "torchao"], default=None)
    a("--model-loader-extra-config", type=_json_dict, default=None)
    a("--ignore-patterns", type=str, nargs="+", default=None)
    a("--use-tqdm-on-load", action=BOOL, default=True)
    a("--pt-load-map-location", type=str, default="cpu")
    # Parallel (vllm/config/parallel.py, §5.2)
    a("--distributed-executor-backend", choices=["ray", "mp", "uni", "external_launcher"], default=None)
    a("--pipeline-parallel-size", "-pp", type=int, default=1)
    a("--master-addr", type=str, default="127.0.0.1")
    a("--master-port", type=int, default=29501)
    a("--nnodes", "-n", type=int, default=1)
    a("--node-rank", "-r", type=int, default=0)
    a("--tensor-parallel-size", "-tp", type=int, default=1)
    a("--decode-context-parallel-size", "-dcp", type=int, default=1)
    a("--prefill-context-parallel-size", "-pcp", type=int, default=1)
    a("--dcp-kv-cache-interleave-size", type=int, default=1)
    a("--cp-kv-cache-interleave-size", type=int, default=1)
    a("--data-parallel-size", "-dp", type=int, default=1)
    a("--data-parallel-rank", "-dpn", type=int, default=None)
    a("--data-parallel-start-rank", "-dpr", type=int, default=None)
    a("--data-parallel-size-local", "-dpl", type=int, default=None)
    a("--data-parallel-address", "-dpa", type=str, default=None)
    a("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    a("--data-parallel-backend", "-dpb", choices=["mp", "ray"], default="mp")
    a("--data-parallel-hybrid-lb", "-dph", action=BOOL, default=False)
    a("--data-parallel-external-lb", "-dpe", action=BOOL, default=False)
    a("--enable-expert-parallel", action=BOOL, default=False)
    a("--all2all-backend", type=str, default=None)
    a("--enable-dbo", action=BOOL, default=False)
    a("--enable-eplb", action=BOOL, default=False)
    a("--eplb-config", type=_json_dict, default=None)
    a("--expert-placement-strategy", choices=["linear", "round_robin"], default="linear")
    a("--max-parallel-loading-workers", type=int, default=None)
    a("--ray-workers-use-nsight", action=BOOL, default=False)
    a("--disable-custom-all-reduce", action=BOOL, default=False)
    a("--worker-cls", type=str, default="auto")
    a("--worker-extension-cls", type=str, default="")
    # Cache (vllm/config/cache.py)
    a("--block-size", type=int, default=None)
    a("--gpu-memory-utilization", type=float, default=0.9)
    a("--kv-cache-memory-bytes", type=human_readable_int, default=None)
    a("--swap-space", type=float, default=4)
    a("--kv-cache-dtype", choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "int8"],
      default="auto")
    a("--num-gpu-blocks-override", type=int, default=None)
    a("--enable-prefix-caching", action=BOOL, default=None)
    a("--prefix-caching-hash-algo", choices=["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"], default="sha256")
    a("--cpu-offload-gb", type=float, default=0)
    a("--calculate-kv-scales", action=BOOL, default=False)
    a("--kv-sharing-fast-prefill", action=BOOL, default=False)
    a("--mamba-cache-dtype", type=str, default="auto")
    a("--mamba-ssm-cache-dtype", type=str, default="auto")
    a("--mamba-cache-mode", choices=["none", "all", "align"], default="none")
    a("--mamba-block-size", type=int, default=None)
    # Multimodal (vllm/config/multimodal.py, §8)
    a("--limit-mm-per-prompt", type=_json_dict, default=None)
    a("--language-model-only", action=BOOL, default=False)
    a("--media-io-kwargs", type=_json_dict, default=None)
    a("--mm-processor-kwargs", type=_json_dict, default=None)
    a("--mm-processor-cache-gb", type=float, default=4)
    a("--mm-processor-cache-type", choices=["lru", "shm"], default="lru")
    a("--mm-encoder-tp-mode", choices=["weights", "data"], default="weights")
    a("--mm-encoder-attn-backend", type=str, default=None)
    a("--interleave-mm-strings", action=BOOL, default=False)
    a("--skip-mm-profiling", action=BOOL, default=False)
    a("--video-pruning-rate", type=float, default=None)
    # Scheduler (vllm/config/scheduler.py)
    a("--max-num-batched-tokens", type=human_readable_int, default=None)
    a("--max-num-seqs", type=int, default=None)
    a("--max-num-partial-prefills", type=int, default=1)
    a("--max-long-partial-prefills", type=int, default=1)
    a("--long-prefill-token-threshold", type=int, default=0)
    a("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs")
    a("--enable-chunked-prefill", action=BOOL, default=None)
    a("--disable-chunked-mm-input", action=BOOL, default=False)
    a("--scheduler-cls", type=str, default=None)
    a("--disable-hybrid-kv-cache-manager", action=BOOL, default=False)
    a("--async-scheduling", action=BOOL, default=None)
    a("--stream-interval", type=int, default=1)
    # Structured configs parsed as dataclasses (§7, §9)
    a("--speculative-config", type=_json_dict, default=None)
    a("--kv-transfer-config", type=_dataclass(configs.KVTransferConfig), default=None)
    a("--kv-events-config", type=_json_dict, default=None)
    a("--compilation-config", "-cc", type=_compilation, default=None)
    a("--attention-config", "-ac", type=_dataclass(configs.AttentionConfig), default=None)
    a("--profiler-config", type=_dataclass(configs.ProfilerConfig), default=None)
    a("--structured-outputs-config", type=_json_dict, default=None)
    a("--additional-config", type=_json_dict, default=None)
    a("--optimization-level", "-O", type=int, default=2)
    a("--cuda-graph-sizes", type=int, nargs="+", default=None)
    a("--max-cudagraph-capture-size", type=int, default=None)
    a("--show-hidden-metrics-for-version", type=str, default=None)
    a("--otlp-traces-endpoint", type=str, default=None)
    a("--collect-detailed-traces", type=str, default=None)
    a("--enable-lora", action=BOOL, default=None)
    a("--max-loras", type=int, default=1)
    a("--max-lora-rank", type=int, default=16)
    a("--device", type=str, default="auto")
    return top


def _nested(keys: list[str], value: Any) -> dict:
    out: Any = value
    for key in reversed(keys):
        out = {key: out}
    return out


def _merge(dst: dict, src: dict, prefix: str = "") -> set[str]:
    dups: set[str] = set()
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            dups |= _merge(dst[key], value, f"{prefix}{key}.")
        else:
            if key in dst:
                dups.add(prefix + key)
            dst[key] = value
    return dups


def _dashes(flag: str) -> str:
    return _FLAG_HEAD.sub(lambda m: m.group(0).replace("_", "-"), flag, count=1)


def _spell(arg: str) -> list[str]:
    """One argument as FlexibleArgumentParser rewrites it: dashes in flag names, ``-O3`` split."""
    if arg.startswith("--"):
        if "=" in arg:
            key, value = arg.split("=", 1)
            return [f"{_dashes(key)}={value}"]
        return [_dashes(arg)]
    if arg.startswith("-O") and arg != "-O" and len(arg) > 2 and arg[2] != ".":
        return ["-O", arg[2:]]
    return [arg]


def _model_to_positional(out: list[str]) -> None:
    """``--model X`` after ``serve`` becomes the positional model_tag."""
    if not (out and out[0] == "serve" and "--model" in out and (len(out) < 2 or out[1].startswith("-"))):
        return
    i = out.index("--model")
    if i + 1 < len(out):
        model = out[i + 1]
        del out[i:i + 2]
        out.insert(1, model)
        log.warning("argparse_utils.py:269", "With `vllm serve`, you should provide the model as a positional "
                    "argument or in a config file instead of via the `--model` option. The `--model` option "
                    "will be removed in a future version.")


def _dotted(out: list[str], i: int) -> tuple[str, str, bool] | None:
    """(flag, value text, value is the next argument) of a dotted dict argument at ``out[i]``, else None."""
    arg = out[i]
    if not arg.startswith("--") or "." not in arg:
        return None
    if "=" in arg:
        flag, value_str = arg.split("=", 1)
        return (flag, value_str, False) if "." in flag else None
    if i + 1 >= len(out):
        return None
    return arg, out[i + 1], True


def _dict_value(value_str: str) -> Any:
    """JSON, else a human-readable int, else the text itself."""
    try:
        return json.loads(value_str)
    except json.JSONDecodeError:
        try:
            return human_readable_int(value_str)
        except ValueError:
            return value_str


def _collect_dotted(out: list[str]) -> list[str]:
    """Dotted dict args: ``--a.b v`` / ``--a.b=v`` / ``--a.b+ x,y`` collect into ``--a '{"b": v}'``."""
    dict_args: dict[str, dict] = defaultdict(dict)
    drop: set[int] = set()
    dups: set[str] = set()
    for i in range(len(out)):
        found = None if i in drop else _dotted(out, i)
        if found is None:
            continue
        flag, value_str, takes_next = found
        if takes_next:
            drop.add(i + 1)
        if flag.endswith("+"):
            flag = flag[:-1]
            value_str = json.dumps(value_str.split(","))
        key, *keys = flag.split(".")
        dups |= {f"{key}.{d}" for d in _merge(dict_args[key], _nested(keys, _dict_value(value_str)))}
        drop.add(i)
    if dups:
        log.warning("argparse_utils.py:322", "Found duplicate keys %s", ", ".join(sorted(dups)))
    out = [a for i, a in enumerate(out) if i not in drop]
    for key, value in dict_args.items():
        out.extend([key, json.dumps(value)])
    return out


def normalise(argv: list[str]) -> list[str]:
    """FlexibleArgumentParser.parse_args's rewriting of ``argv`` (before argparse sees it)."""
    out = [part for arg in argv for part in _spell(arg)]
    _model_to_positional(out)
    return _collect_dotted(out)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(normalise(argv))
    if args.version:
        from k3sim.vllm import VLLM_VERSION
        print(VLLM_VERSION)
        sys.exit(0)
    if args.subparser != "serve":
        parser.print_help()
        sys.exit(1 if args.subparser is None else 0)
    return args


def non_default(args: argparse.Namespace) -> dict[str, Any]:
    """What vLLM logs as ``non-default args: {...}``."""
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    defaults = {a.dest: a.default for a in serve._actions}
    out = {}
    for key, value in vars(args).items():
        if key in ("subparser", "version", "dispatch_function"):
            continue
        if key in defaults and defaults[key] != value:
            out[key] = value
    return out
