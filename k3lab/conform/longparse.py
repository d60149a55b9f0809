"""Long requests (K3.1 Pro guide §5.2.2): the workload, the reply parser, HBM usage, and the gate.

Pure functions, tested offline on real reply and ``npu-smi info`` formats; the check that sends
the requests is :mod:`k3lab.conform.longreq`.

The guide: "validate long requests through the Proxy. Total input and output tokens must remain
within the configured limit. Record the actual lengths, concurrency, memory usage, and request
completion status."
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from k3lab.conform import toolparse

DEFAULT_OUTPUT = 16
FINISHED = ("length", "stop")



@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    limit: int  # the engines' max_model_len: prompt + output must stay within it

    def describe(self) -> str:
        return (f"{self.concurrency} concurrent request(s) of {self.prompt_tokens:,} prompt + "
                f"{self.output_tokens} output tokens (limit {self.limit:,})")


def workload(limit: int, prompt_tokens: int | None = None, output_tokens: int | None = None,
             concurrency: int = 1) -> Workload:
    """Defaults: the longest request the limit allows (prompt = limit - output). Values that could
    never pass are an input error, raised before anything is sent."""
    output = DEFAULT_OUTPUT if output_tokens is None else output_tokens
    prompt = limit - output if prompt_tokens is None else prompt_tokens
    if output < 1 or prompt < 1 or concurrency < 1:
        raise ValueError(f"long requests need positive sizes: prompt {prompt}, output {output}, "
                         f"concurrency {concurrency}")
    if prompt + output > limit:
        raise ValueError(f"prompt {prompt:,} + output {output:,} tokens exceed the configured limit "
                         f"{limit:,} (max_model_len): the guide keeps long requests within it")
    return Workload(prompt, output, concurrency, limit)


def prompt_ids(n: int, request: int, nonce: int) -> list[int]:
    """``n`` token ids, distinct per request and run (no prefix-cache hit shortens a prefill); ids stay
    in the low vocabulary every Kimi tokenizer has, so no tokenizer is needed to know the length."""
    head = [1000 + nonce % 20000, 1000 + request % 20000]
    return (head + [1000 + (7 * i + request) % 20000 for i in range(max(0, n - 2))])[:n]


@dataclass
class Outcome:
    request: int
    status: int | None
    seconds: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_reply(request: int, status: int | None, seconds: float, body: str) -> Outcome:
    """One ``/v1/completions`` reply: the usage and finish reason vLLM reports, or what went wrong."""
    out = Outcome(request, status, round(seconds, 3))
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        out.error = f"not JSON: {body[:200]!r}"
        return out
    if status != 200:
        err = doc.get("error") if isinstance(doc, dict) else None
        msg = err.get("message") if isinstance(err, dict) else (doc.get("message") if isinstance(doc, dict) else None)
        out.error = str(msg or body[:200])
        return out
    usage = doc.get("usage") or {}
    choices = doc.get("choices") or [{}]
    out.prompt_tokens = usage.get("prompt_tokens")
    out.completion_tokens = usage.get("completion_tokens")
    out.finish_reason = choices[0].get("finish_reason")
    if out.prompt_tokens is None or out.completion_tokens is None:
        out.error = "no usage in the reply"
    return out


def failures(outcomes: list[Outcome], load: Workload) -> list[str]:
    """What the guide's verification would call a failed long request, one line each."""
    bad = []
    for o in outcomes:
        name = f"request {o.request}"
        if o.status != 200 or o.error:
            bad.append(f"{name}: HTTP {o.status}: {o.error}")
            continue
        prompt, completion = o.prompt_tokens or 0, o.completion_tokens or 0
        if prompt != load.prompt_tokens:
            bad.append(f"{name}: the engine counted {prompt:,} prompt tokens, {load.prompt_tokens:,} were sent")
        if prompt + completion > load.limit:
            bad.append(f"{name}: {prompt:,} + {completion:,} tokens exceed the configured limit {load.limit:,}")
        if completion < 1 or o.finish_reason not in FINISHED:
            bad.append(f"{name}: {completion} output token(s), finish_reason {o.finish_reason!r}")
    return bad


def hbm_usage(npu_smi_info: str) -> list[tuple[int, int]]:
    """(used, total) HBM in MB per chip, in the order ``npu-smi info`` lists them (every table
    layout of the corpus: 98 and 116 columns, Bus-Id NA, ``61609/ 65536``)."""
    return toolparse.hbm_usage(npu_smi_info)
