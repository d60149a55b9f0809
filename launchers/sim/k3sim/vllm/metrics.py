"""``/metrics``: vLLM's engine series with labels ``model_name`` and ``engine`` (vllm-upstream.md §1).

One child per engine the server manages (§1.6), created at start so counters read 0. With
``--disable-log-stats`` no ``vllm:*`` series exist (§1.1). Internal-LB DP runs several API
servers in multiprocess mode, where ``_created`` samples and process metrics are absent.

``vllm:cache_config_info`` is ``PrometheusStatLogger.log_metrics_info("cache_config", ...)``: a gauge
set to 1 whose labels are ``CacheConfig.metrics_info()`` (every field as a string) plus ``engine``,
one sample per engine. Its ``num_gpu_blocks`` and ``block_size`` are the local prefix cache's real
size here: the engines' LRU cache holds exactly that many blocks (``K3SIM_NUM_GPU_BLOCKS``).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from k3sim.vllm.log import Logger

_BUCKETS_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_BUCKETS_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                480.0, 960.0, 1920.0, 7680.0)
_BUCKETS_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)


@dataclass
class EngineStats:
    """What the periodic ``loggers.py`` line reports for one engine."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    running: int = 0
    waiting: int = 0
    blocks_in_use: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=1000))  # (queries, hits) per request
    recent_ext: deque = field(default_factory=lambda: deque(maxlen=1000))
    last_prompt_tp: float = 0.0
    last_gen_tp: float = 0.0


