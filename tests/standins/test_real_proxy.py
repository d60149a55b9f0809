"""The real vllm-ascend load-balance proxy (fetched from the registry's sdists) in front of the
``vllm serve`` stand-ins: the prefill -> decode protocol (kv_transfer_params, Mooncake handshake,
external hits on Decode), streaming with reasoning, tool calls, and the routes the kit uses.

The proxy's behaviour is not the kit's to test; these tests pin that the stand-in engines speak
its protocol, and the facts the kit's gates and checks rely on (``/healthcheck`` counts).
"""
from __future__ import annotations

import json
import sys

import pytest

from k3lab.launch.simimage import vllm_ascend
from tests.standins import _standin
from tests.standins._standin import base_env, free_port, port_open, wait_until
from tests.standins._vllm import VLLM, chat, env, metric, model_dir, request, sse, wait_ready

PD = {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}
procs = _standin.procs


def _kv(role: str, port: int, engine_id: str) -> str:
    return json.dumps({"kv_connector": "MooncakeConnectorV1", "kv_role": role, "kv_port": str(port),
                       "engine_id": engine_id, "kv_connector_extra_config": PD})


def _serve(model, port: int, kv: str) -> list[str]:
    return ["serve", str(model), "--served-model-name", "kimi-k3", "--port", str(port), "--max-model-len", "8192",
            "--block-size", "16", "--kv-transfer-config", kv, "--enable-auto-tool-choice",
            "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3"]


@pytest.fixture(params=[vllm_ascend.K3, vllm_ascend.K31])
def deployment(request, tmp_path, procs):
    """One Prefill and two Decode stand-in engines behind the real proxy of one release."""
    model = model_dir(tmp_path)
    p_port, proxy_port = free_port(), free_port()
    d_ports = [free_port(), free_port()]
    p = procs(VLLM + _serve(model, p_port, _kv("kv_producer", free_port(), "p0")), env(tmp_path, "p"))
    ds = [procs(VLLM + _serve(model, port, _kv("kv_consumer", free_port(), f"d{i}")), env(tmp_path, f"d{i}"))
          for i, port in enumerate(d_ports)]
    for proc, port in [(p, p_port), *zip(ds, d_ports)]:
        wait_ready(proc, port)
    proxy_file = vllm_ascend.path(request.param, vllm_ascend.PROXY)
    proxy = procs([sys.executable, str(proxy_file), "--host", "127.0.0.1", "--port", str(proxy_port),
                   "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(p_port),
                   "--decoder-hosts", "127.0.0.1", "127.0.0.1", "--decoder-ports", *map(str, d_ports)],
                  base_env(tmp_path))
    wait_until(lambda: port_open(proxy_port) or proxy.popen.poll() is not None, timeout=20)
    assert port_open(proxy_port), f"proxy did not start:\n{proxy.out}\n{proxy.err}"
    return {"version": request.param, "proxy": proxy, "port": proxy_port, "p": p_port, "d": d_ports, "ds": ds}


def test_healthcheck_counts_the_registered_instances(deployment):
    status, body, _ = request(deployment["port"], "/healthcheck")
    assert status == 200
    assert (body["status"], body["prefill_instances"], body["decode_instances"]) == ("ok", 1, 2)
    assert "Initialized 1 prefill clients and 2 decode clients in worker" in deployment["proxy"].err
    # /v1/models came to the proxy after 0.23 (upstream PR #14129): no gate may rely on it
    status, _, _ = request(deployment["port"], "/v1/models")
    assert status == (404 if deployment["version"] == vllm_ascend.K3 else 200)


def test_chat_goes_prefill_then_decode_with_the_kv_handshake(deployment):
    text = "A long shared document about KV transfer. " * 20
    status, out, _ = request(deployment["port"], "/v1/chat/completions", chat(text), timeout=30)
    assert status == 200, out
    msg = out["choices"][0]["message"]
    assert msg["content"] and msg.get("reasoning"), msg
    prompt = out["usage"]["prompt_tokens"]
    hits = [metric(request(port, "/metrics")[1], "vllm:external_prefix_cache_hits_total") for port in deployment["d"]]
    # the Decode engine pulled the whole prompt from Prefill (do_remote_prefill): external hits
    assert sorted(hits) == [0, prompt], hits
    assert any("KV cache transfer for request" in d.out for d in deployment["ds"])


def test_streamed_chat_carries_reasoning_then_content(deployment):
    body = chat("Say hello.", stream=True, stream_options={"include_usage": True})
    status, text, _ = request(deployment["port"], "/v1/chat/completions", body, timeout=30)
    assert status == 200, text
    events = sse(text)
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e.get("choices")]
    assert "".join(d.get("reasoning") or "" for d in deltas) and "".join(d.get("content") or "" for d in deltas)
    assert any(e.get("usage") for e in events[:-1] if isinstance(e, dict))


def test_tool_call_through_the_proxy(deployment):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    status, out, _ = request(deployment["port"], "/v1/chat/completions",
                             chat("Weather in Paris?", tools=tools, tool_choice="auto", max_tokens=1024), timeout=30)
    assert status == 200, out
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert "city" in json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])


def test_reset_prefix_cache_needs_dev_mode_engines(deployment):
    """The proxy fans /reset_prefix_cache out to every engine; vLLM serves it only with VLLM_SERVER_DEV_MODE=1."""
    status, body, _ = request(deployment["port"], "/reset_prefix_cache", method="POST")
    assert status == 500 and len(body["failed"]) == 3, body


def test_reset_prefix_cache_with_dev_mode_engines(tmp_path, procs):
    model = model_dir(tmp_path)
    p_port, d_port, proxy_port = free_port(), free_port(), free_port()
    for name, port, role in (("p", p_port, "kv_producer"), ("d", d_port, "kv_consumer")):
        wait_ready(procs(VLLM + _serve(model, port, _kv(role, free_port(), name)),
                         env(tmp_path, name, VLLM_SERVER_DEV_MODE="1")), port)
    proxy = procs([sys.executable, str(vllm_ascend.path(vllm_ascend.K3, vllm_ascend.PROXY)), "--host", "127.0.0.1",
                   "--port", str(proxy_port), "--prefiller-ports", str(p_port), "--decoder-ports", str(d_port),
                   "--prefiller-hosts", "127.0.0.1", "--decoder-hosts", "127.0.0.1"], base_env(tmp_path))
    wait_until(lambda: port_open(proxy_port) or proxy.popen.poll() is not None, timeout=20)
    status, body, _ = request(proxy_port, "/reset_prefix_cache", method="POST")
    assert status == 200, body
