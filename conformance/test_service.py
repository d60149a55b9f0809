"""Models, limits, parsers, images and caches through the service entrypoint and each API."""
from __future__ import annotations

import base64
import io
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conformance.plugin import conformance

MARKERS = ("<think>", "</think>", "<|open|>", "<|sep|>", "<|close|>", "<|tool_calls_section_begin|>")


KIND = "product"  # default class of a failure here


@conformance(area="models", must="/health MUST answer 200 on every API.")
def test_health(api, http):
    r = http.get(f"{api.url}/health", timeout=5)
    assert r.status_code == 200, f"{api.node}: /health answered {r.status_code}"


@conformance(area="models", must="/v1/models MUST list the served name with the planned max_model_len.")
def test_models_lists_served_name_and_limit(api, http, plan):
    r = http.get(f"{api.url}/v1/models", timeout=5)
    assert r.status_code == 200, f"{api.node}: /v1/models answered {r.status_code}: {r.text[:200]}"
    models = {m["id"]: m for m in r.json()["data"]}
    assert plan.expect.served_name in models, f"{api.node}: serves {list(models)}, expected {plan.expect.served_name}"
    got = models[plan.expect.served_name].get("max_model_len")
    assert got == plan.expect.max_model_len, f"{api.node}: max_model_len {got}, planned {plan.expect.max_model_len}"


@conformance(area="models", must="The PD proxy MUST answer /healthcheck with status ok, count exactly the planned "
                                  "Prefill and Decode engines, and every counted engine MUST answer.")
def test_proxy_answers(plan, http):
    """Only what every proxy release has: /healthcheck (``/v1/models`` came after vllm-ascend 0.23).

    Its counts are the instances the proxy routes to; it does not probe them, so the engines it
    counts are asked for /health here: a stopped engine shows as counted but not answering.
    """
    if not plan.expect.proxy:
        pytest.skip("no proxy in this scenario")
    r = http.get(f"{plan.expect.proxy}/healthcheck", timeout=5)
    assert r.status_code == 200 and r.json().get("status") == "ok", f"proxy /healthcheck: {r.status_code} {r.text[:200]}"
    body = r.json()
    planned = plan.expect.proxy_instances
    counted = {role: body.get(f"{role}_instances") for role in planned}
    assert counted == planned, (f"the proxy counts {counted} instances, the plan has {planned} engines: check the "
                                "proxy's --prefiller-hosts/--decoder-hosts (or an /instances/remove)")
    down = []
    for api in plan.expect.apis:
        if api.role not in planned:
            continue
        try:
            ok = http.get(f"{api.url}/health", timeout=5).status_code == 200
        except OSError:
            ok = False
        if not ok:
            down.append(api)
    answering = {role: n - sum(a.role == role for a in down) for role, n in planned.items()}
    assert not down, (f"the proxy counts {counted} instances but only {answering} answer /health "
                      f"({', '.join(f'{a.role} {a.node} {a.url}' for a in down)}): requests routed there fail "
                      "or are retried on another engine; check those engines' logs")


def _chat(http, entrypoint, plan, **body):
    payload = {"model": plan.expect.served_name, "max_tokens": 64, "temperature": 0} | body
    return http.post(f"{entrypoint}/v1/chat/completions", json=payload, timeout=60)


def _needs_parsers(plan):
    if not plan.expect.parsers:
        pytest.skip("rendered with parsers=off: the service returns raw model output by design")


@conformance(area="parsers", must="Content MUST be free of reasoning/tool markers and reasoning MUST be non-empty with thinking on.")
def test_reasoning_is_parsed(http, entrypoint, plan):
    _needs_parsers(plan)
    r = _chat(http, entrypoint, plan, messages=[{"role": "user", "content": "Explain data parallelism in one sentence."}])
    assert r.status_code == 200, f"chat: {r.status_code} {r.text[:300]}"
    msg = r.json()["choices"][0]["message"]
    content = msg.get("content") or ""
    leaked = [m for m in MARKERS if m in content]
    assert not leaked, f"content leaks {leaked}: the reasoning parser is missing or differs between engines"
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    assert reasoning, "no reasoning field with thinking on: check --reasoning-parser kimi_k3 on every engine"


