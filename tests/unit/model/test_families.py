"""One object per scenario family (#11): every catalog family has one, and nothing branches on the name."""
from __future__ import annotations

import re
import typing
from pathlib import Path

from k3lab.model import catalog
from k3lab.model import families as model_families
from k3lab.render import families

ROOT = Path(__file__).resolve().parents[3]


def test_every_family_has_one_object_with_its_model_half():
    names = set(typing.get_args(typing.get_type_hints(catalog.Scenario)["family"]))
    assert names == set(families.FAMILIES) == set(model_families.MODELS)
    for name, fam in families.FAMILIES.items():
        assert fam.name == name
        assert isinstance(fam, type(model_families.MODELS[name]))
    for sc in catalog.SCENARIOS.values():
        assert families.family(sc).name == sc.family


def test_no_branch_on_the_family_name():
    pattern = re.compile(r"\bfamily\s*(==|!=|in\b|not in\b)")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "k3lab").rglob("*.py") if "k3sim" not in p.parts
            and "rootfs" not in p.parts for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == [], "ask the family object (k3lab.render.families) instead"
