"""The Ascend stack's error codes (``error_codes.yaml`` beside this module) and decoding them in a log line.

A first error no catalogued cause explains is shown with the meaning of the codes it carries: ACL runtime
codes (507014 ...) as the runtime prints them ("error code is N", "runtime result = N", "failed: N",
"ErrCode=N"), CANN/HCCL codes (EI0006 ...) and torch_npu's ERRnnnnn.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from k3lab.errors import InputError

CODES = Path(__file__).with_name("error_codes.yaml")
_IN_LINE = re.compile(r"\b(E[A-Z]\d{4}|ERR\d{5})\b"
                      r"|(?:[Ee]rror ?[Cc]ode(?: is)?|result ?=|failed:|ErrCode=)\s*(\d{6})\b")


class Code(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    meaning: str = Field(min_length=3)
    source: str = Field(min_length=8)


class Codes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    codes: dict[str, Code]


@lru_cache(maxsize=2)
def load(path: Path = CODES) -> Codes:
    from k3lab.model import safeyaml

    data, _ = safeyaml.load(path, "error codes")
    try:
        return Codes.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"{path}: field {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


def decode(line: str, codes: Codes | None = None) -> list[tuple[str, Code]]:
    """The known codes in ``line``, each once, in the order they appear."""
    table = (codes or load()).codes
    found: dict[str, Code] = {}
    for m in _IN_LINE.finditer(line):
        code = m[1] or m[2]
        if code in table and code not in found:
            found[code] = table[code]
    return list(found.items())


def describe(line: str) -> str:
    """``code NAME: meaning; ...`` for the known codes of ``line`` ("" when it has none)."""
    return "; ".join(f"{code}{f' {c.name}' if c.name else ''}: {c.meaning}" for code, c in decode(line))
