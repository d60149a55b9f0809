"""Every target is one kind (model layer) and one implementation (launchers): consumers ask the kind's facts,
never compare a target's name. Adding a target must not mean editing the renderer, preflight or reports."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from k3lab.errors import UsageError
from k3lab.launch import targets
from k3lab.model import select, targetkinds

ROOT = Path(__file__).resolve().parents[3]
# a comparison of a target's name with a literal: `target == "sim"`, `plan.target != "lab"`, `tgt == 'lab'`
NAME_BRANCH = re.compile(r"""\b(?:target|tgt)\s*(?:==|!=)\s*["'](?:sim|lab)["']|["'](?:sim|lab)["']\s*(?:==|!=)\s*\w*target""")
ALLOWED = {ROOT / "k3lab" / "model" / "targetkinds.py"} | set((ROOT / "k3lab" / "launch" / "targets").glob("*.py"))


def test_every_registered_target_has_a_kind_and_back():
    assert set(targets.names()) == set(targetkinds.KINDS)


def test_no_target_name_branch_outside_the_target_modules():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for folder in ("k3lab", "conformance") for p in sorted((ROOT / folder).rglob("*.py"))
             if p not in ALLOWED and "k3sim" not in p.parts
             for i, line in enumerate(p.read_text().splitlines(), 1) if NAME_BRANCH.search(line)]
    assert found == [], "ask targetkinds.kind(name) for the fact instead:\n" + "\n".join(found)


def test_the_detector_sees_a_branch():
    assert NAME_BRANCH.search('    if plan.target == "sim":') and NAME_BRANCH.search("if tgt != 'lab'")


def test_target_selection():
    assert select.target("a3_pd", None, None) == "sim"
    assert select.target("a3_pd", None, "lab.yaml") == "lab"
    with pytest.raises(UsageError, match="--target lab needs the lab's inventory"):
        select.target("a3_pd", "lab", None)
    with pytest.raises(UsageError, match="unknown target 'k9s'"):
        targetkinds.kind("k9s")


def test_sim_deviations_come_from_its_kind():
    from k3lab.model import catalog, deviations

    sc = catalog.SCENARIOS["a3_pd"]
    sim = {d["id"] for d in deviations.for_scenario(sc, {}, "sim")}
    lab = {d["id"] for d in deviations.for_scenario(sc, {}, "lab")}
    assert {d[0] for d in targetkinds.KINDS["sim"].deviations} <= sim
    assert sim - lab == {d[0] for d in targetkinds.KINDS["sim"].deviations} | {"sim-vllm-ascend"}
