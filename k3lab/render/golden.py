"""The one comparison with ``golden/``: the release's static stage, the suite's golden check and the
golden snapshot test (syrupy, which also updates it) all name the same file for an artefact."""
from __future__ import annotations

from collections.abc import Callable

from k3lab import paths
from k3lab.model.plan import Plan


def path(scenario: str, node: str, artefact: str):
    """golden/<scenario>/<node>/<artefact>.txt"""
    return paths.GOLDEN / scenario / node / f"{artefact}.txt"


def drift(plan: Plan, text_of: Callable[[str, str], str]) -> list[str]:
    """``node/artefact`` of every planned artefact whose text (``text_of(node, artefact)``) differs from
    golden/, or has no golden file."""
    differ = []
    for node in plan.nodes:
        for art in node.artefacts:
            golden = path(plan.scenario, node.name, art.name)
            if not golden.is_file() or golden.read_text() != text_of(node.name, art.name):
                differ.append(f"{node.name}/{art.name}")
    return differ
