"""A value that satisfies a tool's JSON schema, built from the schema alone (deterministic).

A real model fills a tool call's arguments to fit the request's schema; so does the stand-in.
Objects get their required properties (all properties when none is required, more up to
``minProperties``), enums their first member, numbers a value inside the bounds (and a multiple
of ``multipleOf``), strings a value that matches ``pattern`` (built from the parsed regex) and
honours the length limits, arrays ``minItems`` items (distinct with ``uniqueItems``).
"""
from __future__ import annotations

import math
import re
import re._constants as _c
import re._parser as _p
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


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bounds(schema: dict, step: float) -> tuple[Any, Any]:
    """(lowest, highest) allowed value, the exclusive bounds moved in by ``step``."""
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if _is_number(xlo):
        lo = xlo + step if lo is None or xlo >= lo else lo
    if _is_number(xhi):
        hi = xhi - step if hi is None or xhi <= hi else hi
    return lo, hi


def _inside(lo: Any, hi: Any, step: float, integer: bool) -> float:
    if lo is not None and hi is not None:
        return lo + (hi - lo) / 2
    if lo is not None:
        return lo + step
    if hi is not None:
        return hi - step
    return 1 if integer else 1.5


def _multiple(value: float, mult: float, lo: Any, hi: Any) -> float:
    up = math.ceil(value / mult) * mult
    value = up if lo is None or up >= lo else value
    if hi is not None and value > hi:
        value = math.floor(hi / mult) * mult
    return value


def _number(schema: dict, integer: bool) -> float | int:
    step = 1 if integer else 0.5
    lo, hi = _bounds(schema, step)
    value = _inside(lo, hi, step, integer)
    mult = schema.get("multipleOf")
    if isinstance(mult, (int, float)) and mult > 0:
        value = _multiple(value, mult, lo, hi)
    if integer:
        upper = hi if hi is not None else math.inf
        value = int(math.ceil(value)) if lo is not None and math.ceil(value) <= upper else int(value)
    return value


_CATEGORY = {_c.CATEGORY_DIGIT: "0", _c.CATEGORY_NOT_DIGIT: "a", _c.CATEGORY_WORD: "a",
             _c.CATEGORY_NOT_WORD: "-", _c.CATEGORY_SPACE: " ", _c.CATEGORY_NOT_SPACE: "a"}


def _in_char(items: list) -> str:
    """The first character a ``[...]`` class accepts (a negated class: the first printable one it does not list)."""
    if items and items[0][0] == _c.NEGATE:
        for ch in "aA0_-x":
            if not re.fullmatch(f"[^{_render(items[1:])}]", ch):
                continue
            return ch
        return "~"
    for op, av in items:
        if op == _c.LITERAL:
            return chr(av)
        if op == _c.RANGE:
            return chr(av[0])
        if op == _c.CATEGORY:
            return _CATEGORY.get(av, "a")
    return "a"


def _render(items: list) -> str:
    out = []
    for op, av in items:
        if op == _c.LITERAL:
            out.append(re.escape(chr(av)))
        elif op == _c.RANGE:
            out.append(f"{re.escape(chr(av[0]))}-{re.escape(chr(av[1]))}")
        elif op == _c.CATEGORY:
            out.append({_c.CATEGORY_DIGIT: r"\d", _c.CATEGORY_NOT_DIGIT: r"\D", _c.CATEGORY_WORD: r"\w",
                        _c.CATEGORY_NOT_WORD: r"\W", _c.CATEGORY_SPACE: r"\s", _c.CATEGORY_NOT_SPACE: r"\S"}[av])
    return "".join(out)


def _emit(parsed, groups: dict[int, str], extra: int = 0) -> str:
    """A simple string the parsed regex matches: first branch, minimum repeats plus ``extra``
    where the bound allows (``extra`` 0 gives the shortest)."""
    out = []
    for op, av in parsed:
        if op == _c.LITERAL:
            out.append(chr(av))
        elif op == _c.NOT_LITERAL:
            out.append("a" if av != ord("a") else "b")
        elif op == _c.ANY:
            out.append("a")
        elif op == _c.IN:
            out.append(_in_char(av))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            lo, hi, sub = av
            out.append(_emit(sub, groups, extra) * min(lo + extra, hi))
        elif op == _c.SUBPATTERN:
            group, _add, _del, sub = av
            text = _emit(sub, groups, extra)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif op == _c.BRANCH:
            out.append(_emit(av[1][0], groups, extra))
        elif op == _c.GROUPREF:
            out.append(groups.get(av, ""))
        elif op == getattr(_c, "ATOMIC_GROUP", None):
            out.append(_emit(av, groups, extra))
        # AT (anchors), ASSERT, ASSERT_NOT: no characters
    return "".join(out)


