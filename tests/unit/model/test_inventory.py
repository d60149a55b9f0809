"""Inventory schema: every bad input is one clear line naming the field, and nothing renders."""
from __future__ import annotations

import pytest
import yaml

from k3lab.cli import main as cli
from k3lab.model import inventory, siminventory
from k3lab.render import artefacts as render

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[3] / "fixtures" / "inventories"


def base() -> dict:
    return siminventory.default("k3_a3_mixed").model_dump(mode="json")


@pytest.mark.parametrize("mutate, field, words", [
    (lambda d: d.update(nodez=[]), "nodez", "unknown key"),
    (lambda d: d["nodes"][0].update(local_ipp="1.2.3.4"), "nodes.0.local_ipp", "unknown key"),
    (lambda d: d["nodes"][1].update(name="node0"), "nodes", "duplicate node name"),
    (lambda d: d["nodes"][1].update(local_ip=d["nodes"][0]["local_ip"]), "nodes", "share local_ip"),
    (lambda d: d["nodes"][0].update(local_ip="10.0.0.300"), "nodes.0.local_ip", "not an IP address"),
    (lambda d: d["ports"].update(api=70000), "ports.api", "out of range"),
    (lambda d: d["ports"].update(hccl_range_prefill="9-1"), "ports.hccl_range_prefill", "ascending"),
    (lambda d: d["nodes"][0].update(nic=""), "nodes.0.nic", "must name a network interface"),
    (lambda d: d["nodes"][0].update(nic="eth 0"), "nodes.0.nic", "must name a network interface"),
    (lambda d: d["nodes"][0].update(endpoint="http://x"), "nodes.0.endpoint", "unix:///path"),
    (lambda d: d.update(proxy_node="nowhere"), "proxy_node", "not a node"),
    (lambda d: d["paths"].update(workdir="relative"), "paths.workdir", "absolute path"),
])
def test_bad_inventory_names_the_field(mutate, field, words):
    data = base()
    mutate(data)
    with pytest.raises(inventory.InventoryError) as exc:
        inventory.parse(data)
    lines = str(exc.value).splitlines()[1:]
    assert any(line.startswith(field) and words in line for line in lines), lines


def test_inventory_that_does_not_fit_the_scenario():
    inv = siminventory.default("k3_a3_mixed")
    with pytest.raises(inventory.InventoryError, match="needs 4 prefill node"):
        render.build("a3_pd", inv.model_copy(update={"scenario": None}))


def test_cli_reports_bad_inventory_and_renders_nothing(tmp_path, capsys):
    data = base()
    data["nodes"][0]["nic"] = ""
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert cli.main(["render", "k3_a3_mixed", "-i", str(path), "--out", str(out)]) == 2
    assert "nodes.0.nic" in capsys.readouterr().err
    assert not out.exists()


def test_json_schema_exports():
    schema = inventory.json_schema()
    assert "nodes" in schema["properties"] and schema["additionalProperties"] is False


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_lab_inventories_render_and_pass_preflight(path, tmp_path):
    inv = inventory.load(path)
    r = render.build(inv.scenario, inv, target="lab")
    from k3lab.preflight import checks as preflight
    assert preflight.errors(preflight.run(r.plan, r.files)) == []


def test_every_scenario_has_an_example_lab_inventory():
    from k3lab.model import catalog
    assert {p.stem for p in FIXTURES.glob("*.yaml")} == set(catalog.SCENARIOS)


# ------------------------------------------------------------------ hostile inventories (Hypothesis)

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

junk = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) |
                    st.text(max_size=40), lambda inner: st.lists(inner, max_size=4) |
                    st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)


@st.composite
def hostile(draw):
    data = base()
    target = draw(st.sampled_from(["top", "node", "ports", "paths", "sim"]))
    key = draw(st.sampled_from({"top": list(data) + ["extra"], "node": list(data["nodes"][0]) + ["bogus"],
                                "ports": list(data["ports"]) + ["nope"], "paths": list(data["paths"]),
                                "sim": list(data["sim"])}[target]))
    value = draw(junk)
    holder = {"top": data, "node": data["nodes"][draw(st.integers(0, len(data["nodes"]) - 1))],
              "ports": data["ports"], "paths": data["paths"], "sim": data["sim"]}[target]
    holder[key] = value
    return data


def _rank_true() -> dict:
    data = base()
    data["nodes"][0]["rank"] = True  # issue 13: read as 1, no head node, render crashed with IndexError
    return data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile())
@example(_rank_true()).via("issue 13: found only on some random seeds before")
def test_hostile_inventory_is_valid_or_one_clear_error(data):
    """Malformed input never crashes: it parses, or raises InventoryError naming fields."""
    try:
        inv = inventory.parse(data)
    except inventory.InventoryError as exc:
        lines = str(exc).splitlines()
        assert lines[0].endswith("invalid inventory") and len(lines) >= 2
        return
    try:
        render.build("k3_a3_mixed", inv)
    except (inventory.InventoryError, render.RenderError):
        pass  # a valid schema that does not fit the scenario is also a clear, named error


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200))
def test_garbage_files_are_clear_errors(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("inv") / "inv.yaml"
    path.write_bytes(blob if isinstance(blob, bytes) else blob.encode())
    try:
        inventory.load(path)
    except inventory.InventoryError:
        pass
