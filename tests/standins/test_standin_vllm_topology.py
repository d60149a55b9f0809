"""``vllm serve`` stand-in topology over real TCP: internal DP (head + headless workers), the
X-data-parallel-rank header, external DP, multi-node PP on the master port, and group faults."""
from __future__ import annotations

from tests.standins import _standin
from tests.standins._standin import port_open
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

BASE = ["--served-model-name", "kimi-k3", "--tensor-parallel-size", "16", "--max-model-len", "8192"]

procs = _standin.procs  # the shared fixture: started processes are killed after each test


def _dp(model, rank: int, rpc: int, port: int, size: int = 3, headless: bool = True) -> list[str]:
    argv = ["serve", str(model), *BASE, "--port", str(port), "--data-parallel-size", str(size),
            "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
            "--data-parallel-rpc-port", str(rpc)]
    if rank:
        argv += ["--data-parallel-start-rank", str(rank)]
    return argv + (["--headless"] if headless and rank else [])


def test_internal_dp_head_workers_duplicate_and_rank_routing(tmp_path, procs):
    model = model_dir(tmp_path)
    rpc, port = free_port(), free_port()
    head = procs(VLLM + _dp(model, 0, rpc, port), env(tmp_path, "n0"))
    head.wait_output("Starting to load model")
    assert port_open(rpc) and not port_open(port)  # RPC port listens at once; the API waits for all ranks
    w1 = procs(VLLM + _dp(model, 1, rpc, port), env(tmp_path, "n1"))
    w1.wait_output("Launching 1 data parallel engine(s) in headless mode")
    dup = procs(VLLM + _dp(model, 1, rpc, port), env(tmp_path, "n1b"))
    assert wait_exit(dup) == 1
    assert "Unexpected HELLO message for remote engine 1 in CONNECTED state." in dup.err
    bad = procs(VLLM + _dp(model, 3, rpc, port), env(tmp_path, "n3"))
    assert wait_exit(bad) == 1 and "Message from engine with unexpected data parallel rank: 3" in bad.err
    assert not port_open(port)
    procs(VLLM + _dp(model, 2, rpc, port), env(tmp_path, "n2"))
    wait_ready(head, port)
    assert not port_open(rpc)  # as real vLLM: the handshake port is closed once the engines have started
    status, body, _ = request(port, "/v1/chat/completions", chat(), headers={"X-data-parallel-rank": "2"})
    assert status == 200, body
    text = request(port, "/metrics")[1]
    assert metric(text, "vllm:request_success_total", engine="2", finished_reason="stop") == 1
    assert metric(text, "vllm:request_success_total", engine="1") == 0
    assert "_created" not in text  # several API servers: multiprocess registry
    status, body, _ = request(port, "/v1/chat/completions", chat(), headers={"X-data-parallel-rank": "3"})
    assert status == 400 and body["error"]["message"] == "data_parallel_rank 3 is out of range [0, 3)."
    assert request(port, "/v1/chat/completions", chat(), headers={"X-data-parallel-rank": "x"})[0] == 200
    for _ in range(3):
        request(port, "/v1/chat/completions", chat())
    text = request(port, "/metrics")[1]
    assert all(metric(text, "vllm:request_success_total", engine=str(r)) >= 1 for r in range(3))
    w1.kill()  # a lost DP engine takes the front-end down
    assert wait_exit(head) == 1 and "Engine core proc EngineCore_DP1 died unexpectedly" in head.out


def test_worker_times_out_without_head(tmp_path, procs):
    model = model_dir(tmp_path)
    w = procs(VLLM + _dp(model, 1, free_port(), free_port()), env(tmp_path, VLLM_ENGINE_READY_TIMEOUT_S="0.6"))
    assert wait_exit(w) == 1
    assert "RuntimeError: Did not receive response from front-end process within 0.01 minutes" in w.err


def test_external_dp_each_rank_serves_its_own_api(tmp_path, procs):
    model = model_dir(tmp_path)
    rpc = free_port()
    ports = [free_port(), free_port()]
    ranks = []
    for r in (0, 1):
        argv = ["serve", str(model), *BASE, "--port", str(ports[r]), "--data-parallel-size", "2",
                "--data-parallel-rank", str(r), "--data-parallel-address", "127.0.0.1",
                "--data-parallel-rpc-port", str(rpc)]
        ranks.append(procs(VLLM + argv, env(tmp_path, f"e{r}")))
    for r in (0, 1):
        wait_ready(ranks[r], ports[r])
    assert request(ports[1], "/v1/chat/completions", chat())[0] == 200
    text = request(ports[1], "/metrics")[1]
    assert metric(text, "vllm:request_success_total", engine="1", finished_reason="stop") == 1
    assert 'engine="0"' not in text
    status, body, _ = request(ports[1], "/v1/chat/completions", chat(), headers={"X-data-parallel-rank": "1"})
    assert status == 400 and body["error"]["message"] == "data_parallel_rank 1 is out of range [0, 1)."


