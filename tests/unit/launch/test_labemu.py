"""The emulated lab's pure parts: inventory, endpoint mix, and the one listed emulator profile."""
from __future__ import annotations

from pathlib import Path

from k3lab.launch import labemu
from k3lab.model import inventory
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render


def _inv(scenario="a3_pd_1m", mode="mixed", weights=None):
    from k3lab.model import siminventory

    n = len(siminventory.default(scenario).nodes)
    hosts = [labemu.Host(i) for i in range(n)]
    raw = labemu.inventory(scenario, hosts, labemu.endpoint_kinds(n, mode), Path("/k/known_hosts"), Path("/k/id"),
                           weights)
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


def _machine(tmp_path, monkeypatch, ns_pids: dict[str, str]):
    """STATE and RUN in tmp_path; `ip` answers from ns_pids (namespace -> its pids) and records the rest."""
    import subprocess

    from k3lab import settings

    monkeypatch.setenv("K3LAB_EMU_DIR", str(tmp_path / "state"))
    settings.reset()  # read again: a Host made before this call (as an argument) read the default already
    monkeypatch.setattr(labemu, "RUN", tmp_path / "run")
    (tmp_path / "run").mkdir()
    calls = []

    def sh(*argv, check=True, input=None):
        calls.append(argv)
        out = ""
        if argv[:3] == ("ip", "netns", "list"):
            out = "\n".join(ns_pids)
        elif argv[:3] == ("ip", "netns", "pids"):
            out = ns_pids.get(argv[3], "")
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(labemu, "_sh", sh)
    return calls


def test_what_a_reboot_left_beyond_the_wanted_hosts_is_removed(tmp_path, monkeypatch):
    # After a reboot /run is empty but the hosts' data dirs remain: a later, smaller lab must come up.
    calls = _machine(tmp_path, monkeypatch, {})
    for i in (4, 5):
        (labemu.Host(i).root / "etc").mkdir(parents=True)
    labemu.Host(6).docker_pid.write_text("999999999")  # no such process
    labemu._clear_beyond(4)
    assert not list((tmp_path / "state" / "hosts").iterdir())
    assert not labemu.Host(6).docker_pid.exists()
    assert ("ip", "netns", "del", labemu.Host(5).ns) in calls


def test_hosts_beyond_the_wanted_ones_that_still_run_are_refused(tmp_path, monkeypatch):
    import os

    import pytest

    _machine(tmp_path, monkeypatch, {labemu.Host(7).ns: "4242"})
    (labemu.Host(5).root).mkdir(parents=True)
    labemu.Host(6).sshd_pid.write_text(str(os.getpid()))
    with pytest.raises(labemu.LabEmuError, match=r"emulated hosts h6, h7 run beyond --nodes 4; "
                                                 r"'k3lab labemu down' first"):
        labemu._clear_beyond(4)
    assert labemu.Host(5).root.exists()  # nothing removed while another lab runs


def test_weights_outside_root_cache_give_the_inventory_a_mount_and_preflight_clean():
    """labemu up --weights /mnt/weights (issue #36 item 1): model and draft under it, one read-only mount."""
    inv = _inv("a3_pd", weights="/mnt/weights")
    assert inv.model_path == "/mnt/weights/Kimi-K3.1-Pro-w4a8"
    assert inv.draft_model_path == "/mnt/weights/Kimi-K3.1-Pro-DSpark3"
    assert [(m.source, m.container_path, m.read_only) for m in inv.mounts] == [("/mnt/weights", "/mnt/weights", True)]
    r = render.build("a3_pd", inv, target="lab")
    assert all("-v /mnt/weights:/mnt/weights:ro" in r.files[n.name]["docker_run.sh"] for n in r.plan.nodes)
    assert not preflight.errors(preflight.run(r.plan, r.files))
    assert "inventory-mounts" in {d.id for d in r.plan.deviations}
    assert labemu.checkpoint_root(labemu.Host(0), "/mnt/weights").name == "weights"
    assert labemu.checkpoint_root(labemu.Host(0), None).name == "cache"
    assert _inv().mounts == [] and _inv().model_path is None  # without --weights: as before
