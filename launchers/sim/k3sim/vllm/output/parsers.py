"""``kimi_k3`` reasoning and tool parsers over the raw XTML text, as vLLM 0.33's (contracts/).

Reasoning: output may start inside think (no opening marker); only ``<|close|>think<|sep|>`` ends
it, and everything before it is reasoning verbatim (markers and whitespace included; unlike K2,
a tools section does not end it). The ``response`` channel becomes content; whitespace-only
content before tools is dropped and text after the tool section is suppressed. Attribute values
are unescaped (``&quot;``, ``&amp;``). Streaming re-parses the text so far and emits the
difference, holding back a marker that is not complete yet.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from k3sim.vllm.output.xtml import CLOSE, OPEN, SEP, unattr

_MARK = re.compile(re.escape(OPEN) + r"|" + re.escape(CLOSE))
_CALL = re.compile(r'call tool="([^"]*)"(?: index="(\d+)")?')
_ARG = re.compile(r'argument key="([^"]*)"(?: type="([^"]*)")?')


@dataclass
class ToolCall:
    name: str
    args: list[tuple[str, Any]] = field(default_factory=list)
    complete: bool = False

    def arguments_json(self) -> str:
        return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in self.args) + "}"

    def stable_prefix(self) -> str:
        """The part of the final JSON that can no longer change (for streamed argument deltas)."""
        if self.complete:
            return self.arguments_json()
        if not self.args:
            return ""
        return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in self.args)


@dataclass
class Parsed:
    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall]


def _segments(text: str) -> list[tuple[str, str]]:
    """Split into ('text', s) and ('open'|'close', name) items; an incomplete trailing marker is dropped."""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        m = _MARK.search(text, pos)
        if not m:
            rest = text[pos:]
            held = max((n for marker in (OPEN, CLOSE) for n in range(1, len(marker))
                        if rest.endswith(marker[:n])), default=0)  # a marker still being generated
            if rest[:len(rest) - held]:
                out.append(("text", rest[:len(rest) - held]))
            return out
        if m.start() > pos:
            out.append(("text", text[pos:m.start()]))
        end = text.find(SEP, m.end())
        if end < 0:
            return out  # marker still being generated
        out.append(("open" if m.group() == OPEN else "close", text[m.end():end]))
        pos = end + len(SEP)


def _value(raw: str, kind: str | None) -> Any:
    if kind in (None, "string"):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def parse(text: str, *, reasoning_parser: bool, tool_parser: bool, thinking: bool) -> Parsed:
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[ToolCall] = []
    in_reasoning = reasoning_parser and thinking
    current_arg: tuple[str, str | None] | None = None
    arg_text = ""
    in_tools = False
    tools_done = False
    for kind, value in _segments(text):
        name = value.split(" ", 1)[0]
        if in_reasoning:
            if kind == "close" and name == "think":
                in_reasoning = False
            elif not (kind == "open" and name == "think" and not reasoning):  # the channel opener itself
                reasoning.append(value if kind == "text" else f"{OPEN if kind == 'open' else CLOSE}{value}{SEP}")
            continue
        if tool_parser and kind == "open" and name == "tools":
            in_tools, in_reasoning = True, False
            continue
        if in_tools:
            if kind == "open" and name == "call":
                m = _CALL.match(value)
                calls.append(ToolCall(unattr(m.group(1)) if m else ""))
            elif kind == "open" and name == "argument":
                m = _ARG.match(value)
                current_arg, arg_text = ((unattr(m.group(1)), m.group(2)) if m else ("", None)), ""
            elif kind == "close" and name == "argument" and current_arg and calls:
                calls[-1].args.append((current_arg[0], _value(arg_text, current_arg[1])))
                current_arg = None
            elif kind == "close" and name == "call" and calls:
                calls[-1].complete = True
            elif kind == "close" and name == "tools":
                in_tools, tools_done = False, True
            elif kind == "text" and current_arg is not None:
                arg_text += value
            continue
        if tools_done:
            continue  # text after the tool section is suppressed
        if not reasoning_parser:
            content.append(value if kind == "text" else f"{OPEN if kind == 'open' else CLOSE}{value}{SEP}")
            continue
        if kind == "open" and name == "think":
            in_reasoning = thinking
            continue
        if kind == "close" and name == "think":
            in_reasoning = False
            continue
        if kind in ("open", "close"):
            continue  # channel markers (response ...) are not content
        (reasoning if in_reasoning else content).append(value)
    r = "".join(reasoning)
    c = "".join(content)
    if calls and not c.strip():
        c = ""
    return Parsed(r or None, c or None, calls)
