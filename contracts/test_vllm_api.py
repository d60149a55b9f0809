"""vLLM contracts on a running ``vllm serve`` stand-in (Mooncake consumer, kimi_k3 parsers):

* metrics: every ``vllm:`` family on ``/metrics`` is defined in the wheel's
  ``vllm/v1/metrics/loggers.py`` with the same type and HELP text, and carries the
  ``model_name``/``engine`` labels;
* responses: every key of a chat (plain, tool call, streamed) and completion (plain, streamed)
  response is a field of the wheel's OpenAI protocol model at that place, and every required
  field is present (``contracts/wheel.py`` reads the models with ``ast``).
"""
from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts import wheel as w
from tests.standins._standin import Proc
from tests.standins._vllm import VLLM, chat, env, free_port, model_dir, request, sse, wait_ready

PD = {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engine")
    port = free_port()
    kv = json.dumps({"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_consumer", "kv_port": str(free_port()),
                     "engine_id": "d0", "kv_connector_extra_config": PD})
    argv = ["serve", str(model_dir(tmp)), "--served-model-name", "kimi-k3", "--port", str(port), "--max-model-len",
            "8192", "--kv-transfer-config", kv, "--enable-auto-tool-choice", "--reasoning-parser", "kimi_k3",
            "--tool-call-parser", "kimi_k3", "--enable-prompt-tokens-details"]
    proc = Proc(VLLM + argv, env(tmp, "engine"), tmp / "proc")
    try:
        wait_ready(proc, port)
        request(port, "/v1/chat/completions", chat("warm up"))  # histograms and counters get samples
        yield port
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def models(wheel):
    return w.protocol_models(wheel)


# ------------------------------------------------------------------------------------ metrics


def metric_drift(defs: dict[str, tuple[str, str | None]], text: str) -> list[str]:
    problems = []
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        if fam.name.endswith("_created") and fam.name[:-len("_created")] in defs:
            continue  # prometheus_client's creation-time gauge of a counter/histogram, as vLLM's own
        if fam.name not in defs:
            problems.append(f"{fam.name}: not defined in vLLM's loggers.py")
            continue
        kind, doc = defs[fam.name]
        if fam.type != kind:
            problems.append(f"{fam.name}: stand-in {fam.type}, vLLM {kind}")
        if doc is not None and fam.documentation != doc:
            problems.append(f"{fam.name}: HELP {fam.documentation!r}, vLLM {doc!r}")
        # info gauges carry their config's fields and the engine, no model name (log_metrics_info)
        need = {"engine"} if fam.name.endswith("_info") else {"model_name", "engine"}
        for sample in fam.samples:
            if not need <= set(sample.labels):
                problems.append(f"{sample.name}: labels {sorted(sample.labels)} lack {'/'.join(sorted(need))}")
                break
    return problems


def test_metric_names_types_and_help_match(wheel, engine):
    defs = w.metric_defs(wheel)
    assert {"vllm:prefix_cache_queries", "vllm:external_prefix_cache_hits"} <= set(defs)
    text = request(engine, "/metrics")[1]
    assert not metric_drift(defs, text)
    assert "vllm:external_prefix_cache_hits_total" in text  # the series the external-cache checks read
    assert "vllm:cache_config_info" in defs and "vllm:cache_config_info" in text  # the local cache's size


def test_cache_config_info_labels_are_the_wheels_cache_config_fields(wheel, engine):
    """The stand-in's labels are CacheConfig.metrics_info() of the real wheel: every field, no other."""
    [sample] = [s for fam in text_string_to_metric_families(request(engine, "/metrics")[1])
                for s in fam.samples if s.name == "vllm:cache_config_info"]
    want = w.dataclass_fields(wheel, "vllm/config/cache.py", "CacheConfig")
    assert sorted(k for k in sample.labels if k != "engine") == sorted(want)


def test_drift_renamed_metric_fails(wheel, engine):
    text = request(engine, "/metrics")[1].replace("vllm:external_prefix_cache_hits", "vllm:external_cache_hits")
    assert "vllm:external_cache_hits: not defined in vLLM's loggers.py" in metric_drift(w.metric_defs(wheel), text)


# ---------------------------------------------------------------------------------- responses


def test_chat_response_fields(models, engine):
    status, body, _ = request(engine, "/v1/chat/completions", chat("Explain data parallelism."))
    assert status == 200, body
    assert body["choices"][0]["message"].get("reasoning")
    assert not w.field_drift(models, "ChatCompletionResponse", body, "chat")


def test_tool_call_response_fields(models, engine):
    status, body, _ = request(engine, "/v1/chat/completions",
                              chat("Weather in Paris?", tools=TOOLS, tool_choice="auto", max_tokens=512))
    assert status == 200, body
    assert body["choices"][0]["message"]["tool_calls"]
    assert not w.field_drift(models, "ChatCompletionResponse", body, "chat")


def test_chat_stream_chunk_fields(models, engine):
    body = chat("Say hello.", stream=True, stream_options={"include_usage": True})
    status, text, _ = request(engine, "/v1/chat/completions", body)
    assert status == 200
    chunks = [e for e in sse(text) if e != "[DONE]"]
    assert chunks
    problems = [p for i, c in enumerate(chunks) for p in w.field_drift(models, "ChatCompletionStreamResponse", c,
                                                                        f"chunk[{i}]")]
    assert not problems


def test_completion_response_fields(models, engine):
    status, body, _ = request(engine, "/v1/completions", {"model": "kimi-k3", "prompt": "hello", "max_tokens": 8})
    assert status == 200, body
    assert not w.field_drift(models, "CompletionResponse", body, "completion")


def test_completion_stream_chunk_fields(models, engine):
    status, text, _ = request(engine, "/v1/completions", {"model": "kimi-k3", "prompt": "hello", "max_tokens": 8,
                                                           "stream": True})
    assert status == 200
    chunks = [e for e in sse(text) if e != "[DONE]"]
    problems = [p for i, c in enumerate(chunks) for p in w.field_drift(models, "CompletionStreamResponse", c,
                                                                        f"chunk[{i}]")]
    assert not problems


def test_drift_extra_response_field_fails(models, engine):
    _, body, _ = request(engine, "/v1/chat/completions", chat("Explain data parallelism."))
    body["choices"][0]["message"]["reasoning_content"] = body["choices"][0]["message"]["reasoning"]  # pre-0.16 name
    assert w.field_drift(models, "ChatCompletionResponse", body, "chat") == [
        "chat.choices[0].message.reasoning_content: not a field of vLLM's ChatMessage"]
