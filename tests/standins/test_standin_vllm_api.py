"""``vllm serve`` stand-in, OpenAI API: reasoning split vs raw XTML, tool calls, streaming chunk
shapes, images, limits, max_model_len, api key, /v1/models, /metrics, prefix-cache counters."""
from __future__ import annotations

import base64
import io
import json

import pytest

from tests.standins._vllm import Engines, chat, env, free_port, metric, model_dir, request, sse

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "required": ["city", "days", "unit"], "properties": {
              "city": {"type": "string", "minLength": 2},
              "days": {"type": "integer", "minimum": 1, "maximum": 7},
              "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
              "verbose": {"type": "boolean"}}}}},
         {"type": "function", "function": {"name": "other", "parameters": {"type": "object", "properties": {}}}}]
PARSERS = ["--enable-auto-tool-choice", "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_api")
    model = str(model_dir(root))
    engines = Engines(root)
    ports = {k: free_port() for k in ("full", "raw", "lmo", "key", "nostats")}
    common = ["--served-model-name", "kimi-k3", "--max-model-len", "4096", "--limit-mm-per-prompt",
              '{"vision_chunk": 2}', "--block-size", "16"]
    try:
        procs = {
            "full": engines.start(["serve", model, "--port", str(ports["full"]), *common, *PARSERS,
                                   "--enable-prompt-tokens-details"],
                                  env(root, "full", VLLM_SERVER_DEV_MODE="1"), wait=False),
            "raw": engines.start(["serve", model, "--port", str(ports["raw"]), *common], env(root, "raw"), wait=False),
            "lmo": engines.start(["serve", model, "--port", str(ports["lmo"]), *common, "--language-model-only"],
                                 env(root, "lmo"), wait=False),
            "key": engines.start(["serve", model, "--port", str(ports["key"]), *common, "--api-key", "s3cret"],
                                 env(root, "key"), wait=False),
            "nostats": engines.start(["serve", model, "--port", str(ports["nostats"]), *common, "--disable-log-stats"],
                                     env(root, "nostats"), wait=False),
        }
        from tests.standins._vllm import wait_ready
        for name, proc in procs.items():
            wait_ready(proc, ports[name])
        yield {"ports": ports, "procs": procs}
    finally:
        engines.close()


def _png(colour: tuple[int, int, int], size=(64, 32)) -> str:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _image_msg(*urls: str, text: str = "Describe the image.") -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return [{"role": "user", "content": parts + [{"type": "text", "text": text}]}]


def test_models_version_health(servers):
    port = servers["ports"]["full"]
    status, body, _ = request(port, "/v1/models")
    assert status == 200
    card = body["data"][0]
    assert card["id"] == "kimi-k3" and card["max_model_len"] == 4096 and card["root"].endswith("Kimi-K3-w4a8")
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert request(port, "/health")[:2] == (200, "")
    assert request(port, "/ping")[0] == 200
    assert "version" in request(port, "/version")[1]
    assert request(port, "/v1/models", body=None, method="DELETE")[0] == 405


def test_reasoning_parser_splits_channels(servers):
    status, body, _ = request(servers["ports"]["full"], "/v1/chat/completions", chat())
    assert status == 200, body
    msg = body["choices"][0]["message"]
    assert msg["reasoning"] and "<|" not in msg["reasoning"]
    assert msg["content"] and "<|" not in msg["content"]
    assert "reasoning_content" not in msg and "tool_calls" not in msg
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["kv_transfer_params"] is None and body["object"] == "chat.completion"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    off = request(servers["ports"]["full"], "/v1/chat/completions",
                  chat(chat_template_kwargs={"thinking": False}))[1]["choices"][0]["message"]
    assert off["reasoning"] is None and off["content"]


def test_without_parser_raw_markers_land_in_content(servers):
    body = request(servers["ports"]["raw"], "/v1/chat/completions", chat())[1]
    msg = body["choices"][0]["message"]
    assert msg["content"].startswith("<|open|>think<|sep|>")
    assert "<|close|>think<|sep|><|open|>response<|sep|>" in msg["content"]
    assert msg["reasoning"] is None


def test_deterministic_output_for_greedy_and_seed(servers):
    port = servers["ports"]["full"]
    a = request(port, "/v1/chat/completions", chat(temperature=0))[1]["choices"][0]["message"]["content"]
    b = request(port, "/v1/chat/completions", chat(temperature=0))[1]["choices"][0]["message"]["content"]
    assert a == b


