"""The stand-in model's tool arguments satisfy the request's own JSON schema (checked with jsonschema)."""
from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.standins._vllm import SITE  # noqa: F401  (puts the stand-in site on sys.path)
from k3sim.vllm.output import schema  # noqa: E402

CASES = {
    "pattern": {"type": "string", "pattern": "^R[0-9]{2}$"},
    "pattern-ip": {"type": "string", "pattern": r"^(\d{1,3}\.){3}\d{1,3}$"},
    "pattern-negated": {"type": "string", "pattern": "^[^0-9]{2,}$"},
    "pattern-and-length": {"type": "string", "pattern": "^H(a|b)+$", "minLength": 3, "maxLength": 4},
    "pattern-unanchored": {"type": "string", "pattern": "x[yz]"},
    "pattern-any": {"type": "string", "pattern": "^a.c$"},
    "bounds-int": {"type": "integer", "minimum": 3, "maximum": 9, "multipleOf": 2},
    "bounds-exclusive": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    "negative": {"type": "integer", "minimum": -5, "maximum": -1},
    "enum": {"enum": ["fast", "safe"]},
    "const": {"const": 7},
    "nullable": {"type": ["string", "null"], "maxLength": 3},
    "null": {"type": "null"},
    "boolean": {"type": "boolean"},
    "format": {"type": "string", "format": "email"},
    "unique": {"type": "array", "minItems": 3, "uniqueItems": True, "items": {"type": "string", "pattern": "^[a-z]+-\\d$"}},
    "unique-int": {"type": "array", "minItems": 2, "uniqueItems": True, "items": {"type": "integer"}},
    "nested": {"type": "object", "additionalProperties": False, "required": ["a"], "properties": {
        "a": {"type": "object", "required": ["b"], "properties": {"b": {"type": "array", "items": {"$ref": "#/$defs/r"}}}}},
        "$defs": {"r": {"type": "string", "pattern": "^R[0-9]{2}$"}}},
    "min-properties": {"type": "object", "minProperties": 2, "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}},
    "all-of": {"allOf": [{"type": "object", "properties": {"k": {"type": "integer", "minimum": 5}}, "required": ["k"]}]},
    "any-of": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^v[0-9]$"}]},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_satisfies_schema(name):
    value = schema.example(CASES[name])
    jsonschema.Draft202012Validator(CASES[name]).validate(value)
    assert schema.example(CASES[name]) == value  # deterministic


_PATTERNS = st.sampled_from(["^[A-Z]{2}[0-9]{3}$", "^(ab|cd)+x?$", r"^\w+@\w+\.com$", "^[a-f0-9]{8}-[a-f0-9]{4}$",
                             r"^\d{1,3}(\.\d{1,3}){3}$", "^[^ ]+$", "^(?:rack|row)-[0-9]+$"])


@settings(max_examples=40, deadline=None)
@given(pattern=_PATTERNS, lo=st.integers(0, 3), extra=st.integers(0, 10))
def test_pattern_strings_match_within_lengths(pattern, lo, extra):
    s = {"type": "string", "pattern": pattern, "minLength": lo, "maxLength": lo + extra + 40}
    value = schema.example(s)
    jsonschema.validate(value, s)
