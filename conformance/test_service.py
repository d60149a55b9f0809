"""Models, limits, parsers, images and caches through the service entrypoint and each API."""
from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import io
import json
import time
import uuid
from typing import Any

import jsonschema
import pytest

from k3lab import waits
from k3lab.conform import eviction
from k3lab.conform.evidence import check, fail
from k3lab.conform.plugin import skip
from k3lab.launch import metrics
from k3lab.model import apikey


@pytest.fixture(autouse=True)
def _one_request_check_at_a_time(run_dir):
    """The request checks compare per-engine counters before and after their own requests, so
    they run one at a time across xdist workers: no other check's request moves those counters."""
    import fcntl

    with open(run_dir / ".service-requests.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield

# One nonce per suite run: prompts that must be new to the caches stay new on a kept deployment.
RUN_NONCE = uuid.uuid4().hex[:12]

MARKERS = ("<think>", "</think>", "<|open|>", "<|sep|>", "<|close|>", "<|tool_calls_section_begin|>")


KIND = "product"  # default class of a failure here


@pytest.mark.conformance(
    id="models.test_health", area="models",
    must="/health MUST answer 200 on every API.",
    remedy="read the engine's log (runs/<run>/logs) for why /health does not answer 200; k3lab triage RUN names known causes.")
def test_health(api, http):
    r = http.get(f"{api.url}/health", timeout=5)
    assert r.status_code == 200, f"{api.node}: /health answered {r.status_code}"


@pytest.mark.conformance(
    id="models.test_models_lists_served_name_and_limit", area="models",
    must="/v1/models MUST list the served name with the planned max_model_len.",
    remedy="start every engine with the plan's --served-model-name and --max-model-len (re-render; do not edit the scripts on the node).")
def test_models_lists_served_name_and_limit(api, http, plan):
    r = http.get(f"{api.url}/v1/models", timeout=5)
    assert r.status_code == 200, f"{api.node}: /v1/models answered {r.status_code}: {r.text[:200]}"
    models = {m["id"]: m for m in r.json()["data"]}
    assert plan.expect.served_name in models, f"{api.node}: serves {list(models)}, expected {plan.expect.served_name}"
    got = models[plan.expect.served_name].get("max_model_len")
    assert got == plan.expect.max_model_len, f"{api.node}: max_model_len {got}, planned {plan.expect.max_model_len}"


@pytest.mark.conformance(
    id="models.test_proxy_answers", area="models",
    must="The PD proxy MUST answer /healthcheck with status ok, count exactly the planned Prefill and Decode engines, and every counted engine MUST answer.",
    remedy="start every Prefill and Decode engine the proxy lists, and the proxy with exactly the planned hosts and ports.")
def test_proxy_answers(plan, http):
    """Only what every proxy release has: /healthcheck (``/v1/models`` came after vllm-ascend 0.23).

    Its counts are the instances the proxy routes to; it does not probe them, so the engines it
    counts are asked for /health here: a stopped engine shows as counted but not answering.
    """
    if not plan.expect.proxy:
        skip("no-proxy", "no proxy in this scenario")
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
        skip("parsers-off", "rendered with parsers=off: the service returns raw model output by design")


@pytest.mark.conformance(
    id="parsers.test_reasoning_is_parsed", area="parsers",
    must="Content MUST be free of reasoning/tool markers and reasoning MUST be non-empty with thinking on.",
    remedy="start the engines with the guide's --reasoning-parser and --tool-call-parser (kimi_k3) and --enable-auto-tool-choice.")
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


# Two tools whose schemas use patterns, bounds, enums, nested objects and every JSON type: the
# model must pick the one the question is about and fill its arguments to fit its schema.
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather forecast for a city over the coming days",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days", "unit"],
                       "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 40},
                                      "days": {"type": "integer", "minimum": 1, "maximum": 16},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                      "hourly": {"type": "boolean"}}}}},
    {"type": "function", "function": {
        "name": "locate_rack", "description": "Find the data-centre rack that holds a server node",
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": ["rack", "slot", "position", "tags", "load", "spare", "owner"],
                       "properties": {
                           "rack": {"type": "string", "pattern": "^R[0-9]{2}$"},
                           "slot": {"type": "integer", "minimum": 1, "maximum": 42, "multipleOf": 2},
                           "position": {"type": "object", "additionalProperties": False, "required": ["hall", "row"],
                                        "properties": {"hall": {"type": "string", "enum": ["north", "south"]},
                                                       "row": {"type": "integer", "exclusiveMinimum": 0}}},
                           "tags": {"type": "array", "minItems": 2, "uniqueItems": True,
                                    "items": {"type": "string", "pattern": "^[a-z]+-[0-9]$"}},
                           "load": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                           "spare": {"type": "boolean"},
                           "owner": {"type": ["string", "null"], "maxLength": 16}}}}},
]
TOOL_QUESTIONS = {"get_weather": "What is the weather forecast in Paris for the next 3 days?",
                  "locate_rack": "Which rack holds the server node p3?"}


