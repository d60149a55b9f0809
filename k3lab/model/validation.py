"""The one way an input file's validation errors are told: field, FILE:LINE, and a did-you-mean.

Inventories and gate policies are both read with :mod:`k3lab.model.safeyaml` (which records the line
of every value) and validated by strict pydantic models; :func:`describe` turns pydantic's errors into
one line per problem, naming the field path, where it is in the file, and, for an unknown key or a
value outside a fixed set, the closest known one.
"""
from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from k3lab.model import hints


def _child(tp: Any, part: object) -> Any:
    """The annotation of ``part`` inside a value of annotation ``tp`` (None when unknown)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _child(get_args(tp)[0], part)
    if origin in (Union, types.UnionType):
        found = [c for a in get_args(tp) if a is not type(None) and (c := _child(a, part)) is not None]
        return found[0] if found else None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = next((f for name, f in tp.model_fields.items() if part in (name, f.alias)), None)
        return field.annotation if field is not None else None
    return _item(origin, get_args(tp), part)


def _item(origin: Any, args: tuple, part: object) -> Any:
    """The annotation of an element of a list (by index) or of a dict (by key)."""
    if origin in (list, tuple, set) and isinstance(part, int) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _model(tp: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (through Optional and Annotated), if any."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in get_args(tp):
        if (found := _model(arg)) is not None:
            return found
    return None


def model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The model whose key ``loc[-1]`` is (for an unknown key's did-you-mean)."""
    tp: Any = root
    for part in loc[:-1]:
        tp = _child(tp, part)
        if tp is None:
            return root
    return _model(tp) or root


def _keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def message(err: Mapping[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error in words, with a did-you-mean where there is a closest known value."""
    loc, value, kind = err["loc"], err.get("input"), err["type"]
    if kind == "extra_forbidden":
        fields = _keys(model_at(root, loc))
        return f"unknown key{hints.hint(str(loc[-1]), fields, 0.5)} (known: {', '.join(fields)})"
    if isinstance(value, bool) and kind in ("int_type", "string_type", "float_type"):
        want = "a number" if kind != "string_type" else "text"
        return f"expected {want}, got the boolean {str(value).lower()} (YAML reads true/false/yes/no/on/off as " \
               f"booleans; {'quote it' if kind == 'string_type' else 'write the number'})"
    if kind in ("int_type", "int_from_float") and isinstance(value, (float, str)):
        return f"expected a whole number, got {value!r}"
    if kind == "missing":
        return "required key is missing"
    text = err["msg"].removeprefix("Value error, ")
    if kind == "literal_error" and isinstance(value, str):
        return f"{text}, got {value!r}" + hints.hint(value, re.findall(r"'([^']*)'", str((err.get("ctx") or {})
                                                                                        .get("expected", ""))), 0.5)
    return text


def describe(exc: ValidationError, data: object, source: str, root: type[BaseModel], lines=None,
             where: Callable[[tuple], list[str]] | None = None,
             say: Callable[[Mapping[str, Any]], str | None] | None = None) -> str:
    """Every error of ``exc`` as ``field (context, FILE:LINE): message``, one a line.

    ``lines``: safeyaml's line map of ``data``; ``where(loc)``: extra context (e.g. the node's name);
    ``say(err)``: a caller's own wording for an error, else :func:`message`."""
    out = []
    for err in exc.errors():
        loc = err["loc"]
        context = list(where(loc)) if where else []
        line = lines.line(data, loc) if lines is not None else None
        if line is not None:
            context.append(f"{source}:{line}")
        field = ".".join(str(p) for p in loc)
        suffix = f" ({', '.join(context)})" if context else ""
        msg = (say(err) if say else None) or message(err, root)
        out.append(f"{field}{suffix}: {msg}" if field else msg)  # whole-model errors already name their field
    return "\n".join(out)
