"""The emulated lab's pure parts: inventory, endpoint mix, and the one listed emulator profile."""
from __future__ import annotations

from pathlib import Path

from k3lab.launchers import labemu
from k3lab.model import inventory
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render


def _inv(scenario="a3_pd_1m", mode="mixed"):
    from k3lab.model import siminventory

    n = len(siminventory.default(scenario).nodes)
    hosts = [labemu.Host(i) for i in range(n)]
    raw = labemu.inventory(scenario, hosts, labemu.endpoint_kinds(n, mode), Path("/k/known_hosts"), Path("/k/id"))
    return inventory.parse(raw)


def test_inventory_mixes_ssh_and_tcp_endpoints_on_the_private_subnet():
    inv = _inv()
    eps = [n.endpoint for n in inv.nodes]
    assert sum(e.startswith("ssh://root@10.213.0.") for e in eps) == 6
    assert sum(e.startswith("tcp://10.213.0.") and e.endswith(":2375") for e in eps) == 2
    assert inv.lab.profile == "emulator" and inv.lab.known_hosts == "/k/known_hosts"
    assert len({n.local_ip for n in inv.nodes}) == len(inv.nodes)


def test_endpoint_kinds():
    assert labemu.endpoint_kinds(1, "mixed") == ["ssh"]
    assert labemu.endpoint_kinds(2, "mixed") == ["ssh", "tcp"]
    assert labemu.endpoint_kinds(3, "ssh") == ["ssh"] * 3


def test_emulator_profile_changes_only_the_listed_items():
    inv = _inv()
    hw_inv = inventory.parse({**inv.model_dump(mode="json"), "lab": {"profile": "hardware"}})
    emu = render.build("a3_pd_1m", inv, target="lab")
    real = render.build("a3_pd_1m", hw_inv, target="lab")
    for e, r in zip(emu.plan.nodes, real.plan.nodes):
        assert e.container.name == r.container.name and e.container.image == r.container.image
        assert e.container.network_mode == "host" and e.container.shm_size == r.container.shm_size
        assert r.container.privileged and not e.container.privileged
        assert r.container.devices and not e.container.devices
        assert {m.target for m in r.container.mounts} - {m.target for m in e.container.mounts} == {
            t for t in (m.target for m in r.container.mounts) if t.startswith(("/usr/local/dcmi", "/usr/local/Ascend/driver", "/usr/local/bin/npu-smi"))}
        assert e.processes == r.processes and e.artefacts == r.artefacts
        for name, text in real.files[r.name].items():
            if name != "docker_run.sh":
                assert emu.files[e.name][name] == text, name
    extra = {d.id for d in emu.plan.deviations} - {d.id for d in real.plan.deviations}
    assert extra == {"emu-privileged", "emu-devices", "emu-driver-mounts"}
    assert not preflight.errors(preflight.run(emu.plan, emu.files))


def test_hardware_lab_without_privileged_still_fails_preflight():
    inv = _inv()
    hw_inv = inventory.parse({**inv.model_dump(mode="json"), "lab": {"profile": "hardware"}})
    real = render.build("a3_pd_1m", hw_inv, target="lab")
    for n in real.plan.nodes:
        n.container.privileged = False
    assert any(f.check == "PF-CONTAINER" for f in preflight.errors(preflight.run(real.plan, real.files)))
