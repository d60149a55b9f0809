"""RUNBOOK step 0: every check of the host and hardware stages, from their declarations, each with real commands."""
from __future__ import annotations

import shlex
import subprocess

import pytest

from k3lab import paths
from k3lab.model import catalog, inventory, nodechecks, siminventory
from k3lab.model.checks import CheckInfo
from k3lab.preflight import registry
from k3lab.render import artefacts as render
from k3lab.render import runbook, stepzero


def _lab(sid: str):
    path = paths.FIXTURES / "inventories" / f"{sid}.yaml"
    return render.build(sid, inventory.load(str(path)), target="lab", inventory_name=str(path))


def _step0(text: str) -> str:
    return text[text.index("## Step 0"):text.index("## Step 1")]


def _stage_ids() -> list[str]:
    return [c.id for c in registry.every_check() if c.stage in ("host", "hardware")]


def test_step0_lists_the_stages_own_checks_and_each_has_a_procedure():
    # the registry (k3lab checks) and step 0 read the same declarations
    listed = [c.id for checks in stepzero.stage_checks().values() for c in checks]
    assert listed == _stage_ids()
    assert set(stepzero.PROCEDURES) == set(listed), "a stage check without a manual procedure (or one left over)"


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_runbook_step0_names_every_host_and_hardware_check_with_its_commands(sid, tmp_path):
    rendered = _lab(sid)
    text = (render.write(rendered, tmp_path / "out") / "RUNBOOK.md").read_text()
    step0 = _step0(text)
    assert text.index("## Step 0") < text.index("## Step 1") < text.index("## Step 2")
    assert step0.index("### Host stage") < step0.index("### Hardware stage")
    at = 0
    for cid in _stage_ids():  # in the registry's order, each with a command block or "not applicable"
        at = step0.index(f"#### `{cid}`", at)
        section = step0[at:].split("\n#### ", 1)[0]
        assert "```\n" in section or "Not applicable on" in section, section
        assert "No manual command is declared" not in section
    # the guide's §3.2 and the host stage's reads, as the stage itself runs them
    for needle in ("npu-smi info", "-link -g", "-net_health -g", "-tls -g", "-lldp -g", "-netdetect -g",
                   "-gateway -g", "sha256sum -- ", "sysctl -w \"net.ipv4.ip_local_reserved_ports=", "/etc/hccn.conf",
                   "/usr/local/Ascend/driver/version.info", "ping -g address \"$a\""):
        assert needle in step0, needle


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_step0_commands_parse(sid):
    plan = _lab(sid).plan
    lines = [line for _, _, line in stepzero.commands(plan)]
    assert lines
    for line in lines:
        assert shlex.split(line, comments=True), line
    res = subprocess.run(["bash", "-n"], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


def test_reserved_ports_are_the_planned_spans_of_the_node():
    plan = _lab("a3_pd_pooled").plan
    for node in plan.nodes:
        want = nodechecks.reserve_line([(lo, hi) for lo, hi, _ in nodechecks.planned_spans(plan, node.name)])
        cmds = [line for cid, n, line in stepzero.commands(plan) if cid == "HST-PORTS" and n == node.name]
        assert any(line.endswith(f'sysctl -w "net.ipv4.ip_local_reserved_ports=${{cur:+$cur,}}"{want}')
                   for line in cmds), cmds


def test_platform_decides_the_hardware_commands():
    a3, a2 = _lab("k3_a3_mixed").plan, _lab("k3_a2_mixed").plan
    by = {name: {(cid, line) for cid, _, line in stepzero.commands(p)} for name, p in (("a3", a3), ("a2", a2))}
    assert any("-vnic -g" in line and cid == "hccl.test_hccn_device_addresses" for cid, line in by["a3"])
    assert any("-ip -g" in line and cid == "hccl.test_hccn_device_addresses" for cid, line in by["a2"])
    assert any("-hccs_ping" in line for _, line in by["a3"]) and not any("-hccs_ping" in line for _, line in by["a2"])
    assert any(cid == "hccl.test_spod_info" for cid, _ in by["a3"])
    assert not any(cid == "hccl.test_spod_info" for cid, _ in by["a2"])
    assert any("seq 0 7" in line for _, line in by["a2"]) and any("seq 0 15" in line for _, line in by["a3"])


def test_values_from_the_inventory_stay_quoted():
    plan = _lab("a3_pd").plan
    node = plan.nodes[0]
    for m in node.container.mounts:
        if m.target == "/root/.cache":
            m.source = "/srv/my cache/$(reboot)"
    lines = [line for cid, n, line in stepzero.commands(plan) if n == node.name and cid == "HST-CHECKPOINT"]
    assert lines
    words = shlex.split(lines[0])
    assert words[:3] == ["ls", "-1", "--"] and all(w.startswith("/srv/my cache/$(reboot)/") for w in words[3:])


def test_a_new_stage_check_appears_in_step0(monkeypatch, tmp_path):
    # a host check declared without a procedure: listed with its MUST and remedy, and flagged
    extra = CheckInfo(id="HST-NEW", stage="host", area="x", must="Something MUST hold.", remedy="fix it.")
    monkeypatch.setattr(nodechecks, "HOST_CHECKS", [*nodechecks.HOST_CHECKS, extra])
    # a hardware check added to the suite's hardware module
    suite = tmp_path / "conformance"
    suite.mkdir()
    (suite / "test_npu.py").write_text(
        (paths.CONFORMANCE / "test_npu.py").read_text()
        + '\n\n@pytest.mark.conformance(id="hccl.test_new", area="hccl", must="New MUST hold.", remedy="r.")\n'
          "def test_new(node):\n    pass\n")
    monkeypatch.setattr(paths, "CONFORMANCE", suite)
    text = runbook.text(_lab("a3_pd").plan)
    step0 = _step0(text)
    for cid, must in (("HST-NEW", "Something MUST hold."), ("hccl.test_new", "New MUST hold.")):
        section = step0[step0.index(f"#### `{cid}`"):].split("\n#### ", 1)[0]
        assert must in section and "No manual command is declared" in section


def test_sim_runbook_says_where_the_tools_answer(tmp_path):
    sid = "k3_a3_mixed"
    text = (render.write(render.build(sid, siminventory.default(sid)), tmp_path / "out") / "RUNBOOK.md").read_text()
    assert "stand-in image answers `npu-smi` and `hccn_tool` inside the containers" in _step0(text)
