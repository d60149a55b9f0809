"""``vllm serve`` stand-in KV transfer: Mooncake P->D handshake over the real port formula,
handshake faults and port clashes, and the AscendStore memcache pool (with a fake store)."""
from __future__ import annotations

import json
import os
import textwrap

from tests.standins import _standin
from tests.standins._standin import PYTHONPATH, port_open
from tests.standins._vllm import (
    VLLM,
    chat,
    env,
    free_port,
    metric,
    model_dir,
    request,
    set_faults,
    wait_exit,
    wait_ready,
)

PD = {"prefill": {"dp_size": 1, "tp_size": 2}, "decode": {"dp_size": 1, "tp_size": 2}}

procs = _standin.procs  # the shared fixture: started processes are killed after each test


def _kv(role: str, port: int, name: str = "MooncakeConnectorV1", **extra) -> str:
    return json.dumps({"kv_connector": name, "kv_role": role, "kv_port": str(port),
                       "kv_connector_extra_config": PD, **extra})


def _serve(model, port: int, kv: str, *more: str) -> list[str]:
    return ["serve", str(model), "--served-model-name", "kimi-k3", "--port", str(port), "--tensor-parallel-size", "2",
            "--max-model-len", "8192", "--block-size", "16", "--kv-transfer-config", kv, *more]


def _prefill(port: int, text: str) -> dict:
    body = chat(text, max_tokens=1, kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False,
                                                        "remote_engine_id": None, "remote_block_ids": None,
                                                        "remote_host": None, "remote_port": None})
    status, reply, _ = request(port, "/v1/chat/completions", body)
    assert status == 200, reply
    return reply


def test_p_to_d_handshake_success_and_drop_fault(tmp_path, procs):
    model = model_dir(tmp_path)
    p_port, d_port, p_kv, d_kv = free_port(), free_port(), free_port(), free_port()
    p_env = env(tmp_path, "p")
    p = procs(VLLM + _serve(model, p_port, _kv("kv_producer", p_kv, engine_id="p0")), p_env)
    d = procs(VLLM + _serve(model, d_port, _kv("kv_consumer", d_kv, engine_id="d0")), env(tmp_path, "d"))
    wait_ready(p, p_port)
    wait_ready(d, d_port)
    assert port_open(p_kv) and port_open(p_kv + 1) and port_open(d_kv + 1)  # tp 2: two handshake ports each
    assert f"KVCacheSendingThread started listening on path: tcp://127.0.0.1:{p_kv + 1}. Thread: tp_rank=1" in p.out
    text = "A long shared document about KV transfer. " * 30
    reply = _prefill(p_port, text)
    params = reply["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_engine_id"] == "p0" and params["remote_port"] == p_kv and params["remote_host"] == "127.0.0.1"
    assert params["remote_ptp_size"] == 2
    assert params["remote_multi_nodes_meta_mapping"]["1"]["handshake_port"] == p_kv + 1
    assert reply["choices"][0]["finish_reason"] == "length"
    assert "Delaying free of" in p.out
    status, out, _ = request(d_port, "/v1/chat/completions", chat(text, kv_transfer_params=params))
    assert status == 200, out
    prompt = out["usage"]["prompt_tokens"]
    m = request(d_port, "/metrics")[1]
    assert metric(m, "vllm:external_prefix_cache_queries_total", engine="0") == prompt
    assert metric(m, "vllm:external_prefix_cache_hits_total", engine="0") == prompt
    assert "KV cache transfer for request" in d.out
    # Blocks were freed after the transfer: replaying the same params fails like a freed request.
    status, out, _ = request(d_port, "/v1/chat/completions", chat(text, kv_transfer_params=params))
    assert status == 500 and out["error"]["type"] == "InternalServerError"
    set_faults(p_env, {"engine": {"drop_kv_handshake": True}})
    params = _prefill(p_port, text + " again")["kv_transfer_params"]
    status, out, _ = request(d_port, "/v1/chat/completions", chat(text + " again", kv_transfer_params=params))
    assert status == 500 and out == {"error": {"message": "Internal server error", "type": "InternalServerError",
                                               "param": None, "code": 500}}
    assert "Mooncake transfer failed for request. remote_request_id=" in d.out
    d2 = request(d_port, "/v1/chat/completions", dict(chat(text, stream=True), kv_transfer_params=params))
    assert d2[0] == 200 and '"error"' in d2[1] and d2[1].rstrip().endswith("data: [DONE]")


