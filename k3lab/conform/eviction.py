"""Pool hits without a development endpoint: push a prefix out of a producer's local prefix cache.

Real vLLM serves ``/reset_prefix_cache`` only with ``VLLM_SERVER_DEV_MODE=1``, which production
deployments (and the guides) do not set. What a production deployment does allow is traffic: the
engine's block pool hands out free blocks least recently used first, evicting their cached hashes, so
once new, distinct prompts have filled at least the whole KV cache, no block of an earlier prompt is
left on that engine. Repeated then, the earlier prompt can only be an *external* hit, from the
MemCache pool (``vllm:external_prefix_cache_hits_total``), and a local hit
(``vllm:prefix_cache_hits_total``) proves the eviction fell short.

Sizes come from the real interfaces:

* the local cache: ``vllm:cache_config_info`` labels ``num_gpu_blocks`` x ``block_size`` (and
  ``kv_cache_size_tokens`` where the server reports it, vLLM #42206; hybrid-KV models report the
  scheduler's smallest block size there, vLLM #51163, so the larger of the two is used);
* the pool: the MetaService's ``memcache_total_capacity_bytes`` and ``memcache_allocated_bytes``
  (MemCache 1.1+; 1.0.x has no capacity metrics), and the bytes the pool grew by per prompt token of
  the first prompt. The filler's bytes must fit below the default ``evict_threshold_high`` (90 %),
  or the pool would evict the very prefix the check looks for.

Cost on a real lab: ``tokens = ceil(local_tokens x (1 + MARGIN))`` prompt tokens, sent one request
at a time in documents of ``min(CHUNK_TOKENS, max_model_len / 2)`` tokens, with ``max_tokens=1``;
time ~ ``tokens / prefill rate`` (the check records tokens, requests, seconds and the observed rate
as JUnit properties). Example: a Prefill engine reporting ``num_gpu_blocks=16384, block_size=128``
(2,097,152 tokens) costs 2,202,010 tokens; at a stated prefill rate of 20,000 tokens/s that is
about 110 s, in 68 requests. With dev mode the reset costs one request instead (used when present).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

MARGIN = 0.05  # above the advertised size: the null block, the request's partial blocks, rounding
CHUNK_TOKENS = 32768  # one filler document; long enough to keep a real Prefill's batches full
POOL_HIGH_WATERMARK = 0.90  # MemCache's default ock.mmc.evict_threshold_high (90 %)
STATED_PREFILL_RATE = 20_000.0  # tokens/s, the rate the docstring's lab estimate is stated at
SLOWEST_RATE = 2_000.0  # tokens/s: below this the fill gives up (its deadline), naming how far it got


def deadline_s(tokens: int) -> float:
    return 120.0 + tokens / SLOWEST_RATE


class Unreadable(ValueError):
    """A metric is missing or carries a value outside its domain (never counted as a size)."""


@dataclass(frozen=True)
class LocalCache:
    """One engine's local prefix cache as ``vllm:cache_config_info`` advertises it."""

    engine: str
    block_size: int
    num_gpu_blocks: int
    size_tokens: int | None  # kv_cache_size_tokens, when the server reports it

    @property
    def tokens(self) -> int:
        return max(self.block_size * self.num_gpu_blocks, self.size_tokens or 0)

    def fill_tokens(self) -> int:
        """Prompt tokens of new, distinct documents that leave no earlier block cached."""
        return math.ceil(self.tokens * (1 + MARGIN))