@conformance(area="parsers", must="tool_choice auto with a schema MUST return tool_calls whose arguments satisfy it.")
def test_tool_call(http, entrypoint, plan):
    _needs_parsers(plan)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
              "required": ["city", "days"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "forecast", "parameters": schema}}]
    r = _chat(http, entrypoint, plan, messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
              tools=tools, tool_choice="auto", max_tokens=1024)
    assert r.status_code == 200, f"tool call: {r.status_code} {r.text[:300]} (check --enable-auto-tool-choice)"
    choice = r.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    assert calls, f"no tool_calls; finish_reason {choice.get('finish_reason')}; check --tool-call-parser kimi_k3"
    args = json.loads(calls[0]["function"]["arguments"])
    assert set(schema["required"]) <= set(args), f"tool arguments {args} miss required {schema['required']}"
    assert choice["finish_reason"] == "tool_calls"


@conformance(area="parsers", must="Streamed content MUST be free of reasoning/tool markers.")
def test_streaming_content_is_clean(http, entrypoint, plan):
    _needs_parsers(plan)
    payload = {"model": plan.expect.served_name, "max_tokens": 48, "temperature": 0, "stream": True,
               "messages": [{"role": "user", "content": "Say hello."}]}
    with http.post(f"{entrypoint}/v1/chat/completions", json=payload, stream=True, timeout=60) as r:
        assert r.status_code == 200, f"stream: {r.status_code}"
        content, reasoning, errors = "", "", []
        for line in r.iter_lines(decode_unicode=True):
            if not line or not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:  # vLLM reports a failure after the 200 as an error event in the stream
                errors.append(chunk["error"])
                continue
            delta = chunk["choices"][0].get("delta", {})
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning") or delta.get("reasoning_content") or ""
    assert not errors, f"the stream carried error events: {errors[:2]}"
    assert content or reasoning, "the stream produced no content and no reasoning"
    assert not [m for m in MARKERS if m in content], f"streamed content leaks markers: {content[:200]!r}"


def _png(rgb) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), rgb).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@conformance(area="images", must="An image request MUST be answered with a description naming its colour (rejected on language-model-only).")
def test_image_request(http, entrypoint, plan):
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _png((220, 20, 30))}},
                                             {"type": "text", "text": "Describe the image."}]}]
    r = _chat(http, entrypoint, plan, messages=messages, max_tokens=128)
    if plan.expect.language_model_only:
        assert r.status_code == 400, f"language-model-only service accepted an image ({r.status_code})"
        return
    assert r.status_code == 200, f"image request: {r.status_code} {r.text[:300]}"
    text = (r.json()["choices"][0]["message"].get("content") or "").lower()
    assert "red" in text, f"the description does not name the image's colour (red): {text[:200]!r}"


@conformance(area="limits", must="Each API MUST reject prompt + max_tokens over max_model_len with 400 and accept a request within it.")
def test_max_model_len_enforced(api, http, plan):
    """On each API (the PD proxy has already answered 200 when the decode leg rejects a request)."""
    body = {"model": plan.expect.served_name, "prompt": "hi"}
    over = http.post(f"{api.url}/v1/completions", timeout=60, json=body | {"max_tokens": plan.expect.max_model_len})
    assert over.status_code == 400, \
        f"{api.node}: prompt + max_tokens over max_model_len {plan.expect.max_model_len} got {over.status_code}"
    assert "max" in over.json().get("error", {}).get("message", over.text).lower()
    within = http.post(f"{api.url}/v1/completions", timeout=60, json=body | {"max_tokens": 16})
    assert within.status_code == 200, f"{api.node}: a request within the limit got {within.status_code}: {within.text[:200]}"


