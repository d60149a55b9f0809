"""Kimi K3 XTML markers (vllm-upstream.md §3.3): each marker is ``<|open|>NAME<|sep|>`` or
``<|close|>NAME<|sep|>``; tool calls sit in a ``tools`` section of ``call``/``argument`` blocks."""
from __future__ import annotations

import json
from typing import Any

OPEN, CLOSE, SEP = "<|open|>", "<|close|>", "<|sep|>"


def opened(name: str) -> str:
    return f"{OPEN}{name}{SEP}"


def closed(name: str) -> str:
    return f"{CLOSE}{name}{SEP}"


def _arg_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"


def attr(value: str) -> str:
    """Attribute values are escaped by the chat template (``&`` first, then ``"``); bodies stay raw."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


def unattr(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def tool_section(name: str, arguments: dict[str, Any], index: int = 1) -> str:
    parts = [opened("tools"), opened(f'call tool="{attr(name)}" index="{index}"')]
    for key, value in arguments.items():
        kind = _arg_type(value)
        text = value if kind == "string" else json.dumps(value, ensure_ascii=False)
        header = 'argument key="%s" type="%s"' % (attr(key), kind)
        parts.append(f"{opened(header)}{text}{closed('argument')}")
    parts.extend([closed("call"), closed("tools")])
    return "".join(parts)
