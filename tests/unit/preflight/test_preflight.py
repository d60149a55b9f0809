"""Every preflight check: one mutation that triggers exactly it, and the healthy default that passes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from k3lab.model import catalog, siminventory
from k3lab.model.inventory import Inventory
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render
from k3lab.tools import faults


def rendered(sid: str, **inv_update) -> render.Rendered:
    inv = siminventory.default(sid)
    if inv_update:
        inv = Inventory.model_validate(inv.model_dump() | inv_update)
    return render.build(sid, inv)


def failing(r: render.Rendered, checkpoints: Path = preflight.FIXTURES) -> set[str]:
    return {f.check for f in preflight.run(r.plan, r.files, checkpoints)}


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_healthy_default_passes_every_check(sid):
    r = rendered(sid)
    assert preflight.run(r.plan, r.files) == []


@pytest.mark.parametrize("fault", faults.STATIC, ids=lambda f: f.id)
def test_static_fault_fails_exactly_its_check(fault):
    assert faults.run_static(fault) == set(fault.expect)
    r = fault.mutate()
    finding = next(f for f in preflight.run(r.plan, r.files, sim_subnet=r.sim_subnet) if f.check in fault.expect)
    assert "Remedy:" in finding.message and finding.message.split("Remedy:")[0].strip()


def test_every_check_has_a_static_fault():
    covered = {c for f in faults.STATIC for c in f.expect} | {"PF-TP-HEADS"}
    assert covered == {c.id for c in preflight.CHECKS}


def test_tp_not_dividing_heads(tmp_path):
    for name in ("Kimi-K3.1-Pro-w4a8", "Kimi-K3.1-Pro-DSpark3"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"num_attention_heads": 60, "num_hidden_layers": 93}))
    r = rendered("a3_pd")
    assert failing(r, tmp_path) == {"PF-TP-HEADS"}


def test_missing_checkpoint_is_a_warning(tmp_path):
    r = rendered("a3_pd")
    found = preflight.run(r.plan, r.files, tmp_path)
    assert [f.check for f in found] == ["PF-CHECKPOINT"] and found[0].severity == "warning"


def test_k3_launcher_seed_defect_is_a_listed_deviation():
    r = rendered("k3_a3_pd")
    launcher = next(p for p in r.plan.processes() if p.id == "p0/launcher")
    assert "--pp-size" not in launcher.argv
    assert any(d.id == "k3-pp-size" for d in r.plan.deviations)
