"""The external-cache checks' no-dev-mode path end to end on the stand-ins, no Docker: a MemCache
MetaService and provider, one pooled producer engine whose local prefix cache is 512 blocks of 16
tokens (both stored prompts fit), and the suite's own helpers (conformance/test_service.py)
driving it over HTTP (issue #24): a fill passes, a short fill fails, a small pool skips."""
from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest
import requests

from k3lab import paths
from tests.standins._standin import procs  # noqa: F401 (fixture)
from tests.standins._vllm import VLLM, env, free_port, model_dir, wait_ready
from tests.standins.test_standin_memcache import local_conf, meta, provider  # noqa: F401 (fixture)
from tests.standins.test_standin_vllm_kv import _pool_serve


def _suite():
    """The suite's module, loaded fresh (a monkeypatch in one test never reaches another)."""
    name = "k3lab_suite_service"
    spec = importlib.util.spec_from_file_location(name, paths.CONFORMANCE / "test_service.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def pooled(tmp_path, meta, procs, request):  # noqa: F811
    """A provider of ``request.param`` (protocol, dram.size, bytes per KV block), a pooled producer on it."""
    protocol, dram, block_bytes = getattr(request, "param", ("device_sdma", "1GB", "1024"))
    provider(meta, procs, local_conf(meta.tmp, meta.ports, protocol=protocol, dram=dram))
    engine_conf = local_conf(meta.tmp, meta.ports, name="engine.conf", protocol=protocol, dram="0GB")
    port = free_port()
    # the image's memcache_hybrid stand-in (on the site), not test_standin_vllm_kv's fake store
    engine = procs(VLLM + _pool_serve(model_dir(tmp_path), port, free_port()),
                   env(tmp_path, "p0", K3SIM_NUM_GPU_BLOCKS="512", K3SIM_KV_BLOCK_BYTES=block_bytes,
                       MMC_LOCAL_CONFIG_PATH=str(engine_conf)))
    wait_ready(engine, port, timeout=20)
    http = requests.Session()
    http.trust_env = False
    plan = SimpleNamespace(expect=SimpleNamespace(
        served_name="kimi-k3", max_model_len=8192,
        metaservice=SimpleNamespace(metrics_url=f"http://127.0.0.1:{meta.ports.http}")))
    return http, plan, SimpleNamespace(node="p0", url=f"http://127.0.0.1:{port}")


def test_a_fill_leaves_only_pool_hits_and_records_its_cost(pooled):
    http, plan, api = pooled
    suite = _suite()
    done = suite._evict_after_storing(http, plan, api)
    assert int(done.properties["eviction.tokens_sent"]) >= 8602  # 1.05 x 512 x 16
    assert done.properties["eviction.local_cache_tokens"] == "8192" and done.properties["eviction.pool_evictions"] == "0"
    for tag in ("repeat", "ring"):
        prompt = suite._evicted_prompts()[tag]
        out, external, local = suite._repeat(http, plan, api, "evict", prompt)
        assert external > 0 and local == 0, tag
        assert out["choices"][0]["text"] == done.outputs[prompt]


def test_a_short_fill_leaves_local_hits_and_fails(pooled, monkeypatch):
    http, plan, api = pooled
    suite = _suite()
    monkeypatch.setattr(suite.eviction, "MARGIN", -0.9)  # a tenth of the cache: the prefixes stay local
    monkeypatch.setattr(suite.eviction, "CHUNK_TOKENS", 256)
    suite._evict_after_storing(http, plan, api)
    with pytest.raises(AssertionError, match="local prefix cache hits on p0 after the fill: expected 0"):
        suite._repeat(http, plan, api, "evict", suite._evicted_prompts()["repeat"])


@pytest.mark.parametrize("pooled", [("host_tcp", "2MB", "262144")], indirect=True)
def test_a_pool_too_small_for_the_fill_skips_with_the_numbers(pooled):
    http, plan, api = pooled
    with pytest.raises(pytest.skip.Exception, match="the pool cannot hold the fill .* 90 % eviction threshold"):
        _suite()._evict_after_storing(http, plan, api)