def from_pattern(pattern: str, min_len: int = 0, max_len: int | None = None, skip: int = 0) -> str | None:
    """A string matching ``pattern`` (JSON Schema ``pattern`` is an unanchored ECMA regex) within the
    length bounds, or None; ``skip`` > 0 asks for the skip-th other one (for ``uniqueItems``)."""
    try:
        parsed = _p.parse(pattern)
    except (re.error, TypeError, ValueError):
        return None
    seen: list[str] = []
    for extra in range(0, 64):
        try:
            text = _emit(parsed, {}, extra)
            ok = re.search(pattern, text) is not None
        except (re.error, TypeError, ValueError, KeyError, OverflowError):
            return None
        if ok and len(text) >= min_len and (max_len is None or len(text) <= max_len) and text not in seen:
            seen.append(text)
            if len(seen) > skip:
                return text
        if max_len is not None and len(text) > max_len:
            break
    return None


def _string(schema: dict, name: str, skip: int = 0) -> str:
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        hi = schema.get("maxLength")
        text = from_pattern(pattern, int(schema.get("minLength", 0) or 0), hi if isinstance(hi, int) else None, skip)
        if text is not None:
            return text
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


_NONE = object()


def _given(schema: dict) -> Any:
    """The value the schema names itself (``const``, ``default``, first ``enum`` member), else _NONE."""
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    return _NONE


def _combined(schema: dict, name: str, root: dict) -> Any:
    """``anyOf``/``oneOf``: the first option that is not null; ``allOf``: the options merged. Else _NONE."""
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")] or options
            if key != "allOf":
                return example(usable[0], name, root)
            merged: dict = {}
            for o in usable:
                merged.update(_resolve(o, root) if isinstance(o, dict) else {})
            return example(merged, name, root)
    return _NONE


def _kind(schema: dict) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    return kind


def _object(schema: dict, name: str, root: dict) -> dict:
    props = schema.get("properties") or {}
    keys = [k for k in schema.get("required", []) if k in props] or list(props)[:1]
    want = int(schema.get("minProperties", 0) or 0)
    keys += [k for k in props if k not in keys][:max(0, want - len(keys))]
    out = {key: example(props[key], key, root) for key in keys}
    for key in schema.get("required", []):  # required but not described: any value
        out.setdefault(key, "value")
    return out


def _array(schema: dict, name: str, root: dict) -> list:
    count = max(1, int(schema.get("minItems", 1) or 1))
    items = schema.get("items", {})
    if isinstance(items, list):  # tuple form
        return [example(i, name, root) for i in items]
    values = [example(items, name, root) for _ in range(count)]
    if schema.get("uniqueItems") and count > 1:
        values = _distinct(_resolve(items, root) if isinstance(items, dict) else {}, values, name, root)
    return values


_BY_KIND = {
    "object": _object,
    "array": _array,
    "integer": lambda schema, name, root: _number(schema, True),
    "number": lambda schema, name, root: _number(schema, False),
    "boolean": lambda schema, name, root: True,
    "null": lambda schema, name, root: None,
}


def example(schema: Any, name: str = "", root: dict | None = None) -> Any:
    if not isinstance(schema, dict):
        return "value"
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    for rule in (_given, lambda s: _combined(s, name, root)):
        value = rule(schema)
        if value is not _NONE:
            return value
    build = _BY_KIND.get(_kind(schema))
    return build(schema, name, root) if build is not None else _string(schema, name)


def _distinct(items: dict, values: list, name: str, root: dict) -> list:
    """``uniqueItems``: other enum members, or increasing numbers, or suffixed strings."""
    if isinstance(items.get("enum"), list) and len(items["enum"]) >= len(values):
        return items["enum"][:len(values)]
    first = values[0]
    if isinstance(first, bool):
        return [True, False][:len(values)]
    if isinstance(first, (int, float)):
        return [first + i * (items.get("multipleOf") or 1) for i in range(len(values))]
    if isinstance(first, str):
        if isinstance(items.get("pattern"), str):
            return [_string(items, name, skip=i) for i in range(len(values))]
        return [first if i == 0 else f"{first}{i}" for i in range(len(values))]
    return values
