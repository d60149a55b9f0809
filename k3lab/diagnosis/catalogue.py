"""The catalogue of known failure modes (``catalogue.yaml`` beside this module), validated and compiled.

Each cause has signatures (regular expressions over one log line, each with the component version range
it holds for), optional container exit codes and conformance check ids, an explanation, a remedy and its
sources. The YAML is data: adding a cause needs no code, only real, sourced excerpts that its signatures
match, under ``tests/fixtures/failure_logs/<id>/`` or the development part of the real corpus
(``tests/fixtures/triage_corpus/dev/<id>--<thread>.log``); its held-out part measures them, never shapes them.
"""
from __future__ import annotations

import heapq
import re
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from k3lab.errors import InputError

CATALOGUE = Path(__file__).with_name("catalogue.yaml")
# "<package> <PEP 440 specifiers>": the component a signature's wording belongs to, and its releases
_VERSIONS = re.compile(r"(?P<package>[A-Za-z][\w.-]*)\s+(?P<spec>[<>=!~][^\s]*)")


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=4)
    ignorecase: bool = False
    versions: str = ""  # e.g. "vllm >=0.8": the releases that print this line
    # set on the signatures error_codes.yaml adds (never in catalogue.yaml): a documented code decides its
    # cause only when no signature written for a cause's own wording matches (see engine._order)
    code: str = ""
    # a regular expression the same log file must also match somewhere: a line whose wording alone is shared with
    # other causes (an MTE address error: any faulty kernel) names this cause only beside the context that makes it so
    context: str = ""

    @field_validator("pattern", "context")
    @classmethod
    def _compiles(cls, v: str) -> str:
        if not v:
            return v
        try:
            re.compile(v.encode())
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        if re.compile(v.encode()).match(b""):
            raise ValueError("matches an empty line")
        return v

    @field_validator("versions")
    @classmethod
    def _range(cls, v: str) -> str:
        if v and not _VERSIONS.fullmatch(v.strip()):
            raise ValueError("must read '<package> <specifiers>', e.g. 'vllm >=0.8,<0.11'")
        return v

    @cached_property
    def anchor(self) -> bytes:
        """The longest literal every match contains (b"" when there is none): a fast ``bytes.find`` for it
        finds the few candidate lines, and only those meet the regular expression."""
        return b"" if self.ignorecase else _anchor(self.pattern)

    @cached_property
    def regex(self) -> re.Pattern[bytes]:
        # bytes: logs are read as bytes (no decoding of 100 MB), and a leading literal keeps the scan fast
        return re.compile(self.pattern.encode(), re.IGNORECASE if self.ignorecase else 0)

    @cached_property
    def context_regex(self) -> re.Pattern[bytes] | None:
        return re.compile(self.context.encode()) if self.context else None

    def holds_for(self, versions: dict[str, str]) -> bool:
        """False only when the run's version of the signature's component is known and outside its range."""
        m = _VERSIONS.fullmatch(self.versions.strip()) if self.versions else None
        if not m:
            return True
        have = _version_of(versions, m["package"])
        if have is None:
            return True
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return Version(have) in SpecifierSet(m["spec"])
        except (InvalidVersion, InvalidSpecifier):
            return True  # an unparseable version says nothing against the signature


def _literals(pattern: str) -> list[bytes]:
    """The literal runs (ASCII, at least 3 bytes) every match of ``pattern`` contains, in order."""
    try:
        from re import _parser as sre  # type: ignore[attr-defined]  # the stdlib's own pattern parser

        items = sre.parse(pattern).data
        literal = sre.LITERAL
    except Exception:  # noqa: BLE001 - no literal only costs speed
        return []
    out, run = [], bytearray()
    for op, arg in [*items, (None, None)]:
        if op is literal and arg < 128:  # ASCII: the logs are searched as bytes
            run.append(arg)
            continue
        if len(run) >= 3:
            out.append(bytes(run))
        run = bytearray()
    return out


def _anchor(pattern: str) -> bytes:
    return max(_literals(pattern), key=len, default=b"")


SHARED_MIN = 6  # a shared needle is at least this long: 6 keeps the 100 MB benchmark at ~40 passes (9: ~60), shorter is too common
# error codes share shorter needles ("EI00" for EI0002/EI0006/EI0009/EI0019, "5070" for the 5070xx ACL codes): a
# code is 6 characters, so each would otherwise cost a pass of its own over every log
CODE_SHARED_MIN = 4