@conformance(area="dp-routing", must="X-data-parallel-rank MUST pin a request to each rank and 400 an out-of-range rank.")
def test_dp_rank_routing(http, plan):
    if not plan.expect.dp_routing:
        pytest.skip("X-data-parallel-rank applies to the internal-LB mixed services")
    api = plan.expect.apis[0]
    for rank in api.dp_ranks:
        r = http.post(f"{api.url}/v1/completions", headers={"X-data-parallel-rank": str(rank)}, timeout=60,
                      json={"model": plan.expect.served_name, "prompt": "ping", "max_tokens": 4})
        assert r.status_code == 200, f"rank {rank}: {r.status_code} {r.text[:200]}"
    r = http.post(f"{api.url}/v1/completions", headers={"X-data-parallel-rank": str(len(api.dp_ranks))}, timeout=60,
                  json={"model": plan.expect.served_name, "prompt": "ping", "max_tokens": 4})
    assert r.status_code == 400, f"an out-of-range DP rank got {r.status_code}, expected 400"


def _counter(text: str, name: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                total += s.value
    return total


def _external(http, plan, apis=None) -> tuple[float, float]:
    q = h = 0.0
    for api in apis or plan.expect.apis:
        text = http.get(f"{api.url}/metrics", timeout=5).text
        q += _counter(text, "vllm:external_prefix_cache_queries_total")
        h += _counter(text, "vllm:external_prefix_cache_hits_total")
    return q, h


@conformance(area="external-cache", must="External prefix cache hits MUST rise on a repeated long prefix, with identical output at temperature 0.")
def test_external_cache_hits_on_repeated_prefix(http, entrypoint, plan):
    if not plan.expect.kv_connector:
        pytest.skip("no KV connector: external prefix cache does not apply")
    prefix = " ".join(f"clause{i} of the shared contract" for i in range(300))
    body = {"model": plan.expect.served_name, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": prefix + " Summarise."}]}
    first = http.post(f"{entrypoint}/v1/chat/completions", json=body, timeout=120)
    assert first.status_code == 200, f"first request: {first.status_code} {first.text[:200]}"
    _, hits_before = _external(http, plan)
    second = http.post(f"{entrypoint}/v1/chat/completions", json=body, timeout=120)
    assert second.status_code == 200, f"second request: {second.status_code}"
    _, hits_after = _external(http, plan)
    assert hits_after > hits_before, ("external prefix cache hits did not rise on a repeated prefix: check "
                                      "PYTHONHASHSEED on every engine, the KV connector and the MemCache pool")
    assert first.json()["choices"][0]["message"] == second.json()["choices"][0]["message"], \
        "outputs at temperature 0 differ between identical requests"


def _pool_apis(plan):
    """APIs of producer engines on the MemCache pool (consumers do not load from it by default)."""
    out = []
    for api in plan.expect.apis:
        proc = next(p for p in plan.processes() if p.kind == "engine" and p.api == api.url)
        if "AscendStoreConnector" in " ".join(proc.argv) and api.role == "prefill":
            out.append(api)
    return out


def _meta_gauge(http, plan, name: str) -> float:
    text = http.get(f"{plan.expect.metaservice.metrics_url}/metrics", timeout=5).text
    return _counter(text, name)


@conformance(area="external-cache", must="A new long prompt MUST put blocks into the MemCache pool.")
def test_pool_stores_blocks(http, entrypoint, plan):
    """A new long prompt through the service puts its blocks into the MemCache pool."""
    if not plan.expect.external_pool:
        pytest.skip("no MemCache pool in this scenario")
    before = _meta_gauge(http, plan, "memcache_stored_keys")
    prompt = " ".join(f"store-check line {i} of a fresh document" for i in range(400))
    r = http.post(f"{entrypoint}/v1/completions", timeout=120,
                  json={"model": plan.expect.served_name, "prompt": prompt, "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, f"request: {r.status_code} {r.text[:200]}"
    after = _meta_gauge(http, plan, "memcache_stored_keys")
    assert after > before, ("the MetaService stored no new keys after a long prompt: the producer's "
                            "AscendStoreConnector is not saving to the pool (check MMC_LOCAL_CONFIG_PATH and pool capacity)")


@conformance(area="external-cache", must="Blocks stored by one pooled producer MUST be external hits on another.")
def test_pool_hits_across_engines(http, plan):
    """A prefix prefilled by one pooled engine is an external hit on another pooled engine.

    Local prefix caches cannot serve the second engine, so only the MemCache pool can: this
    fails when the pool is missing, a hash seed differs, or a client holds the wrong config.
    """
    if not plan.expect.external_pool:
        pytest.skip("no MemCache pool in this scenario")
    apis = _pool_apis(plan)
    first = apis[0]
    second = next((a for a in apis if a.node != first.node), None)
    if second is None:
        pytest.skip("only one pooled producer exposes an API (the PP Prefill group serves from P0)")
    prefix = " ".join(f"pool-check paragraph {i} about shared caches" for i in range(400))
    body = {"model": plan.expect.served_name, "prompt": prefix, "max_tokens": 4, "temperature": 0}
    r = http.post(f"{first.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, f"{first.node}: {r.status_code} {r.text[:200]}"
    _, before = _external(http, plan, [second])
    r = http.post(f"{second.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, f"{second.node}: {r.status_code} {r.text[:200]}"
    _, after = _external(http, plan, [second])
    assert after > before, (f"{second.node} found none of the blocks {first.node} stored in the MemCache pool: "
                            "check PYTHONHASHSEED on both, MMC_LOCAL_CONFIG_PATH and the MetaService")


@conformance(area="security", must="With an API key configured, every engine API MUST refuse requests without it.")
def test_api_key_enforced(api, plan):
    """With K3LAB_API_KEY set, every engine API refuses requests without it (the guides ship none)."""
    import os

    import requests

    key = os.environ.get("K3LAB_API_KEY")
    if not key:
        pytest.skip("no API key configured (K3LAB_API_KEY): every API is open, as the guides warn")
    bare = requests.Session()
    bare.trust_env = False
    r = bare.get(f"{api.url}/v1/models", timeout=5)
    assert r.status_code == 401, f"{api.node}: /v1/models without a key answered {r.status_code}"
    r = bare.get(f"{api.url}/v1/models", timeout=5, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, f"{api.node}: /v1/models with the key answered {r.status_code}"


@conformance(area="parsers", must="The official openai client MUST parse chat, reasoning and tool-call responses.")
def test_openai_client_parses_responses(entrypoint, plan):
    """Schema drift shows up as a parse error in a real client, not in our own JSON handling."""
    import os

    import httpx
    import openai

    _needs_parsers(plan)
    client = openai.OpenAI(base_url=f"{entrypoint}/v1", api_key=os.environ.get("K3LAB_API_KEY") or "EMPTY",
                           http_client=httpx.Client(trust_env=False, timeout=60), max_retries=0)
    chat = client.chat.completions.create(model=plan.expect.served_name, max_tokens=64, temperature=0,
                                          messages=[{"role": "user", "content": "Name one prime number."}])
    message = chat.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning") or (message.model_extra or {}).get("reasoning_content")
    assert reasoning, "openai client sees no reasoning field: check --reasoning-parser kimi_k3"
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"term": {"type": "string"}}, "required": ["term"]}}}]
    call = client.chat.completions.create(model=plan.expect.served_name, max_tokens=1024, temperature=0, tools=tools,
                                          tool_choice="auto", messages=[{"role": "user", "content": "Look up NPU."}])
    calls = call.choices[0].message.tool_calls or []
    assert calls and json.loads(calls[0].function.arguments).get("term") is not None, \
        f"openai client parsed no usable tool call: {call.choices[0].message}"