def _tool_schema(name: str) -> dict:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def _tool_problem(http, entrypoint, plan, want: str) -> str | None:
    r = _chat(http, entrypoint, plan, messages=[{"role": "user", "content": TOOL_QUESTIONS[want]}],
              tools=TOOLS, tool_choice="auto", max_tokens=1024)
    if r.status_code != 200:
        return f"tool call: {r.status_code} {r.text[:300]} (check --enable-auto-tool-choice)"
    choice = r.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    if not calls:
        return f"no tool_calls; finish_reason {choice.get('finish_reason')}; check --tool-call-parser kimi_k3"
    fn = calls[0]["function"]
    if fn["name"] != want:
        return (f"asked {TOOL_QUESTIONS[want]!r} with tools {[t['function']['name'] for t in TOOLS]}: expected a "
                f"call to {want}, got {fn['name']}; check the chat template and the tool parser")
    try:
        args = json.loads(fn["arguments"])
    except ValueError as exc:
        return f"{want} arguments are not JSON ({exc}): {fn['arguments'][:200]!r}"
    errors = sorted(jsonschema.Draft202012Validator(_tool_schema(want)).iter_errors(args), key=lambda e: list(e.path))
    if errors:
        return (f"{want} arguments {args} break the request's schema: "
                + "; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:3])
                + " (check --tool-call-parser kimi_k3: argument types are lost in parsing)")
    if choice["finish_reason"] != "tool_calls":
        return f"{want}: finish_reason {choice['finish_reason']}, expected tool_calls"
    return None


@pytest.mark.conformance(
    id="parsers.test_tool_call", area="parsers",
    must="tool_choice auto MUST call the tool the question is about, with arguments valid against that tool's own JSON schema.",
    remedy="start the engines with --enable-auto-tool-choice and the guide's --tool-call-parser; check the chat template the checkpoint ships.")
def test_tool_call(http, entrypoint, plan):
    _needs_parsers(plan)
    problems = [p for want in sorted(TOOL_QUESTIONS) if (p := _tool_problem(http, entrypoint, plan, want))]
    assert not problems, "; ".join(problems)


@pytest.mark.conformance(
    id="parsers.test_tool_call_not_forced", area="parsers",
    must="With tools offered, a question unrelated to them MUST be answered without a call.",
    remedy="serve with tool_choice auto as the guide does (no forced tool choice in the template or the engine's defaults).")
def test_tool_call_not_forced(http, entrypoint, plan):
    """Negative control of test_tool_call: a service that calls a tool whatever is asked fails here."""
    _needs_parsers(plan)
    question = "What is the capital of France?"
    r = _chat(http, entrypoint, plan, messages=[{"role": "user", "content": question}], tools=TOOLS,
              tool_choice="auto", max_tokens=256)
    assert r.status_code == 200, f"chat with tools: {r.status_code} {r.text[:300]}"
    choice = r.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    assert not calls, (f"asked {question!r} with unrelated tools, the service called "
                       f"{[c['function']['name'] for c in calls]}: expected a plain answer (tool_choice auto)")
    assert choice["message"].get("content"), f"no content and no call; finish_reason {choice.get('finish_reason')}"
    assert choice["finish_reason"] == "stop", f"finish_reason {choice['finish_reason']}, expected stop"


@pytest.mark.conformance(
    id="parsers.test_streaming_content_is_clean", area="parsers",
    must="Streamed content MUST be free of reasoning/tool markers.",
    remedy="start the engines with the guide's reasoning and tool-call parsers; the same parsers serve streamed responses.")
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


@pytest.mark.conformance(
    id="images.test_image_request", area="images",
    must="An image request MUST be answered with a description naming its colour (rejected on language-model-only).",
    remedy="serve the multimodal checkpoint without --language-model-only on every engine of the request path (Decode included under PD).")
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


@pytest.mark.conformance(
    id="limits.test_max_model_len_enforced", area="limits",
    must="Each API MUST reject prompt + max_tokens over max_model_len with 400 and accept a request within it.",
    remedy="start every engine with the plan's --max-model-len (one value on every engine).")
