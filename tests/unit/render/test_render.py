"""Rendered scripts run under bash and give exactly the argv and env that plan.json records."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lab.launch.simimage import image
from k3lab.model import catalog, siminventory
from k3lab.model.inventory import Inventory
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render

FAKE_VLLM = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["K3_DUMP"], "a") as fh:
    fh.write(json.dumps({"argv": ["vllm", *sys.argv[1:]], "env": dict(os.environ)}) + "\\n")
"""


def run_engine(rendered: render.Rendered, node: str, tmp: Path) -> list[dict]:
    """Run the node's engine script the way its launcher would, with a fake ``vllm`` on PATH."""
    work = tmp / node
    work.mkdir()
    for name, text in rendered.files[node].items():
        (work / name).write_text(text)
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "vllm").write_text(FAKE_VLLM)
    (bindir / "vllm").chmod(0o755)
    dump = work / "dump.jsonl"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "K3_DUMP": str(dump), "PYTHONPATH": os.pathsep.join(image.host_pythonpath()),
           "http_proxy": "http://leak.invalid:3128", "HTTPS_PROXY": "http://leak.invalid:3128"}
    plan_node = rendered.plan.node(node)
    engines = [p for p in plan_node.all_processes() if p.kind == "engine"]
    for proc in engines:
        mmc = proc.env.get("MMC_LOCAL_CONFIG_PATH")
        if mmc:  # the container would have the file; give the script one
            Path(mmc).parent.mkdir(parents=True, exist_ok=True)
            Path(mmc).touch()
        # what launch.sh exports before it runs the engine script
        launch = rendered.files[node].get("launch.sh", "")
        exported = set(re.findall(r"^export (\w+)=", launch, re.M))
        if "runtime_env.sh" in launch:
            exported |= {"MEMC_PYTHON", "PYTHONHASHSEED"}
        extra = {k: v for k, v in proc.env.items() if k in exported}
        script = "run_dp_template.sh" if "run_dp_template.sh" in rendered.files[node] else "start_engine.sh"
        subprocess.run(["bash", script, *proc.positional], cwd=work, env=env | extra, check=True,
                       capture_output=True, timeout=20)
    return [json.loads(line) for line in dump.read_text().splitlines()]


def check_roundtrip(rendered: render.Rendered, node: str, tmp: Path) -> None:
    seen = run_engine(rendered, node, tmp)
    engines = [p for p in rendered.plan.node(node).all_processes() if p.kind == "engine"]
    assert len(seen) == len(engines)
    for proc, got in zip(engines, seen):
        assert got["argv"] == proc.argv
        for key, value in proc.env.items():
            if key in ("LD_LIBRARY_PATH", "PYTHONPATH"):
                assert value.rstrip(":") in got["env"][key], key  # sourced files may prepend
            else:
                assert got["env"].get(key) == value, key
        for key in proc.unset:
            assert key not in got["env"], key


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_engine_scripts_give_the_planned_argv_and_env(sid, tmp_path):
    inv = siminventory.default(sid)
    paths = inv.paths.model_copy(update={"memcache_config_dir": str(tmp_path / "mmc")})
    rendered = render.build(sid, inv.model_copy(update={"paths": paths}))
    mmc = tmp_path / "mmc"
    mmc.mkdir()
    for files in rendered.files.values():
        if "runtime_env.sh" in files:
            (mmc / "runtime_env.sh").write_text(files["runtime_env.sh"])
    roles = {}
    for node in rendered.plan.nodes:
        roles.setdefault((node.role, node.rank > 0), node.name)
    for node in roles.values():
        if any(p.kind == "engine" for p in rendered.plan.node(node).all_processes()):
            check_roundtrip(rendered, node, tmp_path)


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_every_shell_artefact_passes_bash_n(sid, tmp_path):
    rendered = render.build(sid, siminventory.default(sid))
    out = render.write(rendered, tmp_path)
    for script in out.glob("*/*.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True, timeout=10)


# ------------------------------------------------------------------------- property tests


def bash_n(scripts: list[str]) -> None:
    """Syntax-check many scripts with one bash process (each one separately)."""
    loop = 'for s in "$@"; do bash -n -c "$s" || { echo "bad script: $s" >&2; exit 1; }; done'
    subprocess.run(["bash", "-c", loop, "bash", *scripts], check=True, timeout=60)

# shell-hostile but path-valid: quotes, backslashes and '%' are refused by the inventory (they would reach JSON)
hostile = st.text(alphabet=st.sampled_from(list("ab /$()'`;&|*?-_.")), min_size=1, max_size=12)
nic = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@st.composite
def inventories(draw):
    sid = draw(st.sampled_from(list(catalog.SCENARIOS)))
    inv = siminventory.default(sid).model_dump(mode="json")
    octets = draw(st.lists(st.integers(1, 250), min_size=len(inv["nodes"]), max_size=len(inv["nodes"]), unique=True))
    for node, octet in zip(inv["nodes"], octets):
        node["local_ip"] = f"10.{draw(st.integers(0, 255))}.{draw(st.integers(0, 255))}.{octet}"
        node["nic"] = draw(nic)
    inv["ports"]["api"] = draw(st.integers(1025, 9999))
    inv["ports"]["proxy"] = draw(st.integers(10000, 11000))
    inv["model_path"] = "/root/.cache/" + draw(hostile)
    inv["paths"]["workdir"] = "/opt/" + draw(hostile)
    inv["paths"]["profiler_dir"] = "/tmp/" + draw(hostile)
    # distinct addresses are part of a valid inventory
    ips = [n["local_ip"] for n in inv["nodes"]]
    if len(set(ips)) != len(ips):
        inv["nodes"][0]["local_ip"] = "10.255.255.254"
    return sid, Inventory.model_validate(inv)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_any_valid_inventory_renders_parses_and_preflights_deterministically(case):
    sid, inv = case
    rendered = render.build(sid, inv)
    scripts = [text for files in rendered.files.values() for name, text in files.items() if name.endswith(".sh")]
    bash_n(scripts)
    first = preflight.run(rendered.plan, rendered.files)
    again = render.build(sid, inv)
    assert preflight.run(again.plan, again.files) == first
    assert render.plan_json(again.plan) == render.plan_json(rendered.plan)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=inventories())
def test_hostile_values_stay_literal_in_argv(case, tmp_path_factory):
    sid, inv = case
    tmp = tmp_path_factory.mktemp("rt")
    paths = inv.paths.model_copy(update={"memcache_config_dir": str(tmp / "mmc")})
    rendered = render.build(sid, inv.model_copy(update={"paths": paths}))
    (tmp / "mmc").mkdir()
    for files in rendered.files.values():
        if "runtime_env.sh" in files:
            (tmp / "mmc" / "runtime_env.sh").write_text(files["runtime_env.sh"])
    node = next(n.name for n in rendered.plan.nodes if any(p.kind == "engine" for p in n.all_processes()))
    check_roundtrip(rendered, node, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