def test_same_engine_id_conflicts(tmp_path, procs):
    model = model_dir(tmp_path)
    p_port, d_port, p_kv, d_kv = free_port(), free_port(), free_port(), free_port()
    p = procs(VLLM + _serve(model, p_port, _kv("kv_producer", p_kv, engine_id="same")), env(tmp_path, "p"))
    d = procs(VLLM + _serve(model, d_port, _kv("kv_consumer", d_kv, engine_id="same")), env(tmp_path, "d"))
    wait_ready(p, p_port)
    wait_ready(d, d_port)
    params = _prefill(p_port, "hello " * 40)["kv_transfer_params"]
    assert request(d_port, "/v1/chat/completions", chat("hello " * 40, kv_transfer_params=params))[0] == 500
    assert "Conflict engine id same with local engine id same" in d.out


def test_handshake_port_clash_is_zmq_error(tmp_path, procs):
    import socket
    model = model_dir(tmp_path)
    # The engine's second handshake port (tp_rank 1) is taken. Both ports come from this worker's
    # block below the ephemeral range: a port next to a bind(0) one could be any connection's (CI flake).
    kv = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", kv + 1))
        holder.listen()
        p = procs(VLLM + _serve(model, free_port(), _kv("kv_producer", kv)), env(tmp_path))
        assert wait_exit(p) == 1
    assert f"zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:{kv + 1}')" in p.err


FAKE_STORE = textwrap.dedent('''
    """Fake memcache_hybrid for tests: one file per key under FAKE_MMC_DIR."""
    import hashlib, os

    def _path(key):
        return os.path.join(os.environ["FAKE_MMC_DIR"], hashlib.sha256(key.encode()).hexdigest())

    class DistributedObjectStore:
        def init(self, device_id, init_bm=True):
            return int(os.environ.get("FAKE_MMC_INIT_RET", "0"))
        def put(self, key, value):
            with open(_path(key), "wb") as fh:
                fh.write(value)
            return 0
        def get(self, key):
            try:
                with open(_path(key), "rb") as fh:
                    return fh.read()
            except OSError:
                return b""
        def is_exist(self, key):
            return 1 if os.path.exists(_path(key)) else 0
        def batch_is_exist(self, keys):
            return [self.is_exist(k) for k in keys]
        def close(self):
            pass
''')


def _pool_env(tmp_path, name: str, **extra: str) -> dict[str, str]:
    fake = tmp_path / "fake"
    (fake / "memcache_hybrid").mkdir(parents=True, exist_ok=True)
    (fake / "memcache_hybrid" / "__init__.py").write_text(FAKE_STORE)
    (tmp_path / "store").mkdir(exist_ok=True)
    e = env(tmp_path, name, FAKE_MMC_DIR=str(tmp_path / "store"), MMC_LOCAL_CONFIG_PATH=str(tmp_path / "mmc.conf"))
    e["PYTHONPATH"] = f"{fake}{os.pathsep}{PYTHONPATH}"
    e.update(extra)
    return e


POOL = json.dumps({"kv_connector": "MultiConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {
    "connectors": [{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": "0",
                    "kv_connector_extra_config": PD},
                   {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
                    "kv_connector_extra_config": {"backend": "memcache", "lookup_rpc_port": "0"}}]}})


def _pool_serve(model, port: int, kv_port: int) -> list[str]:
    return _serve(model, port, POOL.replace('"kv_port": "0"', f'"kv_port": "{kv_port}"'))


