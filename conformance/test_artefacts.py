"""Golden: what the nodes actually run equals the rendered plan, and the golden snapshots by default."""
from __future__ import annotations

from pathlib import Path

import pytest

from conformance.plugin import conformance

KIND = "kit"  # a mismatch here means the kit staged something other than what it rendered
GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def _staged(node):
    return [a for a in node.artefacts if a.path.startswith("/")]


@conformance(area="golden", must="Every artefact staged on a node MUST equal the rendered file, byte for byte.")
def test_staged_artefacts_match_rendered(node, hosts, run_dir):
    if not _staged(node):
        pytest.skip("no staged artefacts")
    differ = []
    for art in _staged(node):
        live = hosts[node.name].file(art.path)
        rendered = (run_dir / "rendered" / node.name / art.name).read_text()
        if not live.exists or live.content_string != rendered:
            differ.append(art.path)
    assert not differ, f"{node.name}: staged files differ from the rendered plan: {differ}"


@conformance(area="golden", must="With the default inventory, the rendered artefacts MUST equal golden/.")
def test_rendered_equals_golden(plan, run_dir):
    if plan.inventory != "default (sim)":
        pytest.skip("a lab inventory renders its own values; compare with k3lab render and golden/ by hand")
    differ = []
    for node in plan.nodes:
        for art in node.artefacts:
            golden = GOLDEN / plan.scenario / node.name / f"{art.name}.txt"
            rendered = run_dir / "rendered" / node.name / art.name
            if not golden.is_file() or golden.read_text() != rendered.read_text():
                differ.append(f"{node.name}/{art.name}")
    assert not differ, f"rendered artefacts drifted from golden/: {differ} (review, then nox -s golden -- --snapshot-update)"