def test_max_model_len_enforced(api, http, plan):
    """On each API (the PD proxy has already answered 200 when the decode leg rejects a request)."""
    body = {"model": plan.expect.served_name, "prompt": "hi"}
    over = http.post(f"{api.url}/v1/completions", timeout=60, json=body | {"max_tokens": plan.expect.max_model_len})
    assert over.status_code == 400, \
        f"{api.node}: prompt + max_tokens over max_model_len {plan.expect.max_model_len} got {over.status_code}"
    assert "max" in over.json().get("error", {}).get("message", over.text).lower()
    within = http.post(f"{api.url}/v1/completions", timeout=60, json=body | {"max_tokens": 16})
    assert within.status_code == 200, f"{api.node}: a request within the limit got {within.status_code}: {within.text[:200]}"


def _counter(text: str, name: str, **labels: str) -> float:
    return metrics.total(text, name, **labels)


def _metrics(http, api) -> str:
    __tracebackhide__ = True  # a failed request shows the check that made it
    r = http.get(f"{api.url}/metrics", timeout=5)
    assert r.status_code == 200, f"{api.node} ({api.url}): /metrics answered {r.status_code}"
    return r.text


def _served(http, api) -> dict[str, float]:
    """Finished requests per engine (the ``engine`` label, the global DP rank) on one API's /metrics."""
    return metrics.by_label(_metrics(http, api), "vllm:request_success_total", "engine")


def _settled(http, apis, timeout: float = 5.0) -> dict[str, dict[str, float]]:
    """Counters of every API once they stop moving: an engine counts a request when its output
    loop finishes it, which can be just after the client has its response."""
    seen = [{a.url: _served(http, a) for a in apis}]

    def still() -> bool:
        time.sleep(0.3)  # a counter that has not moved for this long has settled
        seen.append({a.url: _served(http, a) for a in apis})
        return seen[-1] == seen[-2]

    waits.poll(still, timeout, 0)
    return seen[-1]


def _moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(before) | set(after)
            if after.get(k, 0.0) != before.get(k, 0.0)}


def _prompt(tag: str, lines: int = 300) -> str:
    """A long prompt new to every cache: the run nonce and the tag lead it (block hashes chain)."""
    return f"[{RUN_NONCE} {tag}] " + " ".join(f"{tag} line {i} of a fresh document" for i in range(lines))


@pytest.mark.conformance(
    id="dp-routing.test_dp_rank_routing", area="dp-routing",
    must="X-data-parallel-rank MUST pin a request to that rank (only its engine counts it) and 400 an out-of-range rank.",
    remedy="run the mixed service's head API with internal load balancing as the guide starts it (launch_online_dp.py), so it honours X-data-parallel-rank.")
def test_dp_rank_routing(http, plan):
    if not plan.expect.dp_routing:
        skip("not-internal-lb", "X-data-parallel-rank applies to the internal-LB mixed services")
    api = plan.expect.apis[0]
    wrong = []
    # two requests per rank, ranks in reverse: neither a round-robin nor a lowest-rank balancer can
    # pass for the header by chance
    for rank in reversed(api.dp_ranks):
        before = _settled(http, [api])[api.url]
        for _ in range(2):
            r = http.post(f"{api.url}/v1/completions", headers={"X-data-parallel-rank": str(rank)}, timeout=60,
                          json={"model": plan.expect.served_name, "prompt": f"ping {RUN_NONCE}", "max_tokens": 4})
            assert r.status_code == 200, f"{api.node}: rank {rank}: {r.status_code} {r.text[:200]}"
        moved = _moved(before, _settled(http, [api])[api.url])
        if moved != {str(rank): 2.0}:
            wrong.append(f"pinned to rank {rank}, vllm:request_success_total moved on engines {moved or 'none'}")
    assert not wrong, (f"{api.node} ({api.url}): " + "; ".join(wrong) + ": the header does not pin requests (check "
                       "that every rank's engine joined the DP group and that the API is the internal-LB head)")
    r = http.post(f"{api.url}/v1/completions", headers={"X-data-parallel-rank": str(len(api.dp_ranks))}, timeout=60,
                  json={"model": plan.expect.served_name, "prompt": "ping", "max_tokens": 4})
    assert r.status_code == 400, f"an out-of-range DP rank got {r.status_code}, expected 400"


@pytest.mark.conformance(
    id="request-paths.test_every_api_engine_serves", area="request-paths",
    must="Every API engine MUST serve a request sent to it, shown by its own vllm:request_success_total and by no other engine's.",
    remedy="check the named engine's log and its DP rank's network path; every planned engine must take requests.")
