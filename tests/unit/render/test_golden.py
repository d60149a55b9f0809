"""Every rendered artefact of every scenario, default inventory, against golden/.

Update with ``nox -s golden -- --snapshot-update`` and review the diff.
"""
from __future__ import annotations

import pytest

from k3lab.model import catalog, siminventory
from k3lab.render import artefacts as render
from k3lab.render import runbook
from tests.golden_ext import GoldenArtefact


def _artefacts():
    for sid in catalog.SCENARIOS:
        rendered = render.build(sid, siminventory.default(sid))
        for node, files in rendered.files.items():
            for name, text in files.items():
                yield pytest.param(text, id=f"{sid}/{node}/{name}")
        yield pytest.param(render.plan_json(rendered.plan), id=f"{sid}/plan.json")
        yield pytest.param(runbook.text(rendered.plan), id=f"{sid}/{runbook.NAME}")


@pytest.mark.parametrize("text", list(_artefacts()))
def test_golden(text, snapshot):
    assert text == snapshot(extension_class=GoldenArtefact)