def _pp(model, node: int, master: int, port: int, **over: str) -> list[str]:
    argv = ["serve", str(model), "--served-model-name", "kimi-k3", "--port", str(port),
            "--pipeline-parallel-size", over.get("pp", "2"), "--nnodes", "2", "--node-rank", str(node),
            "--master-addr", "127.0.0.1", "--master-port", str(master), "--tensor-parallel-size", "4",
            "--prefill-context-parallel-size", "4", "--max-model-len", over.get("mml", "8192")]
    return argv + (["--headless"] if node else [])


def test_pp_nodes_join_and_inconsistent_settings_are_rejected(tmp_path, procs):
    model = model_dir(tmp_path)
    master, port = free_port(), free_port()
    part = {"VLLM_PP_LAYER_PARTITION": "47,46"}
    n0 = procs(VLLM + _pp(model, 0, master, port), env(tmp_path, "p0", **part))
    n0.wait_output("Starting to load model")
    assert port_open(master) and not port_open(port)
    bad = procs(VLLM + _pp(model, 1, master, port, mml="4096"), env(tmp_path, "p1", **part))
    assert wait_exit(bad) == 1
    assert "Configuration mismatch detected for node 1: max_model_len=8192 vs 4096" in bad.err
    n0.wait_output("Configuration mismatch detected for node 1")
    skew = procs(VLLM + _pp(model, 1, master, port), env(tmp_path, "p1b", VLLM_PP_LAYER_PARTITION="46,47"))
    assert wait_exit(skew) == 1 and "VLLM_PP_LAYER_PARTITION='47,46' vs '46,47'" in skew.err
    good = procs(VLLM + _pp(model, 1, master, port), env(tmp_path, "p1c", **part))
    wait_ready(n0, port)
    assert request(port, "/v1/chat/completions", chat())[0] == 200
    assert good.popen.poll() is None
    n0.kill()
    assert wait_exit(good) == 1 and "Lost connection to the master node" in good.out


def test_master_port_in_use_is_torch_error(tmp_path, procs):
    import socket
    model = model_dir(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        master = holder.getsockname()[1]
        n0 = procs(VLLM + _pp(model, 0, master, free_port()), env(tmp_path, VLLM_PP_LAYER_PARTITION="47,46"))
        assert wait_exit(n0) == 1
    assert ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            f"address. port: {master}, useIpv6: false, code: -98, name: EADDRINUSE") in n0.err


def test_hang_never_ready_and_crash_after_serving(tmp_path, procs):
    model = model_dir(tmp_path)
    port = free_port()
    e = env(tmp_path, faults={"engine": {"hang": True}})
    p = procs(VLLM + ["serve", str(model), "--port", str(port)], e)
    p.wait_output("Starting to load model")
    import time
    time.sleep(0.6)
    assert not port_open(port)
    set_faults(e, {"engine": {"crash_after_s": 0.3}})
    wait_ready(p, port)
    assert wait_exit(p) == 1 and "EngineCore encountered a fatal error." in p.out


def _completion(port: int, tokens: int, **headers: str) -> tuple[int, object]:
    import http.client
    import urllib.error
    try:
        status, out, _ = request(port, "/v1/completions", {"model": "kimi-k3", "prompt": [7] * tokens, "max_tokens": 1},
                                 headers=headers, timeout=8)
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:  # the engine died under it
        return 0, str(exc)
    return status, out


def test_out_of_memory_on_a_long_prompt_kills_the_engine(tmp_path, procs):
    """``oom_prompt_tokens``: short prompts are served, a longer one ends the engine as torch_npu's OOM does."""
    model = model_dir(tmp_path)
    port = free_port()
    p = procs(VLLM + ["serve", str(model), "--port", str(port), *BASE],
              env(tmp_path, faults={"engine": {"oom_prompt_tokens": 1000}}))
    wait_ready(p, port)
    assert _completion(port, 1000)[0] == 200
    assert _completion(port, 1001)[0] != 200
    assert wait_exit(p) == 1
    assert "EngineCore encountered a fatal error." in p.out
    assert "RuntimeError: NPU out of memory. Tried to allocate 0.02 GiB (NPU 0; 60.96 GiB total capacity;" in p.out


def test_out_of_memory_on_a_headless_rank_fails_the_request(tmp_path, procs):
    """The rank that OOMs is on a headless worker: the head's request fails instead of waiting, and
    the group goes down with its rank."""
    model = model_dir(tmp_path)
    rpc, port = free_port(), free_port()
    head = procs(VLLM + _dp(model, 0, rpc, port, size=2), env(tmp_path, "n0"))
    w1 = procs(VLLM + _dp(model, 1, rpc, port, size=2), env(tmp_path, "n1", faults={"engine": {"oom_prompt_tokens": 10}}))
    wait_ready(head, port)
    assert _completion(port, 10, **{"X-data-parallel-rank": "1"})[0] == 200
    assert _completion(port, 50, **{"X-data-parallel-rank": "1"})[0] != 200
    assert wait_exit(w1) == 1 and "NPU out of memory" in w1.out