def test_pool_hits_across_engines_and_hash_seed_mismatch(tmp_path, procs):
    model = model_dir(tmp_path)
    ports = [free_port() for _ in range(3)]
    a = procs(VLLM + _pool_serve(model, ports[0], free_port()), _pool_env(tmp_path, "a"))
    b = procs(VLLM + _pool_serve(model, ports[1], free_port()), _pool_env(tmp_path, "b"))
    c = procs(VLLM + _pool_serve(model, ports[2], free_port()),
              _pool_env(tmp_path, "c", PYTHONHASHSEED="1"))
    for proc, port in zip((a, b, c), ports):
        wait_ready(proc, port)
    assert "Initializing Memcache store. local_rank=0" in a.out
    text = "Pool shared prefix. " * 50
    first = request(ports[0], "/v1/chat/completions", chat(text))[1]
    m = request(ports[0], "/metrics")[1]
    assert metric(m, "vllm:external_prefix_cache_hits_total", engine="0") == 0
    assert metric(m, "vllm:external_prefix_cache_queries_total", engine="0") == first["usage"]["prompt_tokens"]
    request(ports[1], "/v1/chat/completions", chat(text))
    m = request(ports[1], "/metrics")[1]
    hits = metric(m, "vllm:external_prefix_cache_hits_total", engine="0")
    assert hits > 0 and hits % 16 == 0 and metric(m, "vllm:prefix_cache_hits_total", engine="0") == 0
    request(ports[2], "/v1/chat/completions", chat(text))
    m = request(ports[2], "/metrics")[1]
    assert metric(m, "vllm:external_prefix_cache_hits_total", engine="0") == 0  # other PYTHONHASHSEED: other keys
    b.wait_output("External prefix cache hit rate: ")


def test_pool_init_failures(tmp_path, procs):
    model = model_dir(tmp_path)
    e = _pool_env(tmp_path, "x")
    e.pop("MMC_LOCAL_CONFIG_PATH")
    p = procs(VLLM + _pool_serve(model, free_port(), free_port()), e)
    assert wait_exit(p) == 1
    assert ("Configuration loading failed. error=The environment variable 'MMC_LOCAL_CONFIG_PATH' is not set.. "
            "Check memcache config and environment.") in p.out
    q = procs(VLLM + _pool_serve(model, free_port(), free_port()), _pool_env(tmp_path, "y", FAKE_MMC_INIT_RET="-3017"))
    assert wait_exit(q) == 1 and "Store initialization failed. error=init returned -3017" in q.out


