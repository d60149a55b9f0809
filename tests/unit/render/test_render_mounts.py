"""Inventory mounts in the render (issue #36 item 1): docker_run.sh bind-mounts them after the guide's,
the plan lists them as deviation inventory-mounts, and without a mounts key nothing changes."""
from __future__ import annotations

import pytest

from k3lab.model import siminventory
from k3lab.model.inventory import Inventory
from k3lab.render import artefacts
from k3lab.render.artefacts import RenderError

SID = "a3_pd_1m"


def _inv(mounts=None, node_mounts=None, **top) -> Inventory:
    data = siminventory.default(SID).model_dump(mode="json", exclude_defaults=True)
    for i, n in enumerate(data["nodes"]):
        n["local_ip"], n["endpoint"] = f"10.213.0.{11 + i}", f"ssh://root@10.213.0.{11 + i}"
    if mounts is not None:
        data["mounts"] = mounts
    for name, extra in (node_mounts or {}).items():
        next(n for n in data["nodes"] if n["name"] == name)["mounts"] = extra
    data.update(top)
    return Inventory.model_validate(data)


def test_docker_run_bind_mounts_the_weights_after_the_guides_mounts():
    r = artefacts.build(SID, _inv([{"source": "/mnt/weights", "read_only": True}],
                                  model_path="/mnt/weights/Kimi-K3.1-Pro"), {}, "lab")
    for node in r.plan.nodes:
        text = r.files[node.name]["docker_run.sh"]
        assert "    -v /root/.cache:/root/.cache \\\n    -v /mnt/weights:/mnt/weights:ro \\\n" in text
        assert node.container.mounts[-1].model_dump() == {"source": "/mnt/weights", "target": "/mnt/weights",
                                                          "read_only": True}
    dev = next(d for d in r.plan.deviations if d.id == "inventory-mounts")
    assert dev.scope == "kit" and "-v /mnt/weights:/mnt/weights:ro" in dev.what and "(nodes" not in dev.what
    assert "/root/.cache/" in dev.why


def test_per_node_mounts_are_named_in_the_deviation():
    r = artefacts.build(SID, _inv([{"source": "/mnt/weights"}],
                                  {"d3": [{"source": "/scratch/weights", "target": "/mnt/weights"}]}), {}, "lab")
    d3 = next(n for n in r.plan.nodes if n.name == "d3")
    assert "-v /scratch/weights:/mnt/weights \\" in r.files["d3"]["docker_run.sh"]
    assert "/mnt/weights:/mnt/weights" not in r.files["d3"]["docker_run.sh"]
    assert [m.source for m in d3.container.mounts if m.target == "/mnt/weights"] == ["/scratch/weights"]
    what = next(d for d in r.plan.deviations if d.id == "inventory-mounts").what
    assert "-v /mnt/weights:/mnt/weights (nodes p0, p1, p2, p3, d0, d1, d2)" in what
    assert "-v /scratch/weights:/mnt/weights (nodes d3)" in what


def test_a_path_with_spaces_reaches_docker_run_quoted():
    r = artefacts.build(SID, _inv([{"source": "/mnt/lab weights", "target": "/mnt/w"}]), {}, "lab")
    assert "-v '/mnt/lab weights':/mnt/w \\" in r.files["p0"]["docker_run.sh"]


def test_without_mounts_nothing_changes():
    r = artefacts.build(SID, _inv(), {}, "lab")
    assert not [d for d in r.plan.deviations if d.id == "inventory-mounts"]
    assert r.plan.nodes[0].container.mounts[-1].target == "/root/.cache"


def test_a_mount_may_not_hide_the_emulator_profiles_host_programs():
    with pytest.raises(RenderError, match="target /usr/lib would hide the container's mount /usr/lib"):
        artefacts.build(SID, _inv([{"source": "/mnt/w", "target": "/usr/lib"}], lab={"profile": "emulator"}), {}, "lab")
    artefacts.build(SID, _inv([{"source": "/mnt/w", "target": "/usr/lib"}]), {}, "lab")  # hardware: no such mount
    r = artefacts.build(SID, _inv([{"source": "/mnt/weights", "read_only": True}], lab={"profile": "emulator"}),
                        {}, "lab")
    assert r.plan.nodes[0].container.mounts[-1].target != "/mnt/weights"  # the profile's host programs follow
    assert any(m.target == "/mnt/weights" and m.read_only for m in r.plan.nodes[0].container.mounts)