def _positive_int(labels: dict[str, str], name: str, optional: bool = False) -> int | None:
    raw = labels.get(name)
    if raw is None or (optional and raw in ("None", "")):
        if optional:
            return None
        raise Unreadable(f"vllm:cache_config_info has no {name} label")
    try:
        value = float(raw)
    except ValueError:
        raise Unreadable(f"vllm:cache_config_info {name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value != int(value):
        raise Unreadable(f"vllm:cache_config_info {name}={raw!r} is not a positive integer")
    return int(value)


def local_caches(text: str) -> list[LocalCache]:
    """Every engine's local cache from one API's ``/metrics`` (older servers: no ``engine`` label)."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name != "vllm:cache_config_info":
                continue
            blocks = _positive_int(s.labels, "num_gpu_blocks")
            size = _positive_int(s.labels, "block_size")
            assert blocks is not None and size is not None
            out.append(LocalCache(s.labels.get("engine", ""), size, blocks,
                                  _positive_int(s.labels, "kv_cache_size_tokens", optional=True)))
    if not out:
        raise Unreadable("no vllm:cache_config_info sample (engines started with --disable-log-stats?)")
    return out


@dataclass(frozen=True)
class PoolRoom:
    """The MetaService's capacity over all media (MemCache 1.1+ ``/metrics``)."""

    total: float
    allocated: float
    evictions: float

    def fits(self, more_bytes: float) -> bool:
        return self.allocated + more_bytes <= POOL_HIGH_WATERMARK * self.total


def _nonnegative(value: float, name: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise Unreadable(f"{name} is {value!r}, not a finite count")
    return value


def pool_room(text: str) -> PoolRoom | None:
    """None when the MetaService serves no capacity metrics (MemCache 1.0.x)."""
    sums: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in ("memcache_total_capacity_bytes", "memcache_allocated_bytes",
                          "memcache_evict_operations_total"):
                sums[s.name] = sums.get(s.name, 0.0) + _nonnegative(s.value, s.name)
    if "memcache_total_capacity_bytes" not in sums or "memcache_allocated_bytes" not in sums:
        return None
    return PoolRoom(sums["memcache_total_capacity_bytes"], sums["memcache_allocated_bytes"],
                    sums.get("memcache_evict_operations_total", 0.0))


@dataclass(frozen=True)
class Fill:
    """What pushing the local cache out cost."""

    tokens: int
    requests: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def properties(self, local: LocalCache) -> dict[str, str]:
        """JUnit properties: the cost here and the same volume at the stated lab prefill rate."""
        return {"eviction.local_cache_tokens": str(local.tokens), "eviction.tokens_sent": str(self.tokens),
                "eviction.requests": str(self.requests), "eviction.seconds": f"{self.seconds:.2f}",
                "eviction.observed_rate_tokens_per_s": f"{self.rate:.0f}",
                "eviction.seconds_at_stated_rate": f"{self.tokens / STATED_PREFILL_RATE:.1f}",
                "eviction.stated_rate_tokens_per_s": f"{STATED_PREFILL_RATE:.0f}"}


def filler(tag: str, index: int, words: int) -> str:
    """A new document: its first token differs from every other prompt's, so no block is shared."""
    return f"[{tag} {index}] " + " ".join(f"fill{index} w{i % 997}" for i in range(words))


def fill(send: Callable[[str], int], target_tokens: int, chunk_tokens: int, tag: str,
         deadline_s: float) -> Fill:
    """Send filler documents until ``target_tokens`` prompt tokens were prefilled.

    ``send(prompt)`` returns the prompt tokens the server counted (``usage.prompt_tokens``). The first
    document calibrates words per token from a short one, so none exceeds ``chunk_tokens`` by much."""
    if target_tokens <= 0 or chunk_tokens <= 0:
        raise ValueError("target_tokens and chunk_tokens must be positive")
    start = time.monotonic()
    sent = requests = 0
    words, per_word = max(1, chunk_tokens // 8), 0.0
    while sent < target_tokens:
        if time.monotonic() - start > deadline_s:
            raise TimeoutError(f"sent {sent} of {target_tokens} tokens in {deadline_s:.0f} s")
        counted = send(filler(tag, requests, words))
        if counted <= 0:
            raise Unreadable(f"usage.prompt_tokens {counted} for a filler of {words} words")
        sent += counted
        requests += 1
        per_word = counted / words
        left = min(chunk_tokens, target_tokens - sent + 1)
        words = max(1, int(left / per_word))
    return Fill(sent, requests, time.monotonic() - start)
