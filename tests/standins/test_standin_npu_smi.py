"""npu-smi stand-in: the published table layouts per platform, health from faults, -m, spod-info."""
from __future__ import annotations

import re

import pytest

from tests.standins._standin import ROOTFS, base_env, run, write_node

NPU_SMI = str(ROOTFS / "usr/local/bin/npu-smi")


def npu_smi(tmp_path, *args, **node):
    write_node(tmp_path, **node)
    return run([NPU_SMI, *args], base_env(tmp_path))


def test_a3_table_has_16_dies_with_phy_ids_and_health_from_faults(tmp_path):
    done = npu_smi(tmp_path, "info", platform="A3", faults={"devices": {"3": {"health": "Alarm"}}})
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert {len(line) for line in lines} == {98}
    assert "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |" in lines
    dies = [line for line in lines if re.match(r"\| \d+\s+Ascend910\s+\|", line)]
    assert len(dies) == 16
    assert [line.split("|")[2].strip() for line in dies].count("Alarm") == 1
    assert "Alarm" in dies[3] and dies[3].startswith("| 1     Ascend910")  # device 3 = card 1, chip 1
    assert "| 1     3                   | 0000:9B:00.0  |" in done.stdout
    assert "| -           " in dies[1]  # the second die reports no power
    assert done.stdout.count("No running processes found in NPU") == 8


def test_a2_table_has_8_910b4_without_phy_id(tmp_path):
    done = npu_smi(tmp_path, "info", platform="A2")
    lines = done.stdout.splitlines()
    assert {len(line) for line in lines} == {98}
    assert "| Chip                      | Bus-Id        |" in done.stdout
    assert len([line for line in lines if re.match(r"\| \d+\s+910B4\s+\| OK ", line)]) == 8
    assert "| 0                         | 0000:C1:00.0  | 0           0    / 0          2862 / 32768         |" in lines


def test_950dt_table_has_8_devices(tmp_path):
    done = npu_smi(tmp_path, "info", platform="950DT", faults={"devices": {"7": {"health": "Critical"}}})
    lines = done.stdout.splitlines()
    assert {len(line) for line in lines} == {99}
    assert "| NPU ID | Name             | Health        |" in done.stdout
    rows = [line for line in lines if re.match(r"\| \d+\s+\| Ascend950DT", line)]
    assert len(rows) == 8 and "Critical" in rows[7]


def test_health_query_follows_faults(tmp_path):
    healthy = npu_smi(tmp_path, "info", "-t", "health", "-i", "0", "-c", "1", platform="A3")
    assert healthy.returncode == 0
    assert re.search(r"Health Status\s+: OK", healthy.stdout) and re.search(r"Error Code\s+: NA", healthy.stdout)
    sick = npu_smi(tmp_path, "info", "-t", "health", "-i", "0", "-c", "1", platform="A3",
                   faults={"devices": {"1": {"health": "Warning", "error_code": "80E18005"}}})
    assert re.search(r"Health Status\s+: Warning", sick.stdout) and "80E18005" in sick.stdout


def test_spod_info_on_a3_only(tmp_path):
    done = npu_smi(tmp_path, "info", "-t", "spod-info", "-i", "2", "-c", "1", platform="A3", server_index=4,
                   super_pod_id=1)
    fields = dict(re.findall(r"^\t(.+?)\s+: (\S+)$", done.stdout, re.M))
    assert fields == {"SDID": str((4 << 22) | (5 << 16)), "Super Pod Size": "384", "Super Pod ID": "1",
                      "Server Index": "4"}
    a2 = npu_smi(tmp_path, "info", "-t", "spod-info", "-i", "0", "-c", "0", platform="A2")
    assert a2.returncode != 0


def test_mapping_lists_chips_and_mcus(tmp_path):
    a3 = npu_smi(tmp_path, "info", "-m", platform="A3")
    assert a3.stdout.splitlines()[0].split() == ["NPU", "ID", "Chip", "ID", "Chip", "Logic", "ID", "Chip", "Phy-ID",
                                                 "Chip", "Name"]
    assert len(a3.stdout.splitlines()) == 1 + 8 * 3
    a2 = npu_smi(tmp_path, "info", "-m", platform="A2")
    assert a2.stdout.splitlines()[1].split() == ["0", "0", "0", "Ascend", "910B4"]
    assert a2.stdout.splitlines()[2].split() == ["0", "1", "-", "Mcu"]


@pytest.mark.parametrize("args, words", [
    (["info", "-t", "nonsense", "-i", "0"], "Error parameter of -t"),
    (["info", "-t", "health", "-i", "8", "-c", "0"], "Card ID 8 does not exist."),
    (["info", "-t", "health", "-i", "0", "-c", "2"], "Chip ID 2 does not exist."),
    (["info", "-t", "health"], "Usage: npu-smi info"),
    (["info", "--bogus"], "Usage: npu-smi info"),
    ([], "Usage: npu-smi info"),
])
def test_bad_invocations_fail_with_the_usage_or_an_error(tmp_path, args, words):
    done = npu_smi(tmp_path, *args, platform="A3")
    assert done.returncode != 0
    assert words in done.stdout