def test_every_api_engine_serves(http, plan):
    """Each engine API (and each DP rank behind an internal-LB API) is asked directly, and the engine
    that answered must be the one whose counter moved: a request the proxy retried elsewhere, or
    served by a process that is not the planned engine, does not pass."""
    bad = []
    settled = None  # the counters after one API's requests are those before the next one's
    for api in plan.expect.apis:
        # ranks in reverse, two requests each (see test_dp_rank_routing)
        ranks = list(reversed(api.dp_ranks)) if plan.expect.dp_routing and len(api.dp_ranks) > 1 else [None]
        for rank in ranks:
            problem, settled = _served_by_itself(http, plan, api, rank, settled)
            if problem:
                bad.append(problem)
    assert not bad, "; ".join(bad) + " (check the engine logs and that each API fronts its planned engine)"


def _served_by_itself(http, plan, api, rank: int | None, before) -> tuple[str | None, dict | None]:
    """Two requests to ``api`` (pinned to ``rank``): (None when its own engine (rank) counted both and
    no other engine moved, else what went wrong; the settled counters after, or None when unknown).
    ``before``: the settled counters, or None to read them (the whole deployment, O(APIs) scrapes)."""
    headers = {"X-data-parallel-rank": str(rank)} if rank is not None else {}
    before = before or _settled(http, plan.expect.apis)
    try:
        replies = [http.post(f"{api.url}/v1/completions", headers=headers, timeout=60,
                             json={"model": plan.expect.served_name, "prompt": f"path {RUN_NONCE} {api.node}",
                                   "max_tokens": 4}) for _ in range(2)]
    except OSError as exc:
        return f"{api.node} ({api.url}): unreachable from the kit host: {exc}", None
    if any(r.status_code != 200 for r in replies):
        return f"{api.node} ({api.url}): {[r.status_code for r in replies]} {replies[-1].text[:120]}", None
    after = _settled(http, plan.expect.apis)
    return _counted_by_itself(plan, api, rank, before, after), after


def _counted_by_itself(plan, api, rank: int | None, before, after) -> str | None:
    moved = {a.node: m for a in plan.expect.apis if (m := _moved(before[a.url], after[a.url]))}
    own = moved.pop(api.node, {})
    pinned = rank if rank is not None else (api.dp_ranks[0] if len(api.dp_ranks) == 1 else None)
    ok_own = own == {str(pinned): 2.0} if pinned is not None else sum(own.values()) == 2.0
    if ok_own and not moved:
        return None
    return (f"{api.node} ({api.url}{f', rank {rank}' if rank is not None else ''}): expected its own "
            f"engine to count 2 requests, counters moved: own {own or 'none'}, others {moved or 'none'}")


def _pd_pairs(plan):
    prefill = [a for a in plan.expect.apis if a.role == "prefill"]
    decode = [a for a in plan.expect.apis if a.role == "decode"]
    return prefill, decode


@pytest.mark.conformance(
    id="request-paths.test_decode_pulls_kv_from_every_prefill", area="request-paths",
    must="Every Decode engine MUST pull KV from every Prefill engine it is paired with (its external hits rise by the whole prompt, as vllm-ascend counts).",
    remedy="check the named Decode/Prefill pair: KV connector config, KV ports and the path between the nodes (Mooncake handshake).")
