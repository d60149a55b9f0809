"""Client <-> MetaService wire format: newline-delimited JSON over TCP, one reply per request.

Requests are ``{"op": ..., ...}`` and replies carry ``ret`` (a MemCache result code); object
values travel base64-encoded. The protocol is the simulator's own; callers use the Python API.
"""
from __future__ import annotations

import base64
import json
from typing import Any


def frame(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def unframe(line: bytes) -> dict[str, Any]:
    return json.loads(line)


def pack(value: bytes) -> str:
    return base64.b64encode(value).decode()


def unpack(text: str) -> bytes:
    return base64.b64decode(text)