def test_pp_prefill_mapping_reaches_every_node(tmp_path, procs):
    """A PP2 prefill advertises node 1's handshake ports in the mapping; D must reach them too."""
    model = model_dir(tmp_path)
    master, p_port, d_port, p_kv, d_kv = (free_port() for _ in range(5))
    pd = {"prefill": {"dp_size": 1, "tp_size": 2, "pp_size": 2}, "decode": {"dp_size": 1, "tp_size": 2}}
    kv_p = json.dumps({"kv_connector": "MooncakeConnectorV2", "kv_role": "kv_producer", "kv_port": str(p_kv),
                       "kv_connector_extra_config": pd})
    kv_d = json.dumps({"kv_connector": "MooncakeConnectorV2", "kv_role": "kv_consumer", "kv_port": str(d_kv),
                       "kv_connector_extra_config": pd})
    pp = ["--pipeline-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(master)]
    part = {"VLLM_PP_LAYER_PARTITION": "47,46"}
    n0 = procs(VLLM + _serve(model, p_port, kv_p, *pp, "--node-rank", "0"), env(tmp_path, "p0", **part))
    n1_env = env(tmp_path, "p1", **part)
    n1 = procs(VLLM + _serve(model, p_port, kv_p, *pp, "--node-rank", "1", "--headless"), n1_env)
    d = procs(VLLM + _serve(model, d_port, kv_d), env(tmp_path, "d"))
    wait_ready(n0, p_port)
    wait_ready(d, d_port)
    n1.wait_output(f"tcp://127.0.0.1:{p_kv + 3}. Thread: tp_rank=1, pp_rank=1")  # (pp_rank*pcp+pcp)*tp+tp
    text = "Pipeline parallel prefill. " * 30
    params = _prefill(p_port, text)["kv_transfer_params"]
    assert params["remote_multi_nodes_meta_mapping"]["3"]["handshake_port"] == p_kv + 3
    assert request(d_port, "/v1/chat/completions", chat(text, kv_transfer_params=params))[0] == 200
    set_faults(n1_env, {"engine": {"drop_kv_handshake": True}})  # only node 1 (pp_rank 1) refuses
    params = _prefill(p_port, text + "2")["kv_transfer_params"]
    assert request(d_port, "/v1/chat/completions", chat(text + "2", kv_transfer_params=params))[0] == 500
    assert f"handshake with tcp://127.0.0.1:{p_kv + 2} failed" in d.out


def _completion(port: int, prompt: str) -> dict:
    status, reply, _ = request(port, "/v1/completions", {"model": "kimi-k3", "prompt": prompt, "max_tokens": 1,
                                                         "temperature": 0})
    assert status == 200, reply
    return reply


def test_local_cache_is_the_lru_it_advertises_and_a_fill_leaves_only_pool_hits(tmp_path, procs):
    """What the external-cache checks rely on without dev mode (issue #24): vllm:cache_config_info gives the
    local cache's size, the engine evicts LRU at that size, and a prompt pushed out by the kit's fill
    comes back from the pool only. Without the fill it is a local hit, never an external one."""
    from k3lab.conform import eviction

    model = model_dir(tmp_path)
    port = free_port()
    p = procs(VLLM + _pool_serve(model, port, free_port()), _pool_env(tmp_path, "a", K3SIM_NUM_GPU_BLOCKS="8"))
    wait_ready(p, port)
    text = request(port, "/metrics")[1]
    [local] = eviction.local_caches(text)
    assert (local.engine, local.block_size, local.num_gpu_blocks, local.tokens) == ("0", 16, 8, 128)
    assert 'num_gpu_blocks_override="None"' in text and 'enable_prefix_caching="True"' in text
    prompt = "A prefix the pool keeps. " * 8

    def counters() -> tuple[float, float]:
        m = request(port, "/metrics")[1]
        return metric(m, "vllm:prefix_cache_hits_total"), metric(m, "vllm:external_prefix_cache_hits_total")

    first = _completion(port, prompt)["usage"]["prompt_tokens"]
    assert first > 32  # at least two full blocks
    before = counters()
    _completion(port, prompt)
    local_hits, ext_hits = (a - b for a, b in zip(counters(), before))
    assert local_hits > 0 and ext_hits == 0  # still in the local cache: not an external hit
    done = eviction.fill(lambda q: _completion(port, q)["usage"]["prompt_tokens"], local.fill_tokens(), 48, "t", 30)
    assert done.tokens >= local.fill_tokens() and done.requests >= 3
    before = counters()
    _completion(port, prompt)
    local_hits, ext_hits = (a - b for a, b in zip(counters(), before))
    assert local_hits == 0 and ext_hits > 0 and ext_hits % 16 == 0


def test_num_gpu_blocks_override_sizes_the_cache(tmp_path, procs):
    model = model_dir(tmp_path)
    port = free_port()
    p = procs(VLLM + _serve(model, port, _kv("kv_producer", free_port()), "--num-gpu-blocks-override", "5"),
              env(tmp_path, "o"))
    wait_ready(p, port)
    text = request(port, "/metrics")[1]
    assert 'num_gpu_blocks="5"' in text and 'num_gpu_blocks_override="5"' in text
    assert "GPU KV cache size: 80 tokens" in p.out
    port = free_port()
    q = procs(VLLM + _serve(model, port, _kv("kv_producer", free_port())), env(tmp_path, "d"))
    wait_ready(q, port)
    assert 'num_gpu_blocks="1024"' in request(port, "/metrics")[1]  # default: two requests of max_model_len 8192
