"""OpenAI protocol: request validation, chat rendering, response and SSE chunk shapes.

Shapes follow vLLM 0.33 (vllm-upstream.md §2): ``reasoning`` only (no ``reasoning_content``
from 0.16 on), empty ``tool_calls`` omitted, stream chunks carry only the keys vLLM sets, a
final ``[DONE]``, and a usage chunk with ``choices: []`` when ``stream_options.include_usage``.
"""
from __future__ import annotations

import json
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

from k3sim import hw
from k3sim.vllm import cache
from k3sim.vllm.config import ServeConfig
from k3sim.vllm.errors import RequestError
from k3sim.vllm.log import Logger
from k3sim.vllm.metrics import Metrics
from k3sim.vllm.output import model as sim_model
from k3sim.vllm.output import parsers
from k3sim.vllm.runtime import Runtime

SPECIAL = "<|{}|>"


@dataclass
class Reply:
    """A JSON body with a status, or an SSE stream."""

    status: int = 200
    body: Any = None
    stream: Iterator[bytes] | None = None


def _missing(field: str, body: Any) -> RequestError:
    return RequestError(str([{"type": "missing", "loc": ("body", field), "msg": "Field required",
                              "input": body}]))


class OpenAIServing:
    def __init__(self, cfg: ServeConfig, runtime: Runtime, metrics: Metrics, log: Logger) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.metrics = metrics
        self.log = log
        self.delay = float(os.environ.get("K3SIM_TOKEN_DELAY_S", "0.001"))
        model_type = str(cfg.hf.get("model_type", ""))
        self.image_modality = "vision_chunk" if model_type.startswith("kimi") or not model_type else "image"
        self.reasoning = cfg.args.reasoning_parser == "kimi_k3" or cfg.args.reasoning_parser == "kimi_k2"
        self.tool_parser = cfg.args.tool_call_parser in ("kimi_k3", "kimi_k2")

    # ---- /v1/models ---------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        created = int(time.time())
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": self.cfg.model,
             "parent": None, "max_model_len": self.cfg.max_model_len,
             "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                             "created": created, "allow_create_engine": False, "allow_sampling": True,
                             "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                             "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}
            for name in self.cfg.served_names]}

    # ---- shared validation ----------------------------------------------------------------------
    def _check_model(self, body: dict[str, Any]) -> str:
        name = body.get("model")
        if name is None:
            return self.cfg.model_name
        if name not in self.cfg.served_names:
            raise RequestError(f"The model `{name}` does not exist.", 404, param="model")
        return name

    def _max_tokens(self, body: dict[str, Any], prompt_len: int, chat: bool) -> int:
        mml = self.cfg.max_model_len
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
            raise RequestError(str([{"type": "int_type", "loc": ("body", "max_tokens"),
                                     "msg": "Input should be a valid integer", "input": max_tokens}]))
        if prompt_len >= mml:
            raise RequestError(f"This model's maximum context length is {mml} tokens. However, your request has "
                               f"{prompt_len} input tokens. Please reduce the length of the input messages.",
                               param="input_tokens")
        if max_tokens is None:
            return mml - prompt_len
        if max_tokens < 1:
            raise RequestError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
        if prompt_len + max_tokens > mml:
            raise RequestError(f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                               f"maximum context length is {mml} tokens and your request has {prompt_len} input "
                               f"tokens ({max_tokens} > {mml} - {prompt_len}).", param="max_tokens")
        return max_tokens

    @staticmethod
    def _variant(body: dict[str, Any]) -> int:
        """Which of the deterministic outputs: 0 greedy, the seed, else random."""
        if body.get("temperature") == 0:
            return 0
        seed = body.get("seed")
        return int(seed) if seed is not None else random.randrange(1 << 30)

    def _sampling(self, body: dict[str, Any], prompt_len: int, chat: bool) -> dict[str, Any]:
        max_tokens = self._max_tokens(body, prompt_len, chat)
        min_tokens = int(body.get("min_tokens") or 0)
        if min_tokens > max_tokens:
            raise RequestError(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
                               param="min_tokens")
        variant = self._variant(body)
        n = int(body.get("n") or 1)
        if n < 1:
            raise RequestError(f"n must be at least 1, got {n}.", param="n")
        return {"max_tokens": max_tokens, "min_tokens": min_tokens, "ignore_eos": bool(body.get("ignore_eos")),
                "variant": variant, "n": n}

    # ---- chat rendering ---------------------------------------------------------------------------
    def _render_chat(self, body: dict[str, Any]) -> tuple[list[int], list, dict[str, Any]]:
        messages = body.get("messages")
        if messages is None:
            raise _missing("messages", body)
        if not isinstance(messages, list):
            raise RequestError("messages must be a list")
        limit = self.cfg.limit_mm.get(self.image_modality, self.cfg.limit_mm.get("image", 999))
        prompt = _ChatPrompt(self.image_modality, limit, self.cfg.args.allowed_local_media_path)
        tools = body.get("tools") or []
        if tools:
            prompt.ids += cache.encode(f"<|open|>tools<|sep|>{json.dumps(tools, sort_keys=True)}<|close|>tools<|sep|>")
        for msg in messages:
            prompt.message(msg)
        prompt.ids += cache.encode("<|open|>assistant<|sep|>")
        render = {"kind": "chat", "question": prompt.question, "images": prompt.images, "thinking": _thinking(body)}
        return prompt.ids, prompt.mm, render

    def _tool_choice(self, body: dict[str, Any]) -> tuple[dict[str, Any] | list | None, str]:
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto" if tools else "none")
        self._check_tool_choice(choice, tools)
        if not tools or choice == "none":
            return None, "none"
        funcs = [t.get("function", {}) for t in tools if isinstance(t, dict)]
        if isinstance(choice, dict):
            return _named_tool(choice, funcs), "named"
        if not funcs or not all(f.get("name") for f in funcs):
            raise RequestError("Each tool must be a function with a name.", param="tools")
        return funcs, str(choice)

    def _check_tool_choice(self, choice: Any, tools: list) -> None:
        auto_ok = self.cfg.args.enable_auto_tool_choice and self.cfg.args.tool_call_parser
        if choice == "auto" and tools and not auto_ok:
            raise RequestError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        if (choice == "required" or isinstance(choice, dict)) and not tools:
            raise RequestError("When using `tool_choice`, `tools` must be set.", param="tool_choice")

    # ---- endpoints -------------------------------------------------------------------------------
    def chat(self, body: Any, headers: dict[str, str]) -> Reply:
        if not isinstance(body, dict):
            raise RequestError("Expected a JSON object body")
        model = self._check_model(body)
        tool, tool_mode = self._tool_choice(body)
        ids, mm, render = self._render_chat(body)
        fault = hw.faults("engine")
        if isinstance(tool, list):  # auto/required: the model picks the tool the question is about, or none
            # fault tool_choice_first: the model calls the first tool whatever it is asked
            tool = tool[0] if fault.get("tool_choice_first") else                 sim_model.choose_tool(render.get("question", ""), tool, required=tool_mode == "required")
            if tool is None:
                tool_mode = "none"
        if tool is not None:
            params = tool.get("parameters")
            if fault.get("tool_args_blind") and isinstance(params, dict):  # fault: arguments ignore the schema
                props = params.get("properties") or {}
                params = {"type": "object", "required": list(props), "properties": {k: {} for k in props}}
            render["tool"] = {"name": tool["name"], "parameters": params}
        sp = self._sampling(body, len(ids), chat=True)
        parse = {"reasoning": self.reasoning and body.get("include_reasoning", True) is not False,
                 "reasoning_enabled": self.reasoning,
                 "tools": tool is not None and self.tool_parser and tool_mode != "none",
                 "thinking": render["thinking"], "named": tool_mode == "named"}
        return self._run("chat", model, ids, mm, render, sp, body, headers, parse)

    def completion(self, body: Any, headers: dict[str, str]) -> Reply:
        if not isinstance(body, dict):
            raise RequestError("Expected a JSON object body")
        model = self._check_model(body)
        prompt = body.get("prompt")
        if prompt is None:
            raise _missing("prompt", body)
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            ids, text = list(prompt), ""
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            text = prompt[0]
            ids = cache.encode(text)
        elif isinstance(prompt, str):
            text = prompt
            ids = cache.encode(text)
        else:
            raise RequestError("prompt must be a string, a list with one string, or a list of token ids")
        if not ids:
            raise RequestError("Prompt cannot be empty", param="prompt")
        sp = self._sampling(body, len(ids), chat=False)
        render = {"kind": "completion", "question": text}
        return self._run("completion", model, ids, [], render, sp, body, headers, {})

    # ---- running a request ---------------------------------------------------------------------
    def _run(self, kind: str, model: str, ids: list[int], mm: list, render: dict[str, Any], sp: dict[str, Any],
             body: dict[str, Any], headers: dict[str, str], parse: dict[str, Any]) -> Reply:
        rank = self.runtime.pick(headers.get("x-data-parallel-rank"))
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        rid = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{request_id}"
        arrival = time.time()
        results = []
        blocks = -(-len(ids) // self.cfg.block_size)
        for i in range(sp["n"]):
            req = {"request_id": rid if sp["n"] == 1 else f"{rid}-{i}", "prompt_token_ids": ids, "mm": mm,
                   "render": render, "variant": sp["variant"] + i,
                   "sampling": {k: sp[k] for k in ("max_tokens", "min_tokens", "ignore_eos")},
                   "kv_transfer_params": body.get("kv_transfer_params")}
            self.metrics.started(rank, blocks)
            result = self.runtime.process(rank, req)
            if "stats" in result:
                self.metrics.scheduled(rank, result["stats"], len(ids))
            if result.get("error"):
                self.metrics.finished(rank, blocks, 0, "error", None, time.time() - arrival, [])
                err = result["error"]
                if err.get("cause"):
                    self.log.error("serving.py:412", "Error in %s completion for request %s: %s", kind, rid,
                                   err["cause"])
                error = RequestError(err.get("message", "Internal server error"), int(err.get("status", 500)))
                if body.get("stream"):
                    return Reply(200, stream=self._error_stream(error))
                raise error
            results.append(result)
        usage = self._usage(results, len(ids), body)
        ctx = {"id": rid, "created": int(arrival), "model": model, "rank": rank, "blocks": blocks,
               "arrival": arrival}
        if body.get("stream"):
            return Reply(200, stream=self._stream(kind, ctx, results, usage, body, parse))
        self._account(ctx, results, stream=False)
        if kind == "chat":
            choices = [self._chat_choice(i, r, parse) for i, r in enumerate(results)]
            out = {"id": rid, "object": "chat.completion", "created": ctx["created"], "model": model,
                   "choices": choices, "service_tier": None, "system_fingerprint": None, "usage": usage,
                   "prompt_logprobs": None, "prompt_token_ids": None,
                   "kv_transfer_params": results[0].get("kv_transfer_params")}
        else:
            echo = render["question"] if body.get("echo") else ""
            choices = [{"index": i, "text": echo + "".join(r["tokens"]), "logprobs": None,
                        "finish_reason": r["finish_reason"], "stop_reason": None, "token_ids": None,
                        "prompt_logprobs": None, "prompt_token_ids": None} for i, r in enumerate(results)]
            out = {"id": rid, "object": "text_completion", "created": ctx["created"], "model": model,
                   "choices": choices, "service_tier": None, "system_fingerprint": None, "usage": usage,
                   "kv_transfer_params": results[0].get("kv_transfer_params")}
        return Reply(200, out)

    def _account(self, ctx: dict[str, Any], results: list[dict[str, Any]], stream: bool) -> None:
        now = time.time()
        for r in results:
            n = len(r["tokens"])
            if not stream and self.delay:
                time.sleep(min(1.0, self.delay * n))
            ttft = (now - ctx["arrival"]) if n else None
            self.metrics.finished(ctx["rank"], ctx["blocks"], n, r["finish_reason"], ttft, time.time() - ctx["arrival"],
                                  [self.delay] * max(0, n - 1) if n < 200 else [])

    def _usage(self, results: list[dict[str, Any]], prompt_len: int, body: dict[str, Any]) -> dict[str, Any]:
        completion = sum(len(r["tokens"]) for r in results)
        cached = results[0].get("num_cached_tokens", 0)
        details = {"cached_tokens": cached} if self.cfg.args.enable_prompt_tokens_details and cached else None
        return {"prompt_tokens": prompt_len, "total_tokens": prompt_len + completion,
                "completion_tokens": completion, "prompt_tokens_details": details}

    def _parsed(self, text: str, parse: dict[str, Any]) -> parsers.Parsed:
        if not parse.get("reasoning_enabled") and not parse.get("tools"):
            return parsers.Parsed(None, text or None, [])
        p = parsers.parse(text, reasoning_parser=parse.get("reasoning_enabled", False),
                          tool_parser=parse.get("tools", False), thinking=parse.get("thinking", True))
        if not parse.get("reasoning"):
            p.reasoning = None  # include_reasoning=false
        return p

    def _finish(self, result: dict[str, Any], calls: list, parse: dict[str, Any]) -> str:
        reason = result["finish_reason"]
        if calls and reason == "stop" and not parse.get("named"):
            return "tool_calls"
        return reason

    def _chat_choice(self, index: int, result: dict[str, Any], parse: dict[str, Any]) -> dict[str, Any]:
        p = self._parsed("".join(result["tokens"]), parse)
        message: dict[str, Any] = {"role": "assistant", "content": p.content, "refusal": None, "annotations": None,
                                   "audio": None, "function_call": None}
        calls = [c for c in p.tool_calls if c.complete]
        if calls:
            message["tool_calls"] = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function",
                                      "function": {"name": c.name, "arguments": c.arguments_json()}} for c in calls]
        message["reasoning"] = p.reasoning
        return {"index": index, "message": message, "logprobs": None,
                "finish_reason": self._finish(result, calls, parse), "stop_reason": None, "token_ids": None}

    # ---- SSE -----------------------------------------------------------------------------------------
    @staticmethod
    def _event(obj: Any) -> bytes:
        return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"

    def _error_stream(self, error: RequestError) -> Iterator[bytes]:
        yield self._event(error.body())
        yield b"data: [DONE]\n\n"

    def _stream(self, kind: str, ctx: dict[str, Any], results: list[dict[str, Any]], usage: dict[str, Any],
                body: dict[str, Any], parse: dict[str, Any]) -> Iterator[bytes]:
        obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
        head = {"id": ctx["id"], "object": obj, "created": ctx["created"], "model": ctx["model"]}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = self._chat_chunks if kind == "chat" else self._completion_chunks
        try:
            for index, result in enumerate(results):
                for choice in chunks(index, result, parse):
                    yield self._event({**head, "choices": [choice]})
            if include_usage:
                yield self._event({**head, "choices": [], "usage": {k: v for k, v in usage.items() if v is not None}})
            yield b"data: [DONE]\n\n"
        finally:
            self._account(ctx, results, stream=True)

    def _tokens(self, tokens: list[str]) -> Iterator[tuple[str, bool]]:
        """(token, is last), paced like generation."""
        for i, tok in enumerate(tokens):
            if self.delay:
                time.sleep(self.delay)
            yield tok, i == len(tokens) - 1

    def _chat_chunks(self, index: int, result: dict[str, Any], parse: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        prev = parsers.Parsed(None, None, [])
        sent_names: set[int] = set()
        sent_args: dict[int, str] = {}
        text = ""
        for tok, last in self._tokens(result["tokens"]):
            text += tok
            cur = self._parsed(text, parse)
            delta = self._delta(prev, cur, sent_names, sent_args)
            prev = cur
            if last:
                finish = self._finish(result, [c for c in cur.tool_calls if c.complete], parse)
                yield {"index": index, "delta": delta or {"content": ""}, "logprobs": None,
                       "finish_reason": finish, "stop_reason": None}
            elif delta:
                yield {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}

    def _completion_chunks(self, index: int, result: dict[str, Any],
                           parse: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for tok, last in self._tokens(result["tokens"]):
            choice = {"index": index, "text": tok, "logprobs": None,
                      "finish_reason": result["finish_reason"] if last else None}
            if last:
                choice["stop_reason"] = None
            yield choice

    @staticmethod
    def _delta(prev: parsers.Parsed, cur: parsers.Parsed, sent_names: set[int],
               sent_args: dict[int, str]) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        for key in ("reasoning", "content"):
            before, now = getattr(prev, key) or "", getattr(cur, key) or ""
            if now != before:
                delta[key] = now[len(before):]
        calls = [d for i, call in enumerate(cur.tool_calls) for d in _call_deltas(i, call, sent_names, sent_args)]
        if calls:
            delta["tool_calls"] = calls
        return delta


def _call_deltas(i: int, call: parsers.ToolCall, sent_names: set[int], sent_args: dict[int, str]) -> list[dict]:
    """A tool call's name once it is known, then each argument text that can no longer change."""
    out: list[dict] = []
    if i not in sent_names and call.name:
        sent_names.add(i)
        out.append({"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function", "index": i,
                    "function": {"name": call.name}})
    stable = call.stable_prefix()
    done = sent_args.get(i, "")
    if i in sent_names and len(stable) > len(done):
        out.append({"index": i, "function": {"arguments": stable[len(done):]}})
        sent_args[i] = stable
    return out


def _thinking(body: dict[str, Any]) -> bool:
    """``chat_template_kwargs`` thinking / enable_thinking; thinking is on unless one says otherwise."""
    kwargs = body.get("chat_template_kwargs") or {}
    thinking, enable = kwargs.get("thinking"), kwargs.get("enable_thinking")
    return True if thinking is None and enable is None else bool(thinking) or bool(enable)


def _named_tool(choice: dict[str, Any], funcs: list[dict[str, Any]]) -> dict[str, Any]:
    name = (choice.get("function") or {}).get("name")
    match = next((f for f in funcs if f.get("name") == name), None)
    if match is None:
        raise RequestError(f"Tool '{name}' has not been passed in `tools`.", param="tool_choice")
    return match


_IMAGE_PARTS = ("image_url", "input_image", "image")


class _ChatPrompt:
    """The prompt token ids of a chat request, message by message, with the images it carries."""

    def __init__(self, modality: str, limit: int, media_path: Any) -> None:
        self.modality, self.limit, self.media_path = modality, limit, media_path
        self.ids: list[int] = []
        self.mm: list[list] = []
        self.images: list[dict[str, Any]] = []
        self.question = ""

    def message(self, msg: Any) -> None:
        if not isinstance(msg, dict) or "role" not in msg:
            raise RequestError("Each message must be an object with a 'role'.")
        role = str(msg["role"])
        self.ids += cache.encode(f"<|open|>{role}<|sep|>")
        content = msg.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
        text_parts = [self._part(part) for part in parts]
        if msg.get("reasoning") or msg.get("reasoning_content"):
            self.ids += cache.encode(str(msg.get("reasoning") or msg.get("reasoning_content")))
        if msg.get("tool_calls"):
            self.ids += cache.encode(json.dumps(msg["tool_calls"], sort_keys=True))
        self.ids += cache.encode(f"<|close|>{role}<|sep|>")
        if role == "user":
            self.question = " ".join(t for t in text_parts if t is not None)

    def _part(self, part: Any) -> str | None:
        """Encode one content part; its text, or None for an image."""
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text"):
            text = str(part.get("text", ""))
            self.ids += cache.encode(text)
            return text
        if kind in _IMAGE_PARTS:
            self._image(part)
            return None
        raise RequestError(f"Unknown part type: {kind}")

    def _image(self, part: dict[str, Any]) -> None:
        from k3sim.vllm.output import vision

        if len(self.images) + 1 > self.limit:
            raise RequestError(f"At most {self.limit} {self.modality}(s) may be provided in one prompt. "
                               "Set `--limit-mm-per-prompt` to increase this limit.", param=self.modality)
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        img = vision.load(str(url or ""), self.media_path)
        self.images.append({"width": img.width, "height": img.height, "colour": img.colour})
        self.ids.append(cache.token_id("<|media_start|>"))
        self.mm.append([len(self.ids), img.num_tokens, img.digest])
        self.ids += [cache.token_id("<|media_pad|>")] * img.num_tokens
        self.ids.append(cache.token_id("<|media_end|>"))
