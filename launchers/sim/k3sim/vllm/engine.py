"""One DP engine (EngineCore): prefix cache, KV connectors and the simulated model.

Requests arrive already tokenized (the front-end tokenizes, as in vLLM) and leave as output
token texts plus the per-request scheduler stats the front-end turns into metrics:
``queries``/``hits`` for the local cache and, with a connector, ``external`` queries (prompt
tokens minus local hits, PR #30522) and hits (tokens loaded by the connector).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from k3sim import hw
from k3sim.vllm import cache
from k3sim.vllm.kv import MooncakeSide, PoolClient
from k3sim.vllm.kvconfig import KVConfig
from k3sim.vllm.log import Logger, fatal_exit
from k3sim.vllm.output import model


def hash_seed() -> str | None:
    """PYTHONHASHSEED as the engine sees it; the ``hash_seed`` fault simulates a different one."""
    fault = hw.faults("engine").get("hash_seed")
    return str(fault) if fault is not None else os.environ.get("PYTHONHASHSEED")


def out_of_memory_on(prompt_tokens: int, log: Logger) -> None:
    """The ``oom_prompt_tokens`` fault: a prompt longer than that exhausts HBM in the forward pass, and
    the engine dies the way torch_npu reports it (the message format of vllm-ascend issue #19)."""
    limit = hw.faults("engine").get("oom_prompt_tokens")
    if limit is None or prompt_tokens <= int(limit):
        return
    need = max(0.02, prompt_tokens / 2**19)  # GiB: illustrative, it grows with the prompt
    fatal_exit(log, ["EngineCore encountered a fatal error.",
                     f"RuntimeError: NPU out of memory. Tried to allocate {need:.2f} GiB (NPU 0; 60.96 GiB total "
                     "capacity; 58.92 GiB already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB "
                     "reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
                     "max_split_size_mb to avoid fragmentation."])


def wait_while_hung(stop: threading.Event | None = None) -> None:
    while hw.faults("engine").get("hang") and not (stop and stop.is_set()):
        time.sleep(0.2)


class Engine:
    def __init__(self, *, dp_rank: int, block_size: int, num_gpu_blocks: int, prefix_caching: bool, kv: KVConfig | None,
                 mooncake: MooncakeSide | None, pool: PoolClient | None, log: Logger) -> None:
        self.dp_rank = dp_rank
        self.block_size = block_size
        self.kv = kv
        self.mooncake = mooncake
        self.pool = pool
        self.log = log
        self.capacity = num_gpu_blocks
        self.cache = cache.PrefixCache(self.capacity, prefix_caching)
        seed = hash_seed()
        self.seed = cache.none_hash(seed)

    def reset_prefix_cache(self) -> bool:
        self.cache.reset()
        return True

    def _external(self, rid: str, params: dict[str, Any], n: int, hashes: list, limit: int, local_blocks: int,
                  stats: dict[str, int]) -> tuple[int, str | None]:
        """(tokens loaded from outside, failure cause if the request fails): a Mooncake pull or the KV pool."""
        mc = self.mooncake
        if mc is not None and mc.conn.is_consumer and params.get("do_remote_prefill"):
            ok, reason = mc.pull(rid, params, n)
            if ok:
                # vllm-ascend's Mooncake connector reports the whole prompt as external on every
                # pull (do_remote_prefill), whatever the local cache holds or the prefix repeats
                stats["ext_queries"] = n
                return n, None
            return 0, reason if mc.conn.load_failure_policy == "fail" else None
        if self.pool is not None and self.pool.load_enabled:
            return self._from_pool(rid, n, hashes, limit, local_blocks)
        return 0, None

    def _from_pool(self, rid: str, n: int, hashes: list, limit: int, local_blocks: int) -> tuple[int, str | None]:
        assert self.pool is not None
        bs = self.block_size
        pool_blocks = self.pool.lookup(hashes, limit)
        self.log.debug("pool_scheduler.py:131", "Reqid: %s, Total tokens %d, kvpool hit tokens: %d, need to "
                       "load: %d", rid, n, pool_blocks * bs, max(0, pool_blocks - local_blocks) * bs)
        if pool_blocks <= local_blocks:
            return 0, None
        if self.pool.load(hashes[local_blocks:pool_blocks]):
            return (pool_blocks - local_blocks) * bs, None
        return 0, "KV pool load failed" if self.pool.conn.load_failure_policy == "fail" else None

    def process(self, req: dict[str, Any]) -> dict[str, Any]:
        wait_while_hung()
        rid = req["request_id"]
        ids: list[int] = req["prompt_token_ids"]
        n = len(ids)
        out_of_memory_on(n, self.log)
        bs = self.block_size
        hashes = cache.block_hashes(ids, bs, self.seed, [tuple(m) for m in req.get("mm", [])])
        limit = cache.max_hit_blocks(n, bs)
        local_blocks = self.cache.lookup(hashes, limit)
        local = local_blocks * bs if self.cache.enabled else 0
        stats = {"queries": n if self.cache.enabled else 0, "hits": local, "ext_queries": 0, "ext_hits": 0}
        params = req.get("kv_transfer_params") or {}
        external = 0
        if self.kv is not None:
            stats["ext_queries"] = n - local
            external, cause = self._external(rid, params, n, hashes, limit, local_blocks, stats)
            if cause is not None:
                return {"error": {"status": 500, "message": "Internal server error", "cause": cause},
                        "stats": stats, "num_prompt_tokens": n}
            stats["ext_hits"] = external
        # The prompt is now computed on this engine: its full blocks become cacheable.
        self.cache.insert(hashes)
        if self.pool is not None:
            self.pool.save(hashes)
        sp = req["sampling"]
        tokens, finish = model.output_tokens(req["render"], req["variant"], sp["max_tokens"], sp["min_tokens"],
                                             sp["ignore_eos"])
        out_params = None
        mc = self.mooncake
        if mc is not None and mc.conn.is_producer and params.get("do_remote_decode") and finish == "length":
            out_params = mc.producer_params(rid, n, hashes, cache.token_id(tokens[-1]) if tokens else 0)
        return {"tokens": tokens, "finish_reason": finish, "num_prompt_tokens": n,
                "num_cached_tokens": local + external, "stats": stats, "kv_transfer_params": out_params,
                "error": None}
