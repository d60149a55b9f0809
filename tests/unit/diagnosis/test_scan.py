"""The signature scan: RE2's one pass and the stdlib's per-needle passes try the same signatures on the same lines."""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis import catalogue, scan
from k3lab.diagnosis.catalogue import Signature

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"
needs_re2 = pytest.mark.skipif(scan.re2 is None, reason="google-re2 is not installed")


def _seen(data: bytes, cat: catalogue.Catalogue, one_pass: bool) -> tuple[dict[int, int], dict[int, list[int]]]:
    seen = scan.Seen()
    pairs = cat.signatures
    scan.scan(data, cat.needles, lambda i: pairs[i][1], set(range(len(pairs))), seen, one_pass=one_pass)
    return seen.count, seen.starts


@needs_re2
def test_both_scans_find_the_same_lines_on_every_corpus_log():
    cat = catalogue.load()
    logs = sorted(CORPUS.rglob("*.log"))
    assert len(logs) > 800
    hit = 0
    for log in logs:
        data = log.read_bytes()
        fast = _seen(data, cat, one_pass=True)
        assert fast == _seen(data, cat, one_pass=False), log.name
        hit += bool(fast[0])
    assert hit > 400  # the comparison is not between two empty scans


def _one(pattern: str) -> tuple[list[tuple[bytes, list[int]]], list[Signature]]:
    sigs = [Signature(pattern=pattern)]
    return catalogue.needles(sigs), sigs


@needs_re2
@pytest.mark.parametrize("pattern, line", [
    (r"wait socket establish timeout\. \(a\|b\) \[x\]", b"E wait socket establish timeout. (a|b) [x] now"),
    (r"C:\\path\\to\\model\.bin not found", b"OSError: C:\\path\\to\\model.bin not found"),
    (r"100% \{used\} \$HOME \^caret", b"ERROR 100% {used} $HOME ^caret"),
])
def test_a_needle_is_searched_as_literal_bytes_never_as_syntax(pattern, line):
    needles, sigs = _one(pattern)
    assert needles[0][0], "the signature has a literal needle"
    for one_pass in (True, False):
        seen = scan.Seen()
        data = b"INFO start\n" + line + b"\nINFO (a|b) [x] C: 100%\n"
        scan.scan(data, needles, lambda i: sigs[i], {0}, seen, one_pass=one_pass)
        assert seen.starts == {0: [11]}, one_pass


@needs_re2
def test_bytes_that_are_not_utf8_and_a_last_line_without_newline_are_scanned():
    needles, sigs = _one(r"Address already in use")
    data = b"\xff\xfe garbage \x80\x81\nOSError: [Errno 98] Address already in use \xe4\xb8"
    seen = scan.Seen()
    scan.scan(data, needles, lambda i: sigs[i], {0}, seen, one_pass=True)
    assert seen.starts == {0: [data.index(b"OSError")]}


@needs_re2
def test_a_repeated_line_is_counted_to_max_matches_by_both_scans():
    needles, sigs = _one(r"HCCL timeout")
    data = b"E HCCL timeout\n" * (scan.MAX_MATCHES + 50)
    for one_pass in (True, False):
        seen = scan.Seen(keep=3)
        scan.scan(data, needles, lambda i: sigs[i], {0}, seen, one_pass=one_pass)
        assert seen.count == {0: scan.MAX_MATCHES} and seen.starts == {0: [0, 15, 30]}


def test_without_re2_the_stdlib_scan_is_used(monkeypatch):
    monkeypatch.setattr(scan, "re2", None)
    needles, sigs = _one(r"Address already in use")
    seen = scan.Seen()
    scan.scan(b"x\nOSError: Address already in use\n", needles, lambda i: sigs[i], {0}, seen)
    assert seen.starts == {0: [2]}


def test_an_inactive_signature_is_not_tried():
    needles, sigs = _one(r"Address already in use")
    seen = scan.Seen()
    scan.scan(b"OSError: Address already in use\n", needles, lambda i: sigs[i], set(), seen)
    assert seen.count == {}
