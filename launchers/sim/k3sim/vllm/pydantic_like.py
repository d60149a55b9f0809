"""Validation of vLLM's config dataclasses with pydantic's error text (no pydantic needed).

vLLM parses ``--kv-transfer-config`` and friends with ``TypeAdapter(cls).validate_json`` and
turns a ``ValidationError`` into an argparse error (``parse_dataclass``), so a bad role, a wrong
type or an unknown key stops the CLI before anything loads. Field types use pydantic's lax mode:
numeric strings become ints, ints never become strings.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DOCS = "https://errors.pydantic.dev/2.12/v"
_BOOL_WORDS = ("true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n")


@dataclass(frozen=True)
class Field:
    kind: str  # str | int | float | bool | dict | list | any | literal
    optional: bool = False
    choices: tuple = ()


class ValidationFailure(Exception):
    def __init__(self, model: str, errors: list[tuple[str, str, str, Any]]) -> None:
        self.model = model
        self.errors = errors  # (loc, msg, type, input)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.errors)
        out = [f"{n} validation error{'s' if n != 1 else ''} for {self.model}"]
        for loc, msg, etype, value in self.errors:
            if loc:
                out.append(loc)
            shown = _input_repr(value)
            out.append(f"  {msg} [type={etype}, input_value={shown}, input_type={_type_name(value)}]")
            out.append(f"    For further information visit {DOCS}/{etype}")
        return "\n".join(out)


def _type_name(value: Any) -> str:
    return "ArgsKwargs" if isinstance(value, _ArgsKwargs) else type(value).__name__


class _ArgsKwargs:
    def __init__(self, kwargs: dict) -> None:
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"ArgsKwargs((), {self.kwargs!r})"


def _input_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:29] + "..." + text[-28:]


def _coerce(name: str, spec: Field, value: Any, errors: list) -> Any:
    if value is None:
        if spec.optional or spec.kind == "any":
            return None
    kind = spec.kind
    if kind == "any":
        return value
    if kind == "literal":
        if value in spec.choices:
            return value
        opts = [repr(c) for c in spec.choices]
        expected = ", ".join(opts[:-1]) + f" or {opts[-1]}" if len(opts) > 1 else opts[0]
        errors.append((name, f"Input should be {expected}", "literal_error", value))
        return None
    if kind == "str":
        if isinstance(value, str):
            return value
        errors.append((name, "Input should be a valid string", "string_type", value))
    elif kind == "int":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                errors.append((name, "Input should be a valid integer, unable to parse string as an integer",
                               "int_parsing", value))
                return None
        errors.append((name, "Input should be a valid integer", "int_type", value))
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                errors.append((name, "Input should be a valid number, unable to parse string as a number",
                               "float_parsing", value))
                return None
        errors.append((name, "Input should be a valid number", "float_type", value))
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        if value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in _BOOL_WORDS:
            return value.lower() in ("true", "1", "yes", "on", "t", "y")
        errors.append((name, "Input should be a valid boolean", "bool_type", value))
    elif kind == "dict":
        if isinstance(value, dict):
            return value
        errors.append((name, "Input should be a valid dictionary", "dict_type", value))
    elif kind == "list":
        if isinstance(value, list):
            return value
        errors.append((name, "Input should be a valid list", "list_type", value))
    return None


def validate_json(model: str, fields: dict[str, Field], text: str) -> dict[str, Any]:
    """``TypeAdapter(model).validate_json(text)``: returns the given keys, coerced."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"Invalid JSON: {exc.msg.lower()} at line {exc.lineno} column {exc.colno}"
        raise ValidationFailure(model, [("", msg, "json_invalid", text)]) from None
    return validate_dict(model, fields, data)


def validate_dict(model: str, fields: dict[str, Field], data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValidationFailure(model, [("", f"Input should be a dictionary or an instance of {model}",
                                         "dataclass_type", data)])
    errors: list = []
    out: dict[str, Any] = {}
    for key, value in data.items():
        spec = fields.get(key)
        if spec is None:
            errors.append((key, "Extra inputs are not permitted", "extra_forbidden", value))
            continue
        out[key] = _coerce(key, spec, value, errors)
    if errors:
        raise ValidationFailure(model, errors)
    return out


def value_error(model: str, message: str, data: dict) -> ValidationFailure:
    """A ``ValueError`` from ``__post_init__``, as pydantic wraps it."""
    return ValidationFailure(model, [("", f"Value error, {message}", "value_error", _ArgsKwargs(data))])
