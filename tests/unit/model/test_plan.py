"""The renderer's plans and the default sim inventories are valid, although built without validation.

``k3lab.model.plan._Model.make`` (the renderer's constructor) and ``siminventory.default`` skip pydantic
validation so that the static commands build no validators (start-up time); these tests validate what
they produce instead, and check that ``plan.jsonable`` writes exactly what pydantic's ``model_dump`` would.
"""
from __future__ import annotations

import json

import pytest

from k3lab.model import catalog, siminventory
from k3lab.model.inventory import Inventory, Sim
from k3lab.model.plan import Gate, Plan, Stage
from k3lab.render import artefacts as render

CASES = [(sid, target, {}) for sid in catalog.SCENARIOS for target in ("sim", "lab")]
CASES += [("a3_pd", "sim", {"draft": "/root/.cache/draft"}), ("k3_a3_mixed", "lab", {"parsers": "off"})]


@pytest.mark.parametrize("sid, target, options", CASES, ids=[f"{c[0]}-{c[1]}{'-o' if c[2] else ''}" for c in CASES])
def test_rendered_plan_validates_strictly_and_dumps_as_pydantic_does(sid, target, options):
    plan = render.build(sid, siminventory.default(sid), options, target).plan
    text = render.plan_json(plan)
    validated = Plan.model_validate_json(text, strict=True)  # str for int, int for bool, ... all refused
    assert validated == plan  # every part is its model (a dict where a model belongs differs), same values
    assert json.dumps(validated.model_dump(mode="json"), indent=2) + "\n" == text
    assert json.dumps(plan.model_dump(mode="json"), indent=2) + "\n" == text


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_default_inventory_validates(sid):
    inv = siminventory.default(sid)
    assert Inventory.model_validate(inv.model_dump()) == inv
    moved = siminventory.default(sid, Sim(subnet="10.99.0.0/24", device_subnet="10.98.0.0/16"))
    assert Inventory.model_validate(moved.model_dump()) == moved


def test_renderer_constructor_still_refuses_unknown_and_missing_fields():
    with pytest.raises(TypeError, match=r"unknown fields \['timeout'\], missing \['timeout_s'\]"):
        Stage.make(name="s", processes=[], gates=[], timeout=1)
    gate = Gate.make(kind="tcp", node="p0", target="10.0.0.1:8000")
    assert gate.process is None and gate.model_fields_set == {"kind", "node", "target"}


def test_plain_defaults_are_immutable():
    # make() shares a plain default between instances, as model_construct does for immutable values
    from pydantic import BaseModel

    import k3lab.model.plan as plan_module

    models = [m for m in vars(plan_module).values() if isinstance(m, type) and issubclass(m, BaseModel)]
    for model in models:
        for name, field in model.model_fields.items():
            if field.default_factory is None and not field.is_required():
                assert isinstance(field.default, (type(None), bool, int, float, str, tuple)), (model, name)


@pytest.mark.parametrize("text", ["plain", "K3.1 Pro \u00a75.1", "caf\u00e9 \u6a21\u578b", "astral \U0001f600",
                                  "del \x7f", "ctl \x01\x1f\t\n\r\b\f", 'quote " back \\ slash /', "",
                                  "argv bytes \udcff"])
def test_plan_json_is_byte_identical_to_json_dumps(text):
    plan = render.build("a3_pd", siminventory.default("a3_pd")).plan
    odd = plan.model_copy(update={"title": text, "options": {text: text}, "inventory": text})
    assert render.plan_json(odd) == json.dumps(render.jsonable(odd), indent=2) + "\n"


def test_float_fields_dump_as_floats():
    stage = Stage.make(name="s", processes=[], gates=[], timeout_s=120)
    assert json.dumps(render.jsonable(stage)) == json.dumps(stage.model_dump(mode="json"))
