"""Every rendered artefact of every scenario, default inventory, against golden/; and the Kubernetes
manifests (``render --target k8s``, the k8s inventory of tests/unit/render/test_k8s.py) under golden/<scenario>/k8s/.

Update with ``nox -s golden -- --snapshot-update`` and review the diff.
"""
from __future__ import annotations

import pytest

from k3lab.model import catalog, siminventory
from k3lab.render import artefacts as render
from k3lab.render import runbook
from tests.golden_ext import GoldenArtefact
from tests.unit.render.test_k8s import rendered as rendered_k8s


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


def _manifests():
    for sid in catalog.SCENARIOS:
        for name, text in rendered_k8s(sid).manifests.items():
            yield pytest.param(text, id=f"{sid}/k8s/{name}")


@pytest.mark.parametrize("text", list(_manifests()))
def test_golden_k8s(text, snapshot):
    assert text == snapshot(extension_class=GoldenArtefact)
