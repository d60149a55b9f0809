"""catalogue.needles keeps the greedy choice in a heap: the same needles, in the same order, as a scan of every candidate
per choice (the plain greedy below), on the catalogue itself."""
from __future__ import annotations

from k3lab.diagnosis import catalogue
from k3lab.diagnosis.catalogue import CODE_SHARED_MIN, SHARED_MIN, Signature, _literals, needles


def _plain_greedy(signatures: list[Signature]) -> list[tuple[bytes, list[int]]]:
    cands: dict[bytes, set[int]] = {}
    for i, sig in enumerate(signatures):
        low = CODE_SHARED_MIN if sig.code else SHARED_MIN
        subs = {run[k:k + n] for run in ([] if sig.ignorecase else _literals(sig.pattern))
                for n in range(low, min(len(run), 24) + 1) for k in range(len(run) - n + 1)}
        for sub in subs:
            cands.setdefault(sub, set()).add(i)
    left, out = set(range(len(signatures))), []
    while cands:
        best = max(cands, key=lambda x: (len(cands[x] & left), len(x), x))
        covered = cands.pop(best) & left
        if len(covered) < 2:
            break
        out.append((best, sorted(covered)))
        left -= covered
    by_anchor: dict[bytes, list[int]] = {}
    for i in sorted(left):
        by_anchor.setdefault(signatures[i].anchor, []).append(i)
    return out + sorted(by_anchor.items())


def test_the_heap_picks_the_needles_the_plain_greedy_picks():
    sigs = [s for _, s in catalogue.load().signatures]
    assert needles(sigs) == _plain_greedy(sigs)


def test_the_heap_picks_the_needles_the_plain_greedy_picks_on_a_part_of_the_catalogue():
    sigs = [s for _, s in catalogue.load().signatures][::3]  # other overlaps, other ties
    assert needles(sigs) == _plain_greedy(sigs)