class Metrics:
    def __init__(self, model_name: str, ranks: list[int], *, log_stats: bool, connector: bool,
                 multiprocess: bool, capacity_blocks: int, cache_config: dict[str, str] | None = None) -> None:
        import prometheus_client as pc

        if multiprocess:
            pc.disable_created_metrics()
            self.registry = pc.CollectorRegistry()
        else:
            self.registry = pc.REGISTRY
        self.pc = pc
        self.model_name = model_name
        self.ranks = ranks
        self.log_stats = log_stats
        self.connector = connector
        self.capacity = capacity_blocks
        self.stats = {r: EngineStats() for r in ranks}
        self._lock = threading.Lock()
        if not log_stats:
            return
        labels = ["model_name", "engine"]
        reg = self.registry
        self.running = pc.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                                labels, registry=reg)
        self.waiting = pc.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                labels, registry=reg)
        self.kv_usage = pc.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                                 labels, registry=reg)
        self.prefix_q = pc.Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
                                   "queried tokens.", labels, registry=reg)
        self.prefix_h = pc.Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
                                   "tokens.", labels, registry=reg)
        self.ext_q = pc.Counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV "
                                "connector cross-instance cache sharing, in terms of number of queried tokens.",
                                labels, registry=reg)
        self.ext_h = pc.Counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector "
                                "cross-instance cache sharing, in terms of number of cached tokens.", labels,
                                registry=reg)
        self.preempt = pc.Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                  labels, registry=reg)
        self.prompt = pc.Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg)
        self.gen = pc.Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels,
                              registry=reg)
        self.success = pc.Counter("vllm:request_success", "Count of successfully processed requests.",
                                  labels + ["finished_reason"], registry=reg)
        self.ttft = pc.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                 labels, buckets=_BUCKETS_TTFT, registry=reg)
        self.itl = pc.Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                labels, buckets=_BUCKETS_ITL, registry=reg)
        self.e2e = pc.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                                labels, buckets=_BUCKETS_E2E, registry=reg)
        self.prompt_len = pc.Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels,
                                       buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000,
                                                50000, 100000, 200000, 500000, 1000000), registry=reg)
        if cache_config is not None:
            info = pc.Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                            [*cache_config, "engine"], registry=reg, multiprocess_mode="mostrecent")
            for r in ranks:
                info.labels(**cache_config, engine=str(r)).set(1)
        for r in ranks:
            lv = (model_name, str(r))
            for metric in (self.running, self.waiting, self.kv_usage, self.prefix_q, self.prefix_h, self.ext_q,
                           self.ext_h, self.preempt, self.prompt, self.gen, self.ttft, self.itl, self.e2e,
                           self.prompt_len):
                metric.labels(*lv)
            for reason in ("stop", "length", "abort", "error"):
                self.success.labels(model_name, str(r), reason)

    def _lv(self, rank: int) -> tuple[str, str]:
        return self.model_name, str(rank)

    def started(self, rank: int, blocks: int) -> None:
        with self._lock:
            st = self.stats[rank]
            st.running += 1
            st.blocks_in_use += blocks
            if self.log_stats:
                self.running.labels(*self._lv(rank)).set(st.running)
                self.kv_usage.labels(*self._lv(rank)).set(min(1.0, st.blocks_in_use / max(1, self.capacity)))

    def scheduled(self, rank: int, stats: dict, prompt_tokens: int) -> None:
        """Scheduler stats of one newly admitted request."""
        with self._lock:
            st = self.stats[rank]
            st.prompt_tokens += prompt_tokens
            if stats.get("queries"):
                st.recent.append((stats["queries"], stats["hits"]))
            if self.connector and stats.get("ext_queries") is not None:
                st.recent_ext.append((stats["ext_queries"], stats["ext_hits"]))
        if not self.log_stats:
            return
        lv = self._lv(rank)
        self.prefix_q.labels(*lv).inc(stats.get("queries", 0))
        self.prefix_h.labels(*lv).inc(stats.get("hits", 0))
        if self.connector:
            self.ext_q.labels(*lv).inc(stats.get("ext_queries", 0))
            self.ext_h.labels(*lv).inc(stats.get("ext_hits", 0))
        self.prompt.labels(*lv).inc(prompt_tokens)
        self.prompt_len.labels(*lv).observe(prompt_tokens)

    def finished(self, rank: int, blocks: int, generated: int, reason: str | None, ttft: float | None,
                 e2e: float, itls: list[float]) -> None:
        with self._lock:
            st = self.stats[rank]
            st.running -= 1
            st.blocks_in_use -= blocks
            st.generation_tokens += generated
            running, used = st.running, st.blocks_in_use
        if not self.log_stats:
            return
        lv = self._lv(rank)
        self.running.labels(*lv).set(running)
        self.kv_usage.labels(*lv).set(min(1.0, used / max(1, self.capacity)))
        self.gen.labels(*lv).inc(generated)
        if reason is not None:
            self.success.labels(*lv, reason).inc()
            self.e2e.labels(*lv).observe(e2e)
        if ttft is not None:
            self.ttft.labels(*lv).observe(ttft)
        for gap in itls:
            self.itl.labels(*lv).observe(gap)

    def exposition(self) -> tuple[bytes, str]:
        # The reference's servers answer the 0.0.4 text format (newer clients default to 1.0.0).
        ctype = getattr(self.pc.exposition, "CONTENT_TYPE_PLAIN_0_0_4", self.pc.CONTENT_TYPE_LATEST)
        return self.pc.generate_latest(self.registry), ctype

    def _line(self, r: int, st: EngineStats, ptp: float, gtp: float) -> str:
        line = (f"Engine {r:03d}: Avg prompt throughput: {ptp:.1f} tokens/s, Avg generation throughput: "
                f"{gtp:.1f} tokens/s, Running: {st.running} reqs, Waiting: {st.waiting} reqs, GPU KV cache "
                f"usage: {100 * st.blocks_in_use / max(1, self.capacity):.1f}%, Prefix cache hit rate: "
                f"{_hit_rate(st.recent):.1f}%")
        if self.connector and st.recent_ext:
            line += f", External prefix cache hit rate: {_hit_rate(st.recent_ext):.1f}%"
        return line

    def log_loop(self, log: Logger, interval: float, stop: threading.Event) -> None:
        """``loggers.py``'s periodic line, INFO while there is throughput (DEBUG when idle)."""
        last = time.monotonic()
        prev = {r: (0, 0) for r in self.ranks}
        while not stop.wait(interval):
            now = time.monotonic()
            span = max(1e-6, now - last)
            last = now
            for r in self.ranks:
                st = self.stats[r]
                p0, g0 = prev[r]
                prev[r] = (st.prompt_tokens, st.generation_tokens)
                ptp, gtp = (st.prompt_tokens - p0) / span, (st.generation_tokens - g0) / span
                active = ptp or gtp or st.last_prompt_tp or st.last_gen_tp or st.running
                (log.info if active else log.debug)("loggers.py:127", "%s", self._line(r, st, ptp, gtp))
                st.last_prompt_tp, st.last_gen_tp = ptp, gtp


def _hit_rate(recent: deque) -> float:
    """Percent of the (queries, hits) pairs' queries that hit; 0 without queries."""
    q = sum(x for x, _ in recent)
    h = sum(y for _, y in recent)
    return 100 * h / q if q else 0
