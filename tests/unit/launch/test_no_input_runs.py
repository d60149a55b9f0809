"""No input ever becomes code (issue #26 item 1), proven by running what the kit builds.

Every inventory path field and every value the kit parses from a node's tools is driven with shell
metacharacters ($(), backticks, quotes, ';', '|', '&', spaces) whose execution would create a
sentinel file. The rendered scripts, the up-side probes (process start, liveness), the evidence
batch and the check commands are then run by bash against a sandbox directory, and the sentinel
must not exist. Docker-free: external commands are stubbed away (a command bash cannot find
succeeds and does nothing), so only the shell's own expansion could create the sentinel.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from k3lab.conform import nodetools, toolparse
from k3lab.launch import lifecycle
from k3lab.launch.endpoints import batch_script
from k3lab.model import catalog, siminventory
from k3lab.model.inventory import PATH_RE, Inventory, InventoryError, parse
from k3lab.render import artefacts as render

SENTINEL = "k3lab-pwned"
# each payload would write the sentinel (bash builtins only: echo and a redirection) if it ever ran
PAYLOADS = [f"$(echo>{SENTINEL})", f"`echo>{SENTINEL}`", f"'$(echo>{SENTINEL})'", f";echo>{SENTINEL};",
            f"&&echo>{SENTINEL}", f"|echo>{SENTINEL}", f"'; echo>{SENTINEL}; '", f" x $(echo>{SENTINEL}) y ",
            f"${{IFS}}echo>{SENTINEL}", f"$((1))$(echo>{SENTINEL})"]
noise = st.text(alphabet=st.sampled_from(list("ab /$()'`;&|*?-_.{}<>~!# ")), max_size=8)
hostile = st.builds(lambda a, p, b: a + p + b, noise, st.sampled_from(PAYLOADS), noise)
PATH_FIELDS = ["workdir", "memcache_config_dir", "profiler_dir", "vllm_ascend_source_dir"]

# sourced before every script (BASH_ENV): nothing outside bash runs, and the scripts run to their
# end (no set -e/-u stop, no cd/source/exec away), so every line with an inventory value is reached
STUBS = """command_not_found_handle() { return 0; }
source() { :; }
cd() { :; }
exec() { :; }
set() { builtin set "$@"; builtin set +eu +o pipefail; }
"""


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    box = tmp_path_factory.mktemp("sandbox")
    (box / "bin").mkdir()
    (box / "bin" / "cat").symlink_to("/bin/cat")  # the liveness probe reads the pid file's content
    (box / "stubs.sh").write_text(STUBS)
    return box


def run_bash(box: Path, argv: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    """Run ``argv`` (a bash or sh command line) in the sandbox; external commands stubbed away."""
    base = {"PATH": str(box / "bin"), "BASH_ENV": str(box / "stubs.sh"), "HOME": str(box)}
    res = subprocess.run([f"/bin/{argv[0]}", *argv[1:]], cwd=box, env=base | (env or {}), input=stdin,
                         capture_output=True, text=True, timeout=30)
    return res.stdout


def assert_nothing_ran(box: Path) -> None:
    found = [p for p in box.rglob(SENTINEL + "*")]
    for p in found:
        p.unlink()
    assert not found, f"a value ran as code: {found}"


def hostile_inventory(sid: str, values: dict[str, str]) -> Inventory:
    inv = siminventory.default(sid).model_dump(mode="json")
    for name in PATH_FIELDS:
        inv["paths"][name] = "/opt/" + values[name]
    inv["model_path"] = "/models/" + values["model_path"]
    return Inventory.model_validate(inv)


field_values = st.fixed_dictionaries({name: hostile for name in [*PATH_FIELDS, "model_path"]})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(sid=st.sampled_from(list(catalog.SCENARIOS)), values=field_values)
def test_hostile_inventory_paths_never_run(sid, values, sandbox):
    """Render, the up-side probes and the check commands, each run by bash with hostile paths."""
    rendered = render.build(sid, hostile_inventory(sid, values))
    for files in rendered.files.values():
        for name, text in files.items():
            if name.endswith(".sh"):
                run_bash(sandbox, ["bash", "-c", text, name])
    procs = list(rendered.plan.processes())
    # up: the start command (paths reach it as environment) and the liveness probe (as arguments)
    for proc in procs:
        run_bash(sandbox, ["bash", "-c", lifecycle.START],
                 env={"K3_PID": lifecycle.pid_file(proc), "K3_LOG": proc.log, "K3_SCRIPT": proc.script or ""})
    answers = run_bash(sandbox, lifecycle.alive_argv([lifecycle.pid_file(p) for p in procs])).split()
    assert answers == ["0"] * len(procs)  # no pid file yet: each one alive, one answer each
    # evidence: every process log in one batch; checks: the staged files each per-node check reads
    script, _ = batch_script([f"cat {shlex.quote(p.log)}" for p in procs])
    run_bash(sandbox, ["sh", "-c", script])
    for node in rendered.plan.nodes:
        cats = [c for c in nodetools.commands(node) if c.startswith("cat ")]
        run_bash(sandbox, ["sh", "-c", "; ".join(cats)])
    assert_nothing_ran(sandbox)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile)
def test_liveness_of_a_hostile_or_spaced_path_is_the_process_itself(value, sandbox):
    """A live process whose pid file sits under a path with spaces or metacharacters is alive."""
    d = sandbox / "run" / value.replace("/", "_")
    d.mkdir(parents=True, exist_ok=True)
    live, dead = d / "live.pid", d / "dead.pid"
    live.write_text(str(os.getpid()))
    dead.write_text("999999999")
    assert run_bash(sandbox, lifecycle.alive_argv([str(live), str(dead), str(d / "none.pid")])).split() == ["0", "1", "0"]
    assert_nothing_ran(sandbox)


tool_value = st.one_of(hostile, st.from_regex(r"\d[^\s]{0,12}", fullmatch=True), st.ip_addresses(v=4).map(str))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=tool_value, kind=st.sampled_from(["ip", "vnic"]), verb=st.sampled_from(["-ping", "-hccs_ping"]))
def test_device_addresses_are_addresses_before_a_ping_uses_them(value, kind, verb, sandbox):
    """A peer's hccn_tool output is read as an address or refused; the ping built from it runs nothing."""
    if kind == "vnic":
        text = f"vnic link status:UP\nvnic ipaddr:{value}\nvnic netmask:255.255.255.0\n"
    else:
        text = f"ipaddr:{value}\nnetmask:255.255.255.0\n"
    try:
        address = (toolparse.vnic if kind == "vnic" else toolparse.ip)(text).address
    except toolparse.Unparsed:
        address = None
    if address is None:  # refused, or the unset 0.0.0.0: no ping is built from it
        if value != toolparse.UNSET:
            with pytest.raises(ValueError):
                nodetools.ping(0, verb, value)
        return
    assert address == value.strip()
    run_bash(sandbox, ["sh", "-c", nodetools.ping(0, verb, address)])
    assert_nothing_ran(sandbox)


def test_ping_refuses_what_is_not_an_address():
    for bad in [f"1.2.3.4;echo>{SENTINEL}", "1.2.3.4 5", "$(id)", "", "1.2.3.4\n", "::1"]:
        with pytest.raises(ValueError):
            nodetools.ping(0, "-ping", bad)
    with pytest.raises(ValueError):
        nodetools.ping(0, "-ping; id", "1.2.3.4")


@pytest.mark.parametrize("bad", ["/a\nb", "/a\x1b[31mb", "/a\x9bb", "/a\u202eb", "/a\u2066b", '/a"b', "/a\\b"])
def test_path_pattern_refuses_controls_and_bidi(bad):
    assert not re.fullmatch(PATH_RE, bad)
    inv = siminventory.default("a3_pd_1m").model_dump(mode="json")
    inv["paths"]["workdir"] = bad
    with pytest.raises(InventoryError):
        parse(inv)
