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
                      r"|(?:[Ee]rror ?[Cc]ode(?: is|:)?|result ?=|failed:|ErrCode=|ret(?:code)?:)\s*(\d{6})\b"
                      r"|\bret is (-80\d\d)\b")  # the driver's DCMI return codes ("ret is -8020")


class Code(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    meaning: str = Field(min_length=3)
    source: str = Field(min_length=8)
    # the catalogue cause the documented meaning names ("" for a generic code such as EE9999: the lines after
    # it give the reason); a line carrying the code decides that cause unless a more specific signature matches
    cause: str = Field(default="", pattern=r"^([a-z0-9]+(-[a-z0-9]+)*)?$")


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
        code = m[1] or m[2] or m[3]
        if code in table and code not in found:
            found[code] = table[code]
    return list(found.items())


def describe(line: str) -> str:
    """``code NAME: meaning; ...`` for the known codes of ``line`` ("" when it has none)."""
    return "; ".join(f"{code}{f' {c.name}' if c.name else ''}: {c.meaning}" for code, c in decode(line))


def pattern(code: str) -> str:
    """A regular expression for ``code`` where the stack prints it: a CANN code (EI0002) as a word, an ACL
    number after the words that announce it ("error code is 507033", "ErrCode=", "result = ", "ret: "),
    a DCMI return code after "ret is"."""
    if code.startswith("-"):
        return rf"\bret is {code}\b"
    if code.isdigit():
        return rf"(?:[Ee]rror ?[Cc]ode|ErrCode|result|ret(?:code)?|failed)(?: is|:| ?=)? ?{code}\b"
    return rf"\b{code}\b"
