"""A value that satisfies a tool's JSON schema, built from the schema alone (deterministic).

Objects get their required properties (all properties when none is required), enums their
first member, numbers a value inside the bounds, strings a value that honours the length limits.
"""
from __future__ import annotations

import math
from typing import Any

_WORDS = {"city": "Paris", "location": "Paris", "country": "France", "unit": "celsius", "query": "kimi k3",
          "code": "print(1)", "name": "example", "date": "2025-01-01", "language": "en", "url": "https://example.com"}


def _resolve(schema: dict, root: dict) -> dict:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return _resolve(node, root) if isinstance(node, dict) else {}
    return schema


def _number(schema: dict, integer: bool) -> float | int:
    lo = schema.get("minimum")
    hi = schema.get("maximum")
    xlo = schema.get("exclusiveMinimum")
    xhi = schema.get("exclusiveMaximum")
    step = 1 if integer else 0.5
    if isinstance(xlo, (int, float)) and not isinstance(xlo, bool):
        lo = xlo + step if lo is None or xlo >= lo else lo
    if isinstance(xhi, (int, float)) and not isinstance(xhi, bool):
        hi = xhi - step if hi is None or xhi <= hi else hi
    if lo is not None and hi is not None:
        value = lo + (hi - lo) / 2
    elif lo is not None:
        value = lo + step
    elif hi is not None:
        value = hi - step
    else:
        value = 1 if integer else 1.5
    mult = schema.get("multipleOf")
    if isinstance(mult, (int, float)) and mult > 0:
        value = math.ceil(value / mult) * mult if lo is None or math.ceil(value / mult) * mult >= lo else value
        if hi is not None and value > hi:
            value = math.floor(hi / mult) * mult
    if integer:
        upper = hi if hi is not None else math.inf
        value = int(math.ceil(value)) if lo is not None and math.ceil(value) <= upper else int(value)
    return value


def _string(schema: dict, name: str) -> str:
    fmt = schema.get("format")
    text = {"date": "2025-01-01", "date-time": "2025-01-01T00:00:00Z", "email": "user@example.com",
            "uri": "https://example.com", "uuid": "00000000-0000-4000-8000-000000000000"}.get(fmt or "")
    if text is None:
        text = _WORDS.get(name.lower(), f"{name or 'value'}")
    lo = int(schema.get("minLength", 0) or 0)
    hi = schema.get("maxLength")
    if len(text) < lo:
        text = text + "x" * (lo - len(text))
    if isinstance(hi, int) and len(text) > hi:
        text = text[:hi]
    return text


def example(schema: Any, name: str = "", root: dict | None = None) -> Any:
    if not isinstance(schema, dict):
        return "value"
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")] or options
            if key == "allOf":
                merged: dict = {}
                for o in usable:
                    merged.update(_resolve(o, root) if isinstance(o, dict) else {})
                return example(merged, name, root)
            return example(usable[0], name, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if k in props] or list(props)[:1]
        return {key: example(props[key], key, root) for key in required}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1) or 1))
        items = schema.get("items", {})
        return [example(items, name, root) for _ in range(count)]
    if kind == "integer":
        return _number(schema, True)
    if kind == "number":
        return _number(schema, False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema, name)
