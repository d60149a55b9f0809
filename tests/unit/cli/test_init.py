"""`k3lab init`: the guide's openEuler image offered, only the ports the scenario uses listed."""
from __future__ import annotations

import pytest
import yaml

from k3lab.cli import initinv
from k3lab.cli import main as cli
from k3lab.model import catalog, inventory


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_init_lists_the_openeuler_image_and_only_used_ports(sid, tmp_path, capsys):
    out = tmp_path / "lab.yaml"
    assert cli.main(["init", sid, "--out", str(out)]) == 0
    text = out.read_text()
    sc = catalog.get(sid)
    assert f'# image: "{sc.image}-openeuler"' in text
    data = yaml.safe_load(text)
    used = initinv.used_ports(sid)
    assert list(data["ports"]) == used and "api" in used
    inventory.parse(data, "init")  # what is left out takes the defaults


def test_used_ports_follow_the_topology():
    assert initinv.used_ports("k3_a3_mixed") == ["api", "dp_rpc"]  # no proxy, no Mooncake, no MetaService
    pooled = initinv.used_ports("a3_pd_pooled")
    assert {"proxy", "meta_service", "config_store", "meta_metrics", "kv_prefill"} <= set(pooled)
