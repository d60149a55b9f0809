"""The simulated driver's vNIC scheme, 192.<server>.<2+die>.<199-device>, as the launchers lay it out:
node files carry no vNIC address (the driver derives it), every node's vNICs and their carriers on
the sim's network are distinct, and the super pod map the stand-in consults is keyed by the scheme."""
from __future__ import annotations

import json

import pytest

from k3lab.launch import labemu
from k3lab.launch.simimage.image import sim_hw
from k3lab.launch.targets.sim import SimTarget
from k3lab.model import siminventory
from k3lab.model.inventory import Inventory
from k3lab.render import artefacts


@pytest.fixture
def node_of(tmp_path, monkeypatch):
    """The stand-ins' view (k3sim.hw.Node) of a node-file dict."""
    hw = sim_hw()

    def read(data: dict):
        path = tmp_path / f"node-{data['node']}-{data['server_index']}.json"
        path.write_text(json.dumps(data))
        monkeypatch.setenv(hw.NODE_FILE_ENV, str(path))
        return hw.node()
    return read


@pytest.mark.parametrize("server, device, address", [(0, 0, "192.0.2.199"), (3, 1, "192.3.3.198"),
                                                     (15, 15, "192.15.3.184")])
def test_scheme_and_its_inverse(server, device, address):
    hw = sim_hw()
    assert hw.vnic_address(server, device) == address and hw.vnic_device(address) == (server, device)


@pytest.mark.parametrize("address", ["192.168.2.198", "192.1.4.199", "192.1.2.250", "10.0.2.199", "192.1.2", "192.x.2.199",
                                     "192.256.2.199"])
def test_addresses_outside_the_scheme_are_no_die(address):
    assert sim_hw().vnic_device(address) is None


def test_sim_node_files_key_super_pods_by_the_scheme_and_carry_no_vnic(node_of):
    inv = Inventory.model_validate(siminventory.default("a3_pd_1m").model_dump())
    plan = artefacts.build("a3_pd_1m", inv, {}, "sim").plan
    backend = SimTarget.__new__(SimTarget)  # no engine: only the node files are built
    backend.plan, backend.faults, backend.device_subnet = plan, {"super_pod": {plan.nodes[1].name: 1}}, "172.29.0.0/16"
    nodes = [json.loads(backend.stage_extra(n)["/etc/k3lab-sim/node.json"][0]) for n in plan.nodes]
    assert not any("vnic_ip" in d for hw in nodes for d in hw["devices"])
    assert nodes[0]["super_pods"]["192.1.2.199"] == 1 and nodes[0]["super_pods"]["192.0.2.199"] == 0
    views = [node_of(hw) for hw in nodes]
    vnics = [v.vnic_address(d) for v in views for d in range(v.device_count)]
    carriers = [v.carrier(a) for v, a in zip([v for v in views for _ in range(v.device_count)], vnics)]
    assert len(set(vnics)) == len(vnics) == len(set(carriers)) and all(c.startswith("172.29.") for c in carriers)


def test_emulated_hosts_put_distinct_carriers_on_their_nics(node_of):
    import sys

    from k3lab.launch.simimage.image import host_pythonpath

    sys.path[:0] = host_pythonpath()
    try:
        from k3sim import node_init
    finally:
        del sys.path[:len(host_pythonpath())]
    seen: set[str] = set()
    for index in range(4):
        view = node_of(labemu._hardware(labemu.Host(index), f"n{index}", "A3"))
        added = {a for a, _ in node_init.device_addresses(view)}
        assert {view.carrier(view.vnic_address(d)) for d in range(16)} <= added
        assert not added & seen
        seen |= added


def test_an_emulated_pair_fault_names_the_peer_vnics_by_the_scheme(tmp_path, monkeypatch):
    """labemu break --fault pair-unreachable: the next host's device IPs and vNICs (as hccn_tool prints
    them, so -hccs_ping to them loses every packet) become unreachable from this host."""
    monkeypatch.setenv("K3LAB_EMU_DIR", str(tmp_path))
    (tmp_path / "state.json").write_text(json.dumps({"hosts": [{"index": 0}, {"index": 1}]}))
    for index in (0, 1):
        table = labemu.Host(index).root / "etc" / "k3lab-sim" / "node.json"
        table.parent.mkdir(parents=True)
        table.write_text(json.dumps(labemu._hardware(labemu.Host(index), f"n{index}", "A3")))
    labemu._device_fault(labemu.Host(0), "pair-unreachable")
    hw = json.loads((labemu.Host(0).root / "etc" / "k3lab-sim" / "node.json").read_text())
    unreachable = set(hw["faults"]["unreachable"])
    assert {"192.1.2.199", "192.1.3.184", "10.214.2.10"} <= unreachable and len(unreachable) == 32