def test_tool_call_satisfies_schema(servers):
    status, body, _ = request(servers["ports"]["full"], "/v1/chat/completions",
                              chat("What is the weather in Paris?", tools=TOOLS))
    assert status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert set(args) == {"city", "days", "unit"}
    assert len(args["city"]) >= 2 and 1 <= args["days"] <= 7 and args["unit"] in ("celsius", "fahrenheit")


RACK = {"type": "function", "function": {"name": "locate_rack", "description": "Find the rack that holds a server node",
        "parameters": {"type": "object", "required": ["rack"], "properties": {
            "rack": {"type": "string", "pattern": "^R[0-9]{2}$"}}}}}


def test_tool_choice_follows_the_question(servers):
    """A real model answers an unrelated question itself and picks the tool the question is about."""
    port = servers["ports"]["full"]
    status, body, _ = request(port, "/v1/chat/completions", chat("What is the capital of France?", tools=TOOLS + [RACK]))
    assert status == 200, body
    assert "tool_calls" not in body["choices"][0]["message"] and body["choices"][0]["finish_reason"] == "stop"
    status, body, _ = request(port, "/v1/chat/completions", chat("Which rack holds node p3?", tools=TOOLS + [RACK]))
    call = body["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "locate_rack" and json.loads(call["arguments"]) == {"rack": "R00"}
    status, body, _ = request(port, "/v1/chat/completions",
                              chat("What is the capital of France?", tools=TOOLS + [RACK], tool_choice="required"))
    assert body["choices"][0]["message"]["tool_calls"], "tool_choice required always calls a tool"


def test_auto_tool_choice_without_flags_is_400(servers):
    status, body, _ = request(servers["ports"]["raw"], "/v1/chat/completions", chat(tools=TOOLS))
    assert status == 400
    assert body["error"]["message"] == ('"auto" tool choice requires --enable-auto-tool-choice and '
                                        '--tool-call-parser to be set')
    assert body["error"]["type"] == "BadRequestError" and body["error"]["code"] == 400


def test_streaming_chunk_shapes(servers):
    status, text, hdrs = request(servers["ports"]["full"], "/v1/chat/completions",
                                 chat(stream=True, temperature=0, stream_options={"include_usage": True}))
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    events = sse(text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == "stop"
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning", "") for c in chunks[1:-1])
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    full = request(servers["ports"]["full"], "/v1/chat/completions", chat(temperature=0))[1]["choices"][0]["message"]
    assert reasoning == full["reasoning"] and content == full["content"]
    assert not any("reasoning_content" in c["choices"][0]["delta"] for c in chunks[1:-1])


def test_streaming_tool_call_deltas(servers):
    text = request(servers["ports"]["full"], "/v1/chat/completions",
                   chat("What is the weather in Paris?", tools=TOOLS, stream=True))[1]
    chunks = [c for c in sse(text) if c != "[DONE]"]
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert deltas[0]["function"] == {"name": "get_weather"} and deltas[0]["type"] == "function" and "id" in deltas[0]
    args = "".join(d["function"].get("arguments", "") for d in deltas[1:])
    assert json.loads(args)["unit"] == "celsius"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_image_colour_and_size(servers):
    status, body, _ = request(servers["ports"]["full"], "/v1/chat/completions",
                              {"model": "kimi-k3", "messages": _image_msg(_png((250, 10, 10))), "max_tokens": 200})
    assert status == 200, body
    assert "64x32" in body["choices"][0]["message"]["content"] and "red" in body["choices"][0]["message"]["content"]
    blue = request(servers["ports"]["full"], "/v1/chat/completions",
                   {"model": "kimi-k3", "messages": _image_msg(_png((0, 0, 255), (20, 20))), "max_tokens": 200})[1]
    assert "mostly blue" in blue["choices"][0]["message"]["content"]


def test_image_limits_and_bad_urls(servers):
    port = servers["ports"]["full"]
    url = _png((0, 255, 0))
    status, body, _ = request(port, "/v1/chat/completions",
                              {"model": "kimi-k3", "messages": _image_msg(url, url, url), "max_tokens": 50})
    assert status == 400
    assert body["error"]["message"] == ("At most 2 vision_chunk(s) may be provided in one prompt. Set "
                                        "`--limit-mm-per-prompt` to increase this limit.")
    status, body, _ = request(port, "/v1/chat/completions",
                              {"model": "kimi-k3", "messages": _image_msg("data:image/png,abc"), "max_tokens": 50})
    assert status == 400 and "Only base64 data URLs are supported for now." in body["error"]["message"]
    status, body, _ = request(servers["ports"]["lmo"], "/v1/chat/completions",
                              {"model": "kimi-k3", "messages": _image_msg(url), "max_tokens": 50})
    assert status == 400 and body["error"]["message"].startswith("At most 0 vision_chunk(s) may be provided")
    assert request(servers["ports"]["lmo"], "/v1/chat/completions", chat())[0] == 200


def test_max_model_len_and_unknown_model(servers):
    port = servers["ports"]["full"]
    status, body, _ = request(port, "/v1/chat/completions", chat(max_tokens=5000))
    assert status == 400
    n = request(port, "/v1/chat/completions", chat(max_tokens=1))[1]["usage"]["prompt_tokens"]
    assert body["error"]["message"] == (f"'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's "
                                        f"maximum context length is 4096 tokens and your request has {n} input "
                                        f"tokens (5000 > 4096 - {n}).")
    status, body, _ = request(port, "/v1/chat/completions", dict(chat(), model="nope"))
    assert status == 404 and body["error"]["message"] == "The model `nope` does not exist."


def test_api_key_guards_v1_only(servers):
    port = servers["ports"]["key"]
    assert request(port, "/v1/models") == (401, {"error": "Unauthorized"}, request(port, "/v1/models")[2])
    assert request(port, "/v1/chat/completions", chat())[0] == 401
    assert request(port, "/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert request(port, "/metrics")[0] == 200 and request(port, "/health")[0] == 200


def test_completions_endpoint(servers):
    status, body, _ = request(servers["ports"]["full"], "/v1/completions",
                              {"model": "kimi-k3", "prompt": "The future of AI is", "max_tokens": 8})
    assert status == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 8
    text = request(servers["ports"]["full"], "/v1/completions",
                   {"model": "kimi-k3", "prompt": "The future of AI is", "max_tokens": 8, "stream": True})[1]
    events = sse(text)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"


def test_prefix_cache_counters_and_reset(servers):
    port = servers["ports"]["full"]
    long = "Shared prefix for caching. " * 40
    request(port, "/v1/chat/completions", chat(long + "first"))
    before = request(port, "/metrics")[1]
    q0 = metric(before, "vllm:prefix_cache_queries_total", engine="0", model_name="kimi-k3")
    h0 = metric(before, "vllm:prefix_cache_hits_total", engine="0", model_name="kimi-k3")
    body = request(port, "/v1/chat/completions", chat(long + "second"))[1]
    after = request(port, "/metrics")[1]
    hits = metric(after, "vllm:prefix_cache_hits_total", engine="0") - h0
    assert hits > 0 and hits % 16 == 0
    assert metric(after, "vllm:prefix_cache_queries_total", engine="0") - q0 == body["usage"]["prompt_tokens"]
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": int(hits)}
    assert "vllm:external_prefix_cache_queries_total" in after  # registered, not incremented without a connector
    assert metric(after, "vllm:request_success_total", engine="0", finished_reason="stop") >= 1
    for name in ("vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        metric(after, name, engine="0", model_name="kimi-k3")
    assert request(port, "/reset_prefix_cache", body={}, method="POST")[0] == 200
    h1 = metric(request(port, "/metrics")[1], "vllm:prefix_cache_hits_total", engine="0")
    request(port, "/v1/chat/completions", chat(long + "third"))
    assert metric(request(port, "/metrics")[1], "vllm:prefix_cache_hits_total", engine="0") == h1
    assert request(servers["ports"]["raw"], "/reset_prefix_cache", body={}, method="POST")[0] == 404  # dev mode only
    servers["procs"]["full"].wait_output("Engine 000: Avg prompt throughput: ")
    assert "Prefix cache hit rate: " in servers["procs"]["full"].out
    assert "External prefix cache hit rate" not in servers["procs"]["full"].out  # no connector configured


def test_disable_log_stats_has_no_engine_metrics(servers):
    port = servers["ports"]["nostats"]
    assert request(port, "/v1/chat/completions", chat())[0] == 200
    status, text, hdrs = request(port, "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    assert "vllm:" not in text and "process_" in text or "python_" in text
