"""Parser contract: the stand-in's kimi_k3 reasoning and tool-call parsing
(``k3sim/vllm/output/parsers.py`` and the engine's streaming deltas) against the real parsers of
the vLLM 0.33 wheel (``contracts/wheel.py`` says what is stubbed), on outputs the stand-in model
generates and on hand-built XTML: nested schemas, every JSON type, quotes, angle brackets and
ampersands, markers inside text, thinking on and off, whole outputs and streamed deltas (the
engine's tokens, and one character at a time so markers split).
"""
from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from contracts import wheel as w
from k3lab.launch.simimage.image import host_pythonpath

for _p in reversed(host_pythonpath()):  # k3sim and the image's site, importable here
    if _p not in sys.path:
        sys.path.insert(0, _p)

from k3sim.vllm.cache import tokenize  # noqa: E402
from k3sim.vllm.output import model, parsers, xtml  # noqa: E402
from k3sim.vllm.serving import OpenAIServing  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def real(wheel):
    return w.load_parsers(wheel)


# -------------------------------------------------------------------------------- the stand-in


def standin_once(raw: str, tools: bool, thinking: bool) -> w.Result:
    p = parsers.parse(raw, reasoning_parser=True, tool_parser=tools, thinking=thinking)
    calls = [(c.name, json.loads(c.arguments_json())) for c in p.tool_calls if c.complete]
    return w.Result(p.reasoning, p.content, calls)


def standin_stream(deltas: list[str], tools: bool, thinking: bool) -> w.Result:
    """What the stand-in engine streams (serving.OpenAIServing._delta over the re-parsed text), summed up."""
    prev = parsers.Parsed(None, None, [])
    names: set[int] = set()
    args: dict[int, str] = {}
    text, reasoning, content, calls = "", "", "", {}
    for delta in deltas:
        text += delta
        cur = parsers.parse(text, reasoning_parser=True, tool_parser=tools, thinking=thinking)
        out = OpenAIServing._delta(prev, cur, names, args)
        prev = cur
        reasoning += out.get("reasoning", "")
        content += out.get("content", "")
        for call in out.get("tool_calls", []):
            entry = calls.setdefault(call["index"], ["", ""])
            entry[0] += call.get("function", {}).get("name", "")
            entry[1] += call.get("function", {}).get("arguments", "")
    got = [(name, json.loads(a)) for _, (name, a) in sorted(calls.items())]
    return w.Result(reasoning or None, content or None, got)


# ------------------------------------------------------------------------------------- outputs


def think(text: str) -> str:
    return xtml.opened("think") + text + xtml.closed("think")


def response(text: str) -> str:
    return xtml.opened("response") + text + xtml.closed("response")


ALL_TYPES = {"s": "x", "i": 3, "f": 2.5, "t": True, "no": False, "n": None, "arr": [1, "two", 3.0, None],
             "obj": {"k": "v", "deep": {"list": [{"a": 1}, {"b": [True, False]}]}}}
SCHEMAS = {
    "flat": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
             "required": ["city", "days"]},
    "every-type": {"type": "object", "properties": {
        "s": {"type": "string"}, "i": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "boolean"},
        "n": {"type": "null"}, "a": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
        "o": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}},
    "nested": {"type": "object", "required": ["order"], "properties": {"order": {"type": "object", "required": [
        "items", "ship"], "properties": {"items": {"type": "array", "minItems": 1, "items": {"type": "object",
        "required": ["sku", "qty"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
        "ship": {"type": "object", "required": ["to"], "properties": {"to": {"type": "string", "enum": [
            'Bob "the builder" <bob@example.com> & co']}}}}}}},
}


def generated() -> dict[str, tuple[str, bool, bool]]:
    """Raw outputs of the stand-in model: id -> (raw, tools requested, thinking)."""
    out = {}
    for thinking in (True, False):
        render = {"kind": "chat", "question": "Explain data parallelism in one sentence.", "thinking": thinking}
        prefix, body, suffix = model.generate(render, 0)
        out[f"answer-thinking-{'on' if thinking else 'off'}"] = (prefix + body + suffix, False, thinking)
        for name, schema in SCHEMAS.items():
            render = {"kind": "chat", "question": "Use the tool.", "thinking": thinking,
                      "tool": {"name": "get_weather", "parameters": schema}}
            prefix, body, suffix = model.generate(render, 0)
            out[f"tool-{name}-thinking-{'on' if thinking else 'off'}"] = (prefix + body + suffix, True, thinking)
    return out


HANDMADE = {
    "all-json-types": (think("Pick the tool.") + xtml.tool_section("mix", ALL_TYPES), True, True),
    "quotes-angles-amps": (think("a <b> c") + xtml.tool_section("q", {
        "html": '<div class="x">a & b</div>', "said": 'He said "hi"', "empty": "", "multi": "line1\nline2",
        "unicode": "Zürich 東京"}), True, True),
    "quoted-key": (xtml.tool_section("k", {'he said "x" & y': 1}), True, False),
    "content-then-tools": (think("check") + response("Let me check.") + xtml.tool_section("f", {"a": 1}), True, True),
    "markers-in-text": (think("the <think> tag and </think> close") + response("Use <think> or <b>bold</b> & more."),
                        False, True),
    "no-open-marker": ("reasoning begins inside think" + xtml.closed("think") + response("Hi."), False, True),
    "thinking-off": (response("Plain answer with <angle> brackets."), False, False),
    "whitespace-around": (think("\n  Reasoning with spaces.  \n") + response("\nAnswer.\n"), False, True),
    "tools-in-open-think": (xtml.opened("think") + "still thinking " + xtml.tool_section("f", {"a": 1}), True, True),
    "truncated-think": (xtml.opened("think") + "cut off mid-thou", False, True),
    "two-calls": (think("two") + xtml.tool_section("a", {"x": 1})[:-len(xtml.closed("tools"))]
                  + xtml.tool_section("b", {"y": [2]}, index=2)[len(xtml.opened("tools")):], True, True),
}
CASES = {**generated(), **HANDMADE}


@pytest.mark.parametrize("case", CASES)
def test_whole_output_agrees(real, case):
    raw, tools, thinking = CASES[case]
    request = w.Request(tools=TOOLS if tools else None, tool_choice="auto" if tools else "none")
    assert standin_once(raw, tools, thinking) == w.compose(real, raw, request, thinking)


@pytest.mark.parametrize("split", ["tokens", "chars"])
@pytest.mark.parametrize("case", CASES)
def test_streamed_deltas_agree(real, case, split):
    raw, tools, thinking = CASES[case]
    deltas = tokenize(raw) if split == "tokens" else list(raw)
    assert "".join(deltas) == raw
    request = w.Request(tools=TOOLS if tools else None, tool_choice="auto" if tools else "none")
    assert standin_stream(deltas, tools, thinking) == w.compose_stream(real, deltas, request, thinking)


def test_drift_parser_change_fails(real, monkeypatch):
    """A stand-in that stops unescaping attribute values (or any parser change) fails the contract."""
    raw, tools, thinking = HANDMADE["quoted-key"]
    request = w.Request(tools=TOOLS, tool_choice="auto")
    assert standin_once(raw, tools, thinking) == w.compose(real, raw, request, thinking)
    original = parsers.parse

    def drifted(text: str, **kw: Any) -> parsers.Parsed:
        p = original(text, **kw)
        for call in p.tool_calls:
            call.args = [(k.upper(), v) for k, v in call.args]
        return p
    monkeypatch.setattr(parsers, "parse", drifted)
    assert standin_once(raw, tools, thinking) != w.compose(real, raw, request, thinking)
