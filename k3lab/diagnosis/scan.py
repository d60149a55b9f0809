"""Every catalogued signature over one log file: the lines that hold a signature's needle (a literal of every match
it can have) are the only lines its regex is tried on.

With google-re2 installed, all needles are found in ONE pass: RE2 compiles their alternation to one DFA, linear in
the file and independent of the number of needles (0.01-0.02 s on the 100 MB benchmark's 5.8 MB file, against
0.15 s for the 36 passes below). Without it, the stdlib scan makes one pass per needle (``bytes.find``), short
needles joined by their first byte. Both try the same signatures on the same lines in the same order; the tests
compare them on every corpus file.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from k3lab.diagnosis.catalogue import Signature

try:  # an optional native dependency: the scan is only faster with it, never different
    import re2
except ImportError:  # pragma: no cover - the stdlib scan below
    re2 = None

MAX_MATCHES = 2000  # per signature and file: a log repeating one error a million times is counted that far
MAX_CANDIDATES = 200_000  # lines holding one needle in one file that are tried at most
RE2_MAX_MEM = 64 << 20  # the DFA's cache: 70 needles need a few MB; above the limit RE2 falls back, never fails


def line_at(data: bytes, pos: int) -> tuple[int, int]:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return start, len(data) if end < 0 else end


class Seen:
    """Per signature of one file: matches counted (to MAX_MATCHES) and the first line starts kept; lines before
    ``floor`` (where the service came up for good) are not counted: what it printed before did not stop it."""

    def __init__(self, floor: int = 0, keep: int = 20) -> None:
        self.count: dict[int, int] = {}
        self.starts: dict[int, list[int]] = {}
        self.floor = floor
        self.keep = keep

    def add(self, i: int, start: int) -> bool:
        if start < self.floor:
            return True
        n = self.count.get(i, 0)
        if n >= MAX_MATCHES:
            return False
        self.count[i] = n + 1
        kept = self.starts.setdefault(i, [])
        if len(kept) < self.keep:
            kept.append(start)
        return True


Sigs = list[tuple[int, Signature]]


def scan(data: bytes, needles: list[tuple[bytes, list[int]]], sig_of: Callable[[int], Signature],
         active: set[int], seen: Seen, one_pass: bool | None = None) -> None:
    """Each active signature over ``data`` (``needles``: the catalogue's, indexes into its signatures); matches go to
    ``seen``. ``one_pass``: None uses RE2 when it is installed; False forces the stdlib scan (the tests' reference)."""
    literal: list[tuple[bytes, Sigs]] = []
    for needle, sigs in _active(needles, sig_of, active):
        if needle:
            literal.append((needle, sigs))
        else:  # no literal: the regex scans the whole file
            _whole_file(data, sigs, seen)
    if not literal:
        return
    if re2 is not None if one_pass is None else one_pass:
        _one_pass(data, literal, seen)
        return
    for pass_needle, sigs in _passes([(n, [i for i, _ in s]) for n, s in literal], dict(i for _, s in literal for i in s)):
        _scan_needle(data, pass_needle, sigs, seen)


def _active(needles: list[tuple[bytes, list[int]]], sig_of: Callable[[int], Signature],
            active: set[int]) -> list[tuple[bytes, Sigs]]:
    """Each needle with its active signatures; a needle none of whose signatures is active is dropped."""
    out = [(n, [(i, sig_of(i)) for i in idx if i in active]) for n, idx in needles]
    return [(n, sigs) for n, sigs in out if sigs]


def _whole_file(data: bytes, sigs: Sigs, seen: Seen) -> None:
    for i, sig in sigs:
        for m in sig.regex.finditer(data):
            if not seen.add(i, line_at(data, m.start())[0]):
                break


@lru_cache(maxsize=8)
def _alternation(needles: tuple[bytes, ...]) -> Any:
    # every byte of a needle as a hex escape unless it is a letter or digit: no needle is ever read as syntax
    body = b"|".join(b"".join(bytes([c]) if c < 128 and chr(c).isalnum() else b"\\x%02x" % c for c in n) for n in needles)
    opt = re2.Options()
    opt.encoding = re2.Options.Encoding.LATIN1  # logs are bytes, not always UTF-8; needles are ASCII
    opt.never_capture = True
    opt.max_mem = RE2_MAX_MEM
    return re2.compile(body, opt)


def _one_pass(data: bytes, literal: list[tuple[bytes, Sigs]], seen: Seen) -> None:
    """One RE2 search over the file for any needle; on each line it stops at, every needle the line holds (found by
    its own ``in``: a line may hold several, or one overlapping another) has its signatures tried, as the per-needle
    passes would; each needle's candidate lines are counted to MAX_CANDIDATES as there."""
    rx = _alternation(tuple(n for n, _ in literal))
    tried = [0] * len(literal)
    pos = 0
    while True:
        m = rx.search(data, pos)
        if m is None:
            return
        start, end = line_at(data, m.start())
        line = data[start:end]
        for k, (needle, sigs) in enumerate(literal):
            if tried[k] < MAX_CANDIDATES and needle in line:
                tried[k] += 1
                for i, sig in sigs:
                    if sig.regex.search(data, start, end):
                        seen.add(i, start)
        if end >= len(data):
            return
        pos = end + 1


def _scan_needle(data: bytes, needle: bytes | re.Pattern[bytes], sigs: Sigs, seen: Seen) -> None:
    """Lines holding ``needle`` tried against each signature that shares it (a pattern: the short needles of
    :func:`_passes`, any of them)."""
    pos, tried = _next(data, needle, 0), 0
    while pos >= 0 and tried < MAX_CANDIDATES:
        start, end = line_at(data, pos)
        for i, sig in sigs:
            if sig.regex.search(data, start, end):
                seen.add(i, start)
        tried += 1
        pos = _next(data, needle, end)


def _next(data: bytes, needle: bytes | re.Pattern[bytes], at: int) -> int:
    if isinstance(needle, bytes):
        return data.find(needle, at)
    m = needle.search(data, at)
    return m.start() if m else -1


# bytes.find on a needle this short barely skips (about 1 GB/s, a pass per needle); short needles that share
# their first byte are found in one regex pass instead: re factors the shared byte out as its literal prefix
# (the 100 MB benchmark: six CANN error codes E..... in one pass, not six); up to 16 bytes a needle still joins: 36
# passes instead of 40 on the catalogue of #32's seventh pass, about 5% less scan time (a 5.8 MB file, best of 5)
SHORT_NEEDLE = 16


def _passes(needles: list[tuple[bytes, list[int]]], sig: dict[int, Signature]) -> list[tuple[bytes | re.Pattern[bytes], Sigs]]:
    """The needles as stdlib scan passes: a short needle with others of its first byte joins their alternation
    (each signature still matches only lines holding its own needle: it is a literal of the match)."""
    out: list[tuple[bytes | re.Pattern[bytes], list[int]]] = []
    short: dict[int, list[tuple[bytes, list[int]]]] = {}
    for needle, idx in needles:
        if len(needle) < SHORT_NEEDLE:
            # a leading space is the commonest byte of a log: the pass would stop at every one of them; the needle
            # without it is still a literal of every match it stands for (the signature's regex decides the line)
            bare = needle.lstrip(b" ")
            needle = bare if len(bare) >= 4 else needle
            short.setdefault(needle[0], []).append((needle, idx))
        else:
            out.append((needle, idx))
    for group in short.values():
        if len(group) == 1:
            out.append(group[0])
        else:
            out.append((re.compile(b"|".join(re.escape(n) for n, _ in group)), sorted(i for _, idx in group for i in idx)))
    return [(n, [(i, sig[i]) for i in idx]) for n, idx in out]
