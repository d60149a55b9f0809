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


def _raw(kind: str, value: str) -> str:
    return value if kind == "text" else f"{OPEN if kind == 'open' else CLOSE}{value}{SEP}"


class _Machine:
    """One state per part of the output: ``reasoning``, ``content``, ``tools``, ``done`` (after tools)."""

    def __init__(self, reasoning_parser: bool, tool_parser: bool, thinking: bool) -> None:
        self.reasoning_parser, self.tool_parser, self.thinking = reasoning_parser, tool_parser, thinking
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[ToolCall] = []
        self.current_arg: tuple[str, str | None] | None = None
        self.arg_text = ""
        self.state = "reasoning" if reasoning_parser and thinking else "content"
        self._states = {"reasoning": self._in_reasoning, "content": self._in_content,
                        "tools": self._in_tools, "done": self._after_tools}
        self._tool_marks = {("open", "call"): self._open_call, ("open", "argument"): self._open_argument,
                            ("close", "argument"): self._close_argument, ("close", "call"): self._close_call,
                            ("close", "tools"): self._close_tools}

    def feed(self, kind: str, value: str) -> None:
        name = value.split(" ", 1)[0]
        if self.state != "reasoning" and self.tool_parser and kind == "open" and name == "tools":
            self.state = "tools"
            return
        self._states[self.state](kind, name, value)

    def _in_reasoning(self, kind: str, name: str, value: str) -> None:
        if kind == "close" and name == "think":
            self.state = "content"
        elif not (kind == "open" and name == "think" and not self.reasoning):  # the channel opener itself
            self.reasoning.append(_raw(kind, value))

    def _in_content(self, kind: str, name: str, value: str) -> None:
        if not self.reasoning_parser:
            self.content.append(_raw(kind, value))
        elif kind == "text":
            self.content.append(value)
        elif kind == "open" and name == "think" and self.thinking:
            self.state = "reasoning"
        # other channel markers (response ...) are not content

    def _in_tools(self, kind: str, name: str, value: str) -> None:
        if kind == "text":
            if self.current_arg is not None:
                self.arg_text += value
            return
        handler = self._tool_marks.get((kind, name))
        if handler is not None:
            handler(value)

    def _after_tools(self, kind: str, name: str, value: str) -> None:
        """Text after the tool section is suppressed."""

    def _open_call(self, value: str) -> None:
        m = _CALL.match(value)
        self.calls.append(ToolCall(unattr(m.group(1)) if m else ""))

    def _open_argument(self, value: str) -> None:
        m = _ARG.match(value)
        self.current_arg, self.arg_text = ((unattr(m.group(1)), m.group(2)) if m else ("", None)), ""

    def _close_argument(self, value: str) -> None:
        if self.current_arg and self.calls:
            self.calls[-1].args.append((self.current_arg[0], _value(self.arg_text, self.current_arg[1])))
            self.current_arg = None

    def _close_call(self, value: str) -> None:
        if self.calls:
            self.calls[-1].complete = True

    def _close_tools(self, value: str) -> None:
        self.state = "done"

    def result(self) -> Parsed:
        r = "".join(self.reasoning)
        c = "".join(self.content)
        if self.calls and not c.strip():
            c = ""
        return Parsed(r or None, c or None, self.calls)


def parse(text: str, *, reasoning_parser: bool, tool_parser: bool, thinking: bool) -> Parsed:
    machine = _Machine(reasoning_parser, tool_parser, thinking)
    for kind, value in _segments(text):
        machine.feed(kind, value)
    return machine.result()
