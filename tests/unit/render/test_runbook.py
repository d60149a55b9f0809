"""RUNBOOK.md: every node's steps in the order k3lab up runs them, every gate with a manual check."""
from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from k3lab import errors, paths
from k3lab.cli import main as cli
from k3lab.model import catalog, inventory, siminventory
from k3lab.render import artefacts as render
from k3lab.render import runbook


def _lab(sid: str):
    path = paths.FIXTURES / "inventories" / f"{sid}.yaml"
    return render.build(sid, inventory.load(str(path)), target="lab", inventory_name=str(path))


def _after(text: str, needle: str, start: int) -> int:
    at = text.find(needle, start)
    assert at >= 0, f"{needle!r} missing after offset {start}"
    return at


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_runbook_names_every_nodes_steps_in_the_guides_order(sid, tmp_path):
    rendered = _lab(sid)
    out = render.write(rendered, tmp_path / "out")
    text = (out / "RUNBOOK.md").read_text()
    plan = rendered.plan
    assert "Rendered for **a lab" in text and "simulator" not in text.split("## Nodes")[0]
    # step 1, per node: docker run, then every in-container artefact copied to its planned path
    for node in plan.nodes:
        at = _after(text, f"### {node.name}\n", text.index("## Step 1"))
        at = _after(text, f"export DOCKER_HOST={node.endpoint}", at)
        at = _after(text, f"bash {node.name}/docker_run.sh", at)
        for art in node.artefacts:
            if art.path.startswith("/"):
                at = _after(text, f"docker cp {node.name}/{art.name} {node.container.name}:{art.path}", at)
        assert at < text.index("## Step 2")
    # step 2: the plan's stages in order, each process started before its stage's gates, then the next stage
    at = text.index("## Step 2")
    procs = {p.id: p for p in plan.processes()}
    for i, stage in enumerate(plan.stages, 1):
        at = _after(text, f"### Stage {i}: {stage.name} ", at)
        for pid in stage.processes:
            at = _after(text, f"On **{procs[pid].node}** ({pid}", at)
            at = _after(text, runbook.start_command(procs[pid], plan.node(procs[pid].node)), at)
        at = _after(text, "Wait for:", at)
        for gate in stage.gates:
            at = _after(text, f"- {gate.node}: {gate.describe()}", at)
            at = _after(text, runbook.manual_check(gate, {p: procs[p].log for p in procs},
                                                   _docker_of(plan)).split("   #")[0], at)
    assert at < text.index("## Step 3")
    for node in plan.nodes:  # teardown on every node
        assert f"export DOCKER_HOST={node.endpoint}; docker rm -f {node.container.name}" in text


def _docker_of(plan):
    return {n.name: ("" if n.endpoint.startswith("unix://") else f"DOCKER_HOST={n.endpoint} ")
            + f"docker exec {n.container.name}" for n in plan.nodes}


def test_sim_runbook_says_it_is_for_the_simulator(tmp_path):
    sid = "k3_a3_mixed"
    out = render.write(render.build(sid, siminventory.default(sid)), tmp_path / "out")
    text = (out / "RUNBOOK.md").read_text()
    assert "Rendered for **the simulator**" in text and "do not exist in a lab" in text
    assert f"k3lab render {sid} -i lab.yaml" in text and "DOCKER_HOST" not in text.split("## Step 1")[1]


def test_gate_checks_are_commands_an_operator_types():
    sid = "a3_pd_pooled"
    plan = _lab(sid).plan
    kinds = {g.kind for s in plan.stages for g in s.gates}
    assert kinds == {"tcp", "http", "log", "metaservice_capacity", "proxy_instances"}
    logs = {p.id: p.log for p in plan.processes()}
    checks = {g.kind: runbook.manual_check(g, logs, _docker_of(plan)) for s in plan.stages for g in s.gates}
    assert checks["tcp"].startswith("timeout 2 bash -c '</dev/tcp/")
    assert re.match(r"curl -sS --max-time 5 -o /dev/null -w '%\{http_code\}\\n' http://", checks["http"])
    assert "grep -F 'Successfully initialized memcache.' /root/k3lab/logs/provider.log" in checks["log"]
    assert "memcache_total_capacity_bytes" in checks["metaservice_capacity"]
    assert '"decode_instances": ' in checks["proxy_instances"]


def test_render_target_lab_without_inventory_exits_2(tmp_path, capsys):
    code = cli.main(["render", "a3_pd_1m", "--target", "lab", "--out", str(tmp_path / "out")])
    assert code == errors.USAGE and not (tmp_path / "out").exists()
    assert "--target lab needs the lab's inventory (-i lab.yaml" in capsys.readouterr().err
    assert cli.main(["preflight", "a3_pd_1m", "--target", "lab"]) == errors.USAGE


# ----------------------------------------------------------------------------- start commands


def _bash_n(script: str) -> None:
    res = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, f"bash -n: {res.stderr}\n{script}"


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_start_commands_are_extracted_one_per_process_in_stage_order(sid, tmp_path):
    rendered = _lab(sid)
    text = (render.write(rendered, tmp_path / "out") / "RUNBOOK.md").read_text()
    plan = rendered.plan
    got = runbook.start_commands(text)
    procs = {p.id: p for p in plan.processes()}
    want = [(i, procs[pid].node, pid) for i, st in enumerate(plan.stages, 1) for pid in st.processes]
    assert [(c.stage, c.node, c.process) for c in got] == want
    for c in got:
        proc, node = procs[c.process], plan.node(c.node)
        argv = shlex.split(c.command)
        # one command from this directory: the node's engine, a detached exec, an interactive shell
        assert argv[:5] == [f"DOCKER_HOST={node.endpoint}", "docker", "exec", "-d", node.container.name]
        assert argv[5:7] == ["bash", "-ic"] and len(argv) == 8
        assert shlex.split(argv[7]) == ["cd", proc.cwd, "&&", "exec", "bash", proc.script, ">>", proc.log, "2>&1"]
        _bash_n(argv[7])
    _bash_n("\n".join(c.command for c in got))


def test_start_commands_of_the_simulator_use_the_local_engine(tmp_path):
    sid = "a3_pd"
    text = (render.write(render.build(sid, siminventory.default(sid)), tmp_path / "out") / "RUNBOOK.md").read_text()
    got = runbook.start_commands(text)
    assert got and all(shlex.split(c.command)[:3] == ["docker", "exec", "-d"] for c in got)
    assert "docker exec -it" not in text.split("### Stage 1")[1]  # nothing is typed inside a container any more


def test_start_command_quotes_what_reaches_the_shell():
    plan = _lab("a3_pd").plan
    proc = plan.processes()[0]
    node = plan.node(proc.node)
    odd = proc.model_copy(update={"cwd": "/root/my dir", "log": "/tmp/$(reboot).log", "script": "/root/a'b.sh"})
    argv = shlex.split(runbook.start_command(odd, node))
    assert shlex.split(argv[-1]) == ["cd", "/root/my dir", "&&", "exec", "bash", "/root/a'b.sh", ">>",
                                     "/tmp/$(reboot).log", "2>&1"]
    _bash_n(argv[-1])


def test_start_commands_ignore_unmarked_blocks():
    text = ("```\ndocker exec -d c bash -ic 'x'\n```\n"
            "   <!-- k3lab-start stage=2 node=p0 process=p0/engine -->\n   ```\n   docker exec -d c bash -ic 'y'\n   ```\n")
    assert runbook.start_commands(text) == [runbook.StartCommand(2, "p0", "p0/engine", "docker exec -d c bash -ic 'y'")]