def needles(signatures: list[Signature]) -> list[tuple[bytes, list[int]]]:
    """Few needles for many signatures: greedily, the substring (>= SHARED_MIN bytes) of their literals that
    the most signatures not yet covered contain; a signature no shared needle covers keeps its own anchor
    (b"": no literal, the regex scans the whole file). One ``bytes.find`` pass per needle, not per signature."""
    cands: dict[bytes, set[int]] = {}
    for i, sig in enumerate(signatures):
        low = CODE_SHARED_MIN if sig.code else SHARED_MIN
        subs = {run[k:k + n] for run in ([] if sig.ignorecase else _literals(sig.pattern))
                for n in range(low, min(len(run), 24) + 1) for k in range(len(run) - n + 1)}
        for sub in subs:
            cands.setdefault(sub, set()).add(i)
    left, out = set(range(len(signatures))), []
    # the greedy's choice, most signatures left covered, then the longer, then the greater substring, kept in a heap
    # instead of a scan of every candidate per choice (seconds on every load): a candidate's cover only shrinks as
    # signatures are covered, so a popped key that is still its cover is the maximum; a stale one is keyed again
    rank = {sub: r for r, sub in enumerate(sorted(cands, reverse=True))}
    heap = [(-len(idx), -len(sub), rank[sub], sub) for sub, idx in cands.items()]
    heapq.heapify(heap)
    while heap:
        count, length, r, best = heapq.heappop(heap)
        covered = cands[best] & left
        if len(covered) < -count:
            heapq.heappush(heap, (-len(covered), length, r, best))
            continue
        if len(covered) < 2:
            break
        out.append((best, sorted(covered)))
        left -= covered
    by_anchor: dict[bytes, list[int]] = {}
    for i in sorted(left):
        by_anchor.setdefault(signatures[i].anchor, []).append(i)
    return out + sorted(by_anchor.items())


def _version_of(versions: dict[str, str], package: str) -> str | None:
    want = package.lower().replace("-", "_")
    for key, value in versions.items():
        if key.lower().replace("-", "_") == want and value:
            return str(value).split("+")[0].strip()
    return None


class Cause(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    component: str
    title: str
    # a cause found anywhere ranks above every symptom (timeouts, dead engines that follow from it)
    tier: Literal["cause", "symptom"]
    weight: int = Field(ge=0, le=100)
    signatures: list[Signature] = Field(min_length=1)
    exit_codes: list[int] = Field(default_factory=list)  # a container's exit code that points here
    checks: list[str] = Field(default_factory=list)  # fnmatch patterns over failing conformance check ids
    explanation: str
    remedy: str
    sources: list[str] = Field(min_length=1)
    # the cause's meaning, for a first error no signature explains (another project's wording): alternatives, each a
    # list of word groups that must all appear on one line (a word of each group; case-insensitive, whole words)
    meaning: list[list[list[str]]] = Field(default_factory=list)
    # words that take a line out of the meaning: what the signatures exclude too (npu-oom: a request of "more than 1EB"
    # is a size computed from corrupted values, not memory that ran out)
    meaning_unless: list[str] = Field(default_factory=list)

    @field_validator("meaning")
    @classmethod
    def _two_kinds(cls, v: list[list[list[str]]]) -> list[list[list[str]]]:
        # precision over recall: one concept alone ("memory", "port") is on too many unrelated lines
        if any(len(alt) < 2 or not all(alt) for alt in v):
            raise ValueError("each meaning needs at least two non-empty word groups")
        return v

    @cached_property
    def meaning_regexes(self) -> list[list[re.Pattern[str]]]:
        return [[_group(words) for words in alt] for alt in self.meaning]

    def means(self, line: str) -> bool:
        """The line holds a word of every group of one alternative of the cause's meaning."""
        if self.meaning_unless and _group(self.meaning_unless).search(line):
            return False
        return any(all(rx.search(line) for rx in alt) for alt in self.meaning_regexes)


# a word's edge: no ASCII letter, digit or underscore beside it. Not \b: Chinese text runs English terms into its own
# words with no space ("torch-npu==2.7.1导入时报错undefined symbol: ...", triton-ascend#328), and for \b a CJK character
# is a word character like a letter
_BEFORE, _AFTER = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"


def _group(words: list[str]) -> re.Pattern[str]:
    # whole words: "tp" is no part of "http", "hub" none of "github"
    parts = [(_BEFORE if w[0].isalnum() else "") + re.escape(w) + (_AFTER if w[-1].isalnum() else "") for w in words]
    return re.compile("|".join(parts), re.IGNORECASE)


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    causes: list[Cause] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Catalogue:
        seen: set[str] = set()
        for c in self.causes:
            if c.id in seen:
                raise ValueError(f"cause {c.id} appears twice")
            seen.add(c.id)
        return self

    @cached_property
    def signatures(self) -> list[tuple[Cause, Signature]]:
        """Every cause's own signatures, then one per error code whose documented meaning names a cause."""
        return [(c, sig) for c in self.causes for sig in c.signatures] + self.code_signatures

    @cached_property
    def code_signatures(self) -> list[tuple[Cause, Signature]]:
        from k3lab.diagnosis import codes

        by_id = {c.id: c for c in self.causes}
        return [(by_id[c.cause], Signature(pattern=codes.pattern(code), code=code))
                for code, c in codes.load().codes.items() if c.cause in by_id]

    @cached_property
    def needles(self) -> list[tuple[bytes, list[int]]]:
        """Needles over :attr:`signatures` (indexes into it), see :func:`needles`."""
        return needles([sig for _, sig in self.signatures])

    def get(self, cause_id: str) -> Cause:
        return next(c for c in self.causes if c.id == cause_id)

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.causes]


@lru_cache(maxsize=4)
def load(path: Path = CATALOGUE) -> Catalogue:
    """The catalogue, validated; a broken file is an InputError naming the file and the field."""
    from k3lab.model import safeyaml

    data, _ = safeyaml.load(path, "failure catalogue")
    try:
        return Catalogue.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise InputError(f"{path}: field {where}: {err['msg']}") from None
