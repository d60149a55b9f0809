"""k3sim-fault: edits of the node file's faults section, as the kit's tests make them."""
from __future__ import annotations

import json

from tests.standins._standin import ROOTFS, base_env, run, write_node

K3SIM_FAULT = str(ROOTFS / "opt/k3lab-sim/bin/k3sim-fault")


def fault(tmp_path, *args):
    return run([K3SIM_FAULT, *args], base_env(tmp_path))


def node_faults(tmp_path):
    return json.loads((tmp_path / "node.json").read_text())["faults"]


def test_set_parses_json_values_and_keeps_strings(tmp_path):
    write_node(tmp_path, platform="A3", devices=[{"id": 0, "ip": "10.0.0.1"}])
    assert fault(tmp_path, "set", "devices.3.health", "Alarm").returncode == 0
    assert fault(tmp_path, "set", "engine.hang", "true").returncode == 0
    assert fault(tmp_path, "set", "engine.crash_after_s", "5").returncode == 0
    assert fault(tmp_path, "set", "provider.dram_size", "512MB").returncode == 0
    assert node_faults(tmp_path) == {"devices": {"3": {"health": "Alarm"}}, "engine": {"hang": True, "crash_after_s": 5},
                                     "provider": {"dram_size": "512MB"}}
    assert json.loads((tmp_path / "node.json").read_text())["devices"] == [{"id": 0, "ip": "10.0.0.1"}]


def test_add_remove_clear_and_show(tmp_path):
    write_node(tmp_path)
    fault(tmp_path, "add", "unreachable", "10.88.1.12")
    fault(tmp_path, "add", "unreachable", "10.88.1.12")
    fault(tmp_path, "add", "unreachable", "10.88.1.13")
    assert node_faults(tmp_path)["unreachable"] == ["10.88.1.12", "10.88.1.13"]
    fault(tmp_path, "remove", "unreachable", "10.88.1.12")
    assert node_faults(tmp_path)["unreachable"] == ["10.88.1.13"]
    fault(tmp_path, "set", "metaservice.exit", "true")
    fault(tmp_path, "clear", "unreachable")
    shown = fault(tmp_path, "show")
    assert json.loads(shown.stdout) == {"metaservice": {"exit": True}}
    fault(tmp_path, "clear")
    assert node_faults(tmp_path) == {}


def test_usage_errors_leave_the_file_alone(tmp_path):
    write_node(tmp_path, faults={"engine": {"hang": True}})
    for args in (["set", "engine.hang"], ["bogus"], [], ["add", "engine.hang", "x"], ["set", "engine.hang.deeper", "1"]):
        done = fault(tmp_path, *args)
        assert done.returncode == 2 and done.stderr.startswith("k3sim-fault:"), args
    assert node_faults(tmp_path) == {"engine": {"hang": True}}