def test_decode_pulls_kv_from_every_prefill(http, plan):
    """The proxy's own protocol, pair by pair: Prefill with ``do_remote_decode``, then Decode with the
    returned ``kv_transfer_params``. The proxy would retry a failed pair on another engine; here each
    pair must work, and a failure names both ends."""
    prefill, decode = _pd_pairs(plan)
    if not prefill or not decode:
        skip("not-pd", "no Prefill/Decode engines: KV transfer does not apply")
    model = plan.expect.served_name
    bad = []
    for p in prefill:
        for d in decode:
            prompt = _prompt(f"pull {p.node}->{d.node}", 40)
            body = {"model": model, "prompt": prompt, "temperature": 0}
            try:
                r = http.post(f"{p.url}/v1/completions", timeout=60, json=body | {
                    "max_tokens": 1, "min_tokens": 1, "stream": False,
                    "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False,
                                           "remote_engine_id": None, "remote_block_ids": None,
                                           "remote_host": None, "remote_port": None}})
            except OSError as exc:
                bad.append(f"Prefill {p.node} ({p.url}) unreachable: {exc}")
                continue
            if r.status_code != 200 or not r.json().get("kv_transfer_params"):
                bad.append(f"Prefill {p.node}: {r.status_code}, no kv_transfer_params for Decode {d.node}: "
                           f"{r.text[:120]}")
                continue
            params = r.json()["kv_transfer_params"]
            tokens = r.json().get("usage", {}).get("prompt_tokens", 0)
            before = _counter(_metrics(http, d), "vllm:external_prefix_cache_hits_total")
            try:
                r = http.post(f"{d.url}/v1/completions", timeout=60,
                              json=body | {"max_tokens": 4, "kv_transfer_params": params})
            except OSError as exc:
                bad.append(f"Decode {d.node} ({d.url}) unreachable: {exc}")
                continue
            hits = _counter(_metrics(http, d), "vllm:external_prefix_cache_hits_total") - before
            if r.status_code != 200 or hits < tokens:
                bad.append(f"Decode {d.node} did not pull KV from Prefill {p.node} ({params.get('remote_host')}:"
                           f"{params.get('remote_port')}): HTTP {r.status_code}, external hits +{hits:.0f}, "
                           f"expected +{tokens} {r.text[:120] if r.status_code != 200 else ''}")
    assert not bad, "; ".join(bad) + (" (check the Mooncake kv_port ranges are reachable between those nodes, the "
                                      "connector sizes and engine ids, and the engine logs)")


@pytest.mark.conformance(
    id="request-paths.test_proxy_reaches_every_engine", area="request-paths",
    must="Concurrent requests through the proxy MUST reach every Prefill and Decode engine it routes to, each shown by its own counters.",
    remedy="start the proxy with every planned Prefill and Decode host and port; check the named engine answers.")
def test_proxy_reaches_every_engine(http, plan):
    """The real proxy sends one request at a time to the least-loaded, first-listed engine, so
    sequential requests prove only that one path; concurrent long requests spread over all."""
    if not plan.expect.proxy:
        skip("no-proxy", "no proxy in this scenario")
    engines = [a for a in plan.expect.apis if a.role in ("prefill", "decode")]
    before = {url: sum(c.values()) for url, c in _settled(http, engines).items()}
    n = 3 * len(engines)

    def one(i: int) -> int:
        body = {"model": plan.expect.served_name, "prompt": f"spread {RUN_NONCE} {i} " + "tok " * 64,
                "max_tokens": 200, "min_tokens": 200, "ignore_eos": True, "temperature": 0}
        try:
            return http.post(f"{plan.expect.proxy}/v1/completions", json=body, timeout=120).status_code
        except OSError:
            return -1

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        codes = list(pool.map(one, range(n)))
    failed = [c for c in codes if c != 200]
    after = {url: sum(c.values()) for url, c in _settled(http, engines).items()}
    missed = [f"{a.role} {a.node} ({a.url})" for a in engines if after[a.url] <= before[a.url]]
    assert not missed and not failed, (
        f"of {n} concurrent requests through the proxy, {len(failed)} failed (HTTP {sorted(set(failed))})"
        + (f" and none reached {', '.join(missed)}" if missed else "")
        + ": check the proxy's --prefiller-hosts/--decoder-hosts, that the proxy node reaches those engines' API "
        "ports and that each Decode reaches the Prefill KV ports (test_decode_pulls_kv_from_every_prefill)")


def _external(http, plan, apis=None) -> tuple[float, float]:
    q = h = 0.0
    for api in apis or plan.expect.apis:
        text = _metrics(http, api)
        q += _counter(text, "vllm:external_prefix_cache_queries_total")
        h += _counter(text, "vllm:external_prefix_cache_hits_total")
    return q, h


def _pool_apis(plan):
    """APIs of producer engines on the MemCache pool (consumers do not load from it by default)."""
    out = []
    for api in plan.expect.apis:
        proc = next(p for p in plan.processes() if p.kind == "engine" and p.api == api.url)
        if "AscendStoreConnector" in " ".join(proc.argv) and api.role == "prefill":
            out.append(api)
    return out


def _complete(http, api, plan, prompt: str, max_tokens: int = 4):
    __tracebackhide__ = True  # a failed request shows the check that made it
    r = http.post(f"{api.url}/v1/completions", timeout=300,
                  json={"model": plan.expect.served_name, "prompt": prompt, "max_tokens": max_tokens,
                        "temperature": 0})
    assert r.status_code == 200, f"{api.node} ({api.url}): {r.status_code} {r.text[:200]}"
    return r.json()


# What one pooled producer stores before its local prefix cache is filled past it (no dev mode):
# the prompts of the two checks below, so one fill serves both.
def _evicted_prompts() -> dict[str, str]:
    return {"repeat": _prompt("repeat"), "ring": _prompt("pool ring", 400)}


