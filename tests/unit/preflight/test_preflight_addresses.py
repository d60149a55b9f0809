"""Preflight's address and option warnings, each on a named example and its healthy counterpart."""
from __future__ import annotations

import pytest

from k3lab.cli import main as cli
from k3lab.model import siminventory
from k3lab.preflight import checks as preflight
from k3lab.tools import faults


def checks(sid: str, nodes: dict, target: str = "sim", options=None, **top) -> set[str]:
    r = faults._inv(sid, nodes, target=target, options=options, **top)
    return {f.check for f in preflight.run(r.plan, r.files, sim_subnet=r.sim_subnet)}


@pytest.mark.parametrize("nodes, target, expect", [
    ({"node1": {"local_ip": "198.51.100.7"}}, "lab", "PF-ADDR-PLACEHOLDER"),
    ({"node1": {"endpoint": "ssh://root@203.0.113.9"}}, "lab", "PF-ADDR-PLACEHOLDER"),
    ({"node1": {"endpoint": "ssh://root@node1.example.com"}}, "lab", "PF-ADDR-PLACEHOLDER"),
    ({"node1": {"local_ip": "127.0.0.1"}}, "lab", "PF-ADDR-SPECIAL"),
    ({"node1": {"local_ip": "255.255.255.255"}}, "lab", "PF-ADDR-SPECIAL"),
    ({"node1": {"local_ip": "169.254.3.4"}}, "lab", "PF-ADDR-SPECIAL"),
    ({"node1": {"local_ip": "172.28.0.255"}}, "sim", "PF-ADDR-SPECIAL"),   # the sim subnet's broadcast
    ({"node1": {"local_ip": "172.28.0.1"}}, "sim", "PF-SIM-SUBNET"),       # the sim network's gateway
    ({"node1": {"local_ip": "10.1.2.3"}}, "sim", "PF-SIM-SUBNET"),
    ({"node0": {"endpoint": "tcp://10.0.0.5:2375", "container_name": "c"},
      "node3": {"endpoint": "tcp://10.0.0.5:2375", "container_name": "c"}}, "lab", "PF-CONTAINER-SHARED"),
])
def test_address_findings(nodes, target, expect):
    found = checks("k3_a3_mixed", nodes, target)
    assert expect in found, found
    assert preflight.CHECKS and expect in {c.id for c in preflight.CHECKS}


def test_healthy_lab_addresses_have_no_address_findings():
    nodes = {f"node{i}": {"local_ip": f"10.20.0.{11 + i}", "endpoint": f"ssh://root@10.20.0.{11 + i}"}
             for i in range(4)}
    assert not {c for c in checks("k3_a3_mixed", nodes, "lab") if c.startswith(("PF-ADDR", "PF-CONTAINER-SHARED"))}


def test_shared_endpoint_with_distinct_names_is_fine():
    nodes = {"node0": {"endpoint": "tcp://10.0.0.5:2375", "container_name": "a"},
             "node3": {"endpoint": "tcp://10.0.0.5:2375", "container_name": "b"}}
    assert "PF-CONTAINER-SHARED" not in checks("k3_a3_mixed", nodes, "lab")


@pytest.mark.parametrize("sid, option, applies", [("a3_pd", "parsers=off", False), ("a5_pd", "parsers=off", True),
                                                  ("k3_a3_pd", "parsers=off", True),
                                                  ("a5_pd", "draft=/root/.cache/d", True)])
def test_option_that_changes_nothing_is_a_warning(sid, option, applies, capsys):
    code = cli.main(["preflight", sid, "-o", option])
    out = capsys.readouterr().out
    assert code == 0
    assert ("PF-OPTION-UNUSED" in out) is (not applies), out


def test_default_sim_inventories_have_no_findings_with_the_subnet():
    from k3lab.model import catalog
    from k3lab.render import artefacts as render

    for sid in catalog.SCENARIOS:
        r = render.build(sid, siminventory.default(sid))
        assert preflight.run(r.plan, r.files, sim_subnet=r.sim_subnet) == [], sid
