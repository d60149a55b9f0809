"""The no-dev-mode external-cache method's readers and fill (k3lab.conform.eviction)."""
from __future__ import annotations

import math

import pytest

from k3lab.conform import eviction

# Real vLLM output pasted in the AIBrix runtime docs (vllm-project/aibrix, docs/source/features/runtime.rst):
# an older server, no engine label, no kv_cache_size_tokens.
AIBRIX = ('# TYPE vllm:cache_config_info gauge\n'
          'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",'
          'enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="9362",'
          'num_gpu_blocks="81767",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0\n')


def _info(**labels: str) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{body}}} 1.0\n"


def test_real_sample_gives_the_local_cache_size():
    [c] = eviction.local_caches(AIBRIX)
    assert (c.engine, c.block_size, c.num_gpu_blocks, c.size_tokens, c.tokens) == ("", 16, 81767, None, 1308272)
    assert c.fill_tokens() == math.ceil(1308272 * 1.05)


def test_hybrid_models_report_the_smallest_block_size_so_the_larger_size_counts():
    # vLLM #51163: block_size is the scheduler's smallest group block; kv_cache_size_tokens is the capacity
    [c] = eviction.local_caches(_info(block_size="4", num_gpu_blocks="1000", kv_cache_size_tokens="256000", engine="0"))
    assert c.tokens == 256000
    [c] = eviction.local_caches(_info(block_size="128", num_gpu_blocks="100", kv_cache_size_tokens="None", engine="1"))
    assert (c.engine, c.tokens) == ("1", 12800)


def test_one_entry_per_engine():
    text = _info(block_size="128", num_gpu_blocks="10", engine="0") + _info(block_size="128", num_gpu_blocks="20",
                                                                            engine="1").split("\n", 1)[1]
    assert [(c.engine, c.num_gpu_blocks) for c in eviction.local_caches(text)] == [("0", 10), ("1", 20)]


@pytest.mark.parametrize("labels, says", [
    ({"block_size": "128"}, "no num_gpu_blocks label"),
    ({"block_size": "128", "num_gpu_blocks": "None"}, "is not a number"),
    ({"block_size": "128", "num_gpu_blocks": "NaN"}, "not a positive integer"),
    ({"block_size": "128", "num_gpu_blocks": "0"}, "not a positive integer"),
    ({"block_size": "12.5", "num_gpu_blocks": "8"}, "not a positive integer"),
    ({"block_size": "128", "num_gpu_blocks": "8", "kv_cache_size_tokens": "inf"}, "not a positive integer"),
])
def test_values_outside_their_domain_are_unreadable(labels, says):
    with pytest.raises(eviction.Unreadable, match=says):
        eviction.local_caches(_info(**labels))


def test_no_info_gauge_is_unreadable():
    with pytest.raises(eviction.Unreadable, match="disable-log-stats"):
        eviction.local_caches('vllm:prefix_cache_hits_total{engine="0",model_name="m"} 3.0\n')


# MemCache 1.1+ MetaService /metrics, in the format of MmcRestApiFacade::BuildPrometheusMetrics
# (reference/ascend-components.md 1.5b): per-medium totals always present.
META = """# HELP memcache_evict_operations_total Total number of eviction operations
# TYPE memcache_evict_operations_total counter
memcache_evict_operations_total 2
# HELP memcache_total_capacity_bytes Total capacity by medium in bytes
# TYPE memcache_total_capacity_bytes gauge
memcache_total_capacity_bytes{medium="hbm"} 0
memcache_total_capacity_bytes{medium="dram"} 8589934592
# HELP memcache_allocated_bytes Allocated bytes by medium
# TYPE memcache_allocated_bytes gauge
memcache_allocated_bytes{medium="hbm"} 0
memcache_allocated_bytes{medium="dram"} 1048576
"""
# MemCache 1.0.x: only these names (no capacity metrics)
META_10 = "memcache_alloc_operations_total 4\nmemcache_stored_keys 4\nmemcache_evict_operations_total 0\n"


def test_pool_room_and_its_watermark():
    room = eviction.pool_room(META)
    assert room == eviction.PoolRoom(8589934592, 1048576, 2)
    assert room.fits(0.9 * 8589934592 - 1048576) and not room.fits(0.9 * 8589934592)


def test_memcache_10_has_no_room_to_read():
    assert eviction.pool_room(META_10) is None


def test_negative_pool_bytes_are_unreadable():
    with pytest.raises(eviction.Unreadable, match="not a finite count"):
        eviction.pool_room(META.replace("1048576", "-1"))


def test_fill_calibrates_to_the_chunk_and_stops_past_the_target():
    sent: list[str] = []

    def send(prompt: str) -> int:
        sent.append(prompt)
        return 3 * (len(prompt.split()) - 2)  # 3 tokens per filler word

    done = eviction.fill(send, 1000, 120, "t", 10)
    assert done.tokens >= 1000 and done.requests == len(sent)
    assert all(3 * (len(p.split()) - 2) <= 120 for p in sent)
    firsts = {p.split()[:2][1] for p in sent}
    assert len(firsts) == len(sent)  # every document starts differently: no block shared
    props = done.properties(eviction.LocalCache("0", 16, 60, None))
    assert props["eviction.tokens_sent"] == str(done.tokens) and props["eviction.local_cache_tokens"] == "960"
    assert props["eviction.seconds_at_stated_rate"] == f"{done.tokens / 20000:.1f}"


def test_fill_refuses_a_server_that_counts_no_tokens():
    with pytest.raises(eviction.Unreadable, match="usage.prompt_tokens 0"):
        eviction.fill(lambda _: 0, 100, 50, "t", 10)


def test_fill_has_a_deadline():
    import time

    def slow(_: str) -> int:
        time.sleep(0.02)
        return 5

    with pytest.raises(TimeoutError, match="sent 5 of 100 tokens"):
        eviction.fill(slow, 100, 50, "t", 0.01)


def test_lab_cost_in_the_docstring_matches_the_model():
    c = eviction.LocalCache("0", 128, 16384, None)
    assert c.fill_tokens() == 2_202_010
    assert round(c.fill_tokens() / eviction.STATED_PREFILL_RATE) == 110
    assert "2,202,010 tokens" in (eviction.__doc__ or "") and "about 110 s" in (eviction.__doc__ or "")