@dataclasses.dataclass
class _Evicted:
    outputs: dict[str, str]  # prompt -> its first output
    properties: dict[str, str]  # the fill's cost (JUnit properties)


def _meta_room(http, plan):
    meta = plan.expect.metaservice
    try:
        return eviction.pool_room(http.get(f"{meta.metrics_url}/metrics", timeout=5).text)
    except (OSError, eviction.Unreadable) as exc:
        fail("MetaService capacity metrics", "memcache_total_capacity_bytes and memcache_allocated_bytes",
             str(exc), f"{meta.metrics_url}/metrics", cause="the MetaService is down or its metrics are unreadable",
             remedy="check the MetaService process and its metrics_url")


def _local_cache(http, api):
    try:
        return max(eviction.local_caches(_metrics(http, api)), key=lambda c: c.tokens)
    except eviction.Unreadable as exc:
        fail("local prefix cache size (vllm:cache_config_info)", "num_gpu_blocks and block_size, positive integers",
             str(exc), f"{api.node} ({api.url}/metrics)", cause="engines without stats or an unknown vLLM metrics format",
             remedy="start the engines without --disable-log-stats; report the /metrics text to the kit's maintainers")


def _evict_after_storing(http, plan, api) -> _Evicted:
    """Store the prompts on ``api``, then fill its local prefix cache past them by volume (see
    k3lab.conform.eviction for the method and its cost on a lab); skip when the pool cannot hold
    the fill without evicting them too."""
    local = _local_cache(http, api)
    need_tokens = local.fill_tokens()
    room0 = _meta_room(http, plan)
    if room0 is None:
        skip("pool-unproven", f"no dev mode and the MetaService serves no capacity metrics (MemCache 1.0.x): cannot show the pool "
                    f"holds the {need_tokens} tokens that push {api.node}'s local prefix cache out")
    replies = {p: _complete(http, api, plan, p) for p in _evicted_prompts().values()}
    rooms = [room0]

    def stored_some() -> bool:  # vllm-ascend saves to the pool asynchronously, after the reply
        rooms.append(_meta_room(http, plan))
        return rooms[-1].allocated > room0.allocated
    waits.poll(stored_some, timeout=10, interval=0.5)
    room1 = rooms[-1]
    stored = sum(r["usage"]["prompt_tokens"] for r in replies.values())
    check(room1.allocated > room0.allocated, what="pool bytes stored for new prompts", expected="more than before",
          actual=f"{room0.allocated:.0f} -> {room1.allocated:.0f} bytes after {stored} new prompt tokens",
          where=f"{plan.expect.metaservice.metrics_url}/metrics (memcache_allocated_bytes)",
          cause=f"{api.node}'s AscendStoreConnector saves nothing to the pool",
          remedy="check MMC_LOCAL_CONFIG_PATH on the producer and the MetaService")
    need_bytes = (room1.allocated - room0.allocated) / stored * need_tokens
    if not room1.fits(need_bytes):
        skip("pool-unproven", f"no dev mode, and the pool cannot hold the fill that pushes {api.node}'s local prefix cache "
                    f"({local.tokens} tokens) out: {need_bytes:.0f} more bytes on {room1.allocated:.0f} of "
                    f"{room1.total:.0f} would pass the MetaService's 90 % eviction threshold")

    def send(prompt: str) -> int:
        return int(_complete(http, api, plan, prompt, max_tokens=1)["usage"]["prompt_tokens"])

    done = eviction.fill(send, need_tokens, min(eviction.CHUNK_TOKENS, plan.expect.max_model_len // 2),
                         f"{RUN_NONCE} evict {api.node}", eviction.deadline_s(need_tokens))
    room2 = _meta_room(http, plan)
    props = done.properties(local) | {"eviction.pool_evictions": f"{room2.evictions - room1.evictions:.0f}"}
    return _Evicted({p: r["choices"][0]["text"] for p, r in replies.items()}, props)


@pytest.fixture(scope="module")
def evicted(http, plan):
    """``evicted(api)``: once per module, the first outputs of _evicted_prompts() on ``api``, whose local
    prefix cache was then filled past them."""
    done: dict[str, _Evicted] = {}

    def get(api) -> _Evicted:
        if api.url not in done:
            done[api.url] = _evict_after_storing(http, plan, api)
        return done[api.url]
    return get


def _two_producers(plan, cold_cache):
    """Two pooled producer APIs, or one and how it forgets locally: ``"reset"`` (dev mode) or ``"evict"``."""
    if not plan.expect.external_pool:
        skip("no-pool", "no MemCache pool: without one, external hits exist only on Decode, where vllm-ascend counts "
                    "every KV pull (test_decode_pulls_kv_from_every_prefill checks those)")
    apis = _pool_apis(plan)
    others = [a for a in apis if a.node != apis[0].node]
    if others:
        return apis[0], others[0], None
    done, _ = cold_cache()  # dev mode, when the engines serve it, is one request instead of a fill
    return apis[0], apis[0], "reset" if done else "evict"


def _local_hits(http, api) -> float:
    return _counter(_metrics(http, api), "vllm:prefix_cache_hits_total")


def _first_output(http, plan, api, how, cold_cache, evicted, record_property, tag: str) -> str:
    """The prompt ``tag`` computed once on ``api`` and gone from its local cache (single producer), or
    computed on ``api`` (two producers: the other one never saw it)."""
    prompt = _evicted_prompts()[tag]
    if how == "evict":
        result = evicted(api)
        for key, value in result.properties.items():
            record_property(key, value)
        return result.outputs[prompt]
    out = _complete(http, api, plan, prompt)["choices"][0]["text"]
    if how == "reset":
        cold_cache()
    return out


def _repeat(http, plan, api, how, prompt: str) -> tuple[dict, float, float]:
    """The prompt again on ``api``: (reply, external hits it added, local hits it added)."""
    local0 = _local_hits(http, api)
    _, ext0 = _external(http, plan, [api])
    out = _complete(http, api, plan, prompt)
    _, ext1 = _external(http, plan, [api])
    local = _local_hits(http, api) - local0
    if how == "evict":
        check(local == 0, what=f"local prefix cache hits on {api.node} after the fill", expected="0",
              actual=f"{local:.0f} tokens", where=f"{api.node} ({api.url}/metrics, vllm:prefix_cache_hits_total)",
              cause="the local cache holds more than vllm:cache_config_info advertises, or the fill's requests "
                    "went to another engine", remedy="compare num_gpu_blocks with the engine log's 'GPU KV cache "
                    "size' line", kind="kit")
    return out, ext1 - ext0, local


@pytest.mark.conformance(
    id="external-cache.test_external_cache_hits_on_repeated_prefix", area="external-cache",
    must="A prefix stored in the pool MUST be an external hit on a Prefill engine that did not compute it, and a fresh prompt MUST NOT hit.",
    remedy="check the engines' MemCache client config (same MetaService, same PYTHONHASHSEED) and that the pool holds the stored blocks.")
def test_external_cache_hits_on_repeated_prefix(http, plan, cold_cache, evicted, record_property):
    """Measured on the producer side: Decode engines count every KV pull as external hits, so their
    counters prove nothing about the cache.

    With one pooled producer, its local cache must forget the prefix first: ``/reset_prefix_cache``
    when the engines serve it (VLLM_SERVER_DEV_MODE=1), else a fill by volume. That fill costs about
    1.05 x the local KV cache in prompt tokens (``vllm:cache_config_info`` num_gpu_blocks x
    block_size): 2.2 M tokens for 16384 blocks of 128, about 110 s at a stated 20,000 tokens/s
    prefill (k3lab.conform.eviction); the run records tokens, requests and seconds as
    ``eviction.*`` properties."""
    first, second, how = _two_producers(plan, cold_cache)
    out1 = _first_output(http, plan, first, how, cold_cache, evicted, record_property, "repeat")
    out2, hits, _ = _repeat(http, plan, second, how, _evicted_prompts()["repeat"])
    assert hits > 0, (f"{second.node} found none of the blocks {first.node} stored (external hits +0"
                      f"{', after its local prefix cache was filled past them' if how == 'evict' else ''}): check "
                      "PYTHONHASHSEED on every engine, the AscendStoreConnector and the MemCache pool")
    assert out1 == out2["choices"][0]["text"], \
        "outputs at temperature 0 differ between identical requests on two engines"
    _, after = _external(http, plan, [second])
    _complete(http, second, plan, _prompt("control"))
    _, control = _external(http, plan, [second])
    assert control == after, (f"a fresh prompt counted {control - after:.0f} external hits on {second.node}: the "
                              "counter rises without a cached prefix, so it cannot show cache hits")


def _meta_gauge(http, plan, name: str) -> float:
    text = http.get(f"{plan.expect.metaservice.metrics_url}/metrics", timeout=5).text
    return _counter(text, name)


@pytest.mark.conformance(
    id="external-cache.test_pool_stores_blocks", area="external-cache",
    must="A new long prompt MUST put blocks into the MemCache pool.",
    remedy="check the MetaService and providers are up and the engines' kv-transfer-config names the MemCache connector.")
def test_pool_stores_blocks(http, entrypoint, plan):
    """A new long prompt through the service puts its blocks into the MemCache pool (the run nonce
    keeps it new on a deployment kept from an earlier run)."""
    if not plan.expect.external_pool:
        skip("no-pool", "no MemCache pool in this scenario")
    before = _meta_gauge(http, plan, "memcache_stored_keys")
    r = http.post(f"{entrypoint}/v1/completions", timeout=120,
                  json={"model": plan.expect.served_name, "prompt": _prompt("store", 400), "max_tokens": 4,
                        "temperature": 0})
    assert r.status_code == 200, f"request: {r.status_code} {r.text[:200]}"
    after = _meta_gauge(http, plan, "memcache_stored_keys")
    assert after > before, ("the MetaService stored no new keys after a new long prompt: the producer's "
                            "AscendStoreConnector is not saving to the pool (check MMC_LOCAL_CONFIG_PATH and pool capacity)")


@pytest.mark.conformance(
    id="external-cache.test_pool_hits_across_engines", area="external-cache",
    must="Blocks stored by each pooled producer MUST be external hits on another.",
    remedy="give every pooled producer the same PYTHONHASHSEED and MemCache config (one MetaService), so one's blocks are the other's hits.")
def test_pool_hits_across_engines(http, plan, cold_cache, evicted, record_property):
    """Around the ring of pooled producer APIs, each stores a new prefix the next one must hit.

    Local prefix caches cannot serve the second engine, so only the MemCache pool can: this
    fails when the pool is missing, a hash seed differs, or a client holds the wrong config, and
    names the pair.
    """
    first, second, how = _two_producers(plan, cold_cache)
    if how is not None:
        _first_output(http, plan, first, how, cold_cache, evicted, record_property, "ring")
        _, hits, _ = _repeat(http, plan, first, how, _evicted_prompts()["ring"])
        assert hits > 0, (f"{first.node} found none of the blocks it stored once its local prefix cache forgot them "
                          f"({how}) in the MemCache pool: check MMC_LOCAL_CONFIG_PATH and the MetaService")
        return
    apis = _pool_apis(plan)
    bad = []
    for i, a in enumerate(apis):
        b = apis[(i + 1) % len(apis)]
        prompt = _prompt(f"pool {a.node}->{b.node}", 400)
        _complete(http, a, plan, prompt)
        _, before = _external(http, plan, [b])
        _complete(http, b, plan, prompt)
        _, after = _external(http, plan, [b])
        if after <= before:
            bad.append(f"{b.node} found none of the blocks {a.node} stored")
    assert not bad, "; ".join(bad) + " in the MemCache pool: check PYTHONHASHSEED on both, MMC_LOCAL_CONFIG_PATH and the MetaService"


@pytest.mark.conformance(
    id="security.test_api_key_enforced", area="security",
    must="With an API key configured, every engine API MUST refuse requests without it.",
    remedy="start every engine with the configured API key (VLLM_API_KEY / --api-key); re-render instead of editing a node's script.")
def test_api_key_enforced(api, plan):
    """With K3LAB_API_KEY set, every engine API refuses requests without it (the guides ship none)."""
    import requests

    key = apikey.get()
    if not key:
        skip("no-api-key", "no API key configured (K3LAB_API_KEY): every API is open, as the guides warn")
    bare = requests.Session()
    bare.trust_env = False
    r = bare.get(f"{api.url}/v1/models", timeout=5)
    assert r.status_code == 401, f"{api.node}: /v1/models without a key answered {r.status_code}"
    r = bare.get(f"{api.url}/v1/models", timeout=5, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, f"{api.node}: /v1/models with the key answered {r.status_code}"


@pytest.mark.conformance(
    id="parsers.test_openai_client_parses_responses", area="parsers",
    must="The official openai client MUST parse chat, reasoning and tool-call responses.",
    remedy="serve with the guide's parsers and an OpenAI-compatible response shape (vLLM's own server, no proxy rewriting fields).")
def test_openai_client_parses_responses(entrypoint, plan):
    """Schema drift shows up as a parse error in a real client, not in our own JSON handling."""
    import httpx
    import openai

    _needs_parsers(plan)
    client = openai.OpenAI(base_url=f"{entrypoint}/v1", api_key=apikey.get() or "EMPTY",
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
