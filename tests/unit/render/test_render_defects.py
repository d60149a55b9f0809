"""Render defects found against the guides (issue 10): MemCache sizing per node, 950DT engine ids,
the MMC_LOCAL_CONFIG_PATH guard."""
from __future__ import annotations

import subprocess

import pytest

from k3lab.model import siminventory
from k3lab.model.inventory import Inventory
from k3lab.render import artefacts as render


def _with_node(inv: Inventory, name: str, **update) -> Inventory:
    nodes = [n.model_copy(update=update) if n.name == name else n for n in inv.nodes]
    return inv.model_copy(update={"nodes": nodes})


def _conf(rendered, node: str, name: str) -> dict[str, str]:
    text = rendered.files[node][name]
    return dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)


def test_memcache_size_and_protocol_default_to_the_guide():
    rendered = render.build("a3_pd_pooled", siminventory.default("a3_pd_pooled"))
    conf = _conf(rendered, "p0", "mmc-local-standalone.conf")
    assert conf["ock.mmc.local_service.dram.size"] == "1GB"
    assert conf["ock.mmc.local_service.protocol"] == "device_sdma"
    assert _conf(rendered, "p0", "mmc-local.conf")["ock.mmc.local_service.dram.size"] == "0GB"


def test_memcache_size_and_protocol_come_from_the_inventory_per_node():
    inv = _with_node(siminventory.default("a3_pd_pooled"), "d1", memcache_dram_size="40GB",
                     memcache_protocol="device_rdma")
    rendered = render.build("a3_pd_pooled", inv)
    d1 = _conf(rendered, "d1", "mmc-local-standalone.conf")
    assert (d1["ock.mmc.local_service.dram.size"], d1["ock.mmc.local_service.protocol"]) == ("40GB", "device_rdma")
    assert _conf(rendered, "d1", "mmc-local.conf")["ock.mmc.local_service.dram.size"] == "0GB"  # engine client
    assert _conf(rendered, "d0", "mmc-local-standalone.conf")["ock.mmc.local_service.dram.size"] == "1GB"
    meta = rendered.plan.expect.metaservice
    members = meta.segments
    assert meta.total_bytes == (members - 1 + 40) * 2 ** 30 and meta.segment_bytes is None


def test_memcache_size_a5_engine_client():
    inv = _with_node(siminventory.default("a5_pd_pooled"), "d0", memcache_dram_size="2GB",
                     memcache_protocol="device_urma")
    conf = _conf(render.build("a5_pd_pooled", inv), "d0", "mmc-local.conf")
    assert (conf["ock.mmc.local_service.dram.size"], conf["ock.mmc.local_service.protocol"]) == ("2GB", "device_urma")


@pytest.mark.parametrize("field, value", [("memcache_dram_size", "lots"), ("memcache_protocol", "carrier_pigeon")])
def test_bad_memcache_fields_are_refused(field, value):
    data = siminventory.default("a3_pd_pooled").model_dump()
    data["nodes"][0][field] = value
    with pytest.raises(ValueError, match=field):
        Inventory.model_validate(data)


@pytest.mark.parametrize("sid", ["a5_pd", "a5_pd_pooled"])
def test_950dt_engine_ids_are_unique_per_engine(sid):
    rendered = render.build(sid, siminventory.default(sid))
    ids = {}
    for node in rendered.plan.nodes:
        text = rendered.files[node.name].get("run_dp_template.sh", "")
        for line in text.splitlines():
            if line.startswith("ENGINE_ID="):
                ids[node.name] = line.split("=", 1)[1]
    decode = [v for k, v in ids.items() if k.startswith("d")]
    assert len(decode) == len(set(decode)) > 1
    assert {v for k, v in ids.items() if k.startswith("p")} == {"prefill"}  # one PP engine


def test_mmc_guard_is_a_real_expansion(tmp_path):
    rendered = render.build("a5_pd_pooled", siminventory.default("a5_pd_pooled"))
    text = rendered.files["d0"]["run_dp_template.sh"]
    guard = next(line for line in text.splitlines() if "MMC_LOCAL_CONFIG_PATH:?" in line)
    assert guard.startswith(': "${MMC_LOCAL_CONFIG_PATH:?')
    res = subprocess.run(["bash", "-c", guard], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert res.returncode != 0 and "Load the node-specific pool environment" in res.stderr
