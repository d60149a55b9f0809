"""One output convention: every listing and status command's --format json validates against the JSON
Schema shipped in k3lab/schemas/, on stdout alone; no command ignores --format, and every command that prints
results takes --format text|json (the exceptions say why)."""
from __future__ import annotations

import argparse
import json

import jsonschema
import pytest

from k3lab import formats
from k3lab.cli import commands
from k3lab.cli import main as cli

# The commands without --format text|json, each with why: every other command prints a result and takes
# --format text|json (a walk of the parser below holds it, so a new command cannot forget it)
NO_FORMAT = {
    "render": "writes files; its one stdout line names the directory (plan.json there is the machine-readable result)",
    "init": "writes one inventory file; its one stdout line names it",
    "up": "prints only the run directory it created (runs/<run>/ holds run-state.json and the evidence)",
    "cycle": "stdout is the conformance suite's own pytest output; the results are files in runs/<run>/ "
             "(junit.xml, gate.json, summary.md; k3lab report RUN --format json names them)",
    "check": "as cycle: pytest's output, the results are files in runs/<run>/",
    "down": "prints nothing on stdout (progress on stderr, the outcome in the exit code)",
    "completion": "prints a shell script, not a result",
}
JSON_ONLY = {"schema": "prints a JSON Schema; --format text is refused"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    ap = cli.parser()
    return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices


def _format_choices(p: argparse.ArgumentParser) -> set[str] | None:
    return next((set(a.choices) for a in p._actions if "--format" in a.option_strings), None)


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_every_printing_command_takes_format_text_and_json(name):
    p = _subparsers()[name]
    opts = {s for a in p._actions for s in a.option_strings}
    assert {"-q", "-v"} <= opts, name
    choices = _format_choices(p)
    if name in NO_FORMAT:
        assert choices is None, f"{name} takes --format now: take it off NO_FORMAT"
        return
    if name in JSON_ONLY:
        assert choices == {"json"}, name
    else:
        assert choices is not None and {"text", "json"} <= choices, \
            f"k3lab {name} prints results: give it formats.add(p) (--format text|json) or say in NO_FORMAT why not"
    assert (formats.SCHEMAS / f"{name}.json").is_file(), f"{name}: no schema"


def test_the_exceptions_are_commands():
    assert set(NO_FORMAT) | set(JSON_ONLY) <= set(_subparsers())

def _json(capsys, argv, schema, codes=(0,)):
    code = cli.main(argv)
    out = capsys.readouterr()
    assert code in codes, (argv, out.err)
    doc = json.loads(out.out)  # stdout holds the document and nothing else
    jsonschema.Draft202012Validator.check_schema(formats.schema(schema))
    jsonschema.validate(doc, formats.schema(schema), cls=jsonschema.Draft202012Validator)
    return doc


@pytest.mark.parametrize("argv, schema", [
    (["list", "--format", "json"], "list"),
    (["faults", "--list", "--format", "json"], "faults-list"),
    (["preflight", "--list", "--format", "json"], "preflight-list"),
    (["preflight", "--list", "--json"], "preflight-list"),  # the old flag is an alias
    (["preflight", "a3_pd_pooled", "--format", "json"], "preflight"),
    (["preflight", "k3_a3_mixed", "--json"], "preflight"),
    (["policy", "--check", "k3lab/model/policies/default.yaml", "--format", "json"], "policy"),
    (["policy", "--schema", "--format", "json"], "policy-schema"),
    (["schema", "--format", "json"], "schema"),
    (["schema"], "schema"),
    (["env", "--format", "json"], "env"),
    (["triage", "tests/fixtures/failure_logs/npu-oom", "--format", "json"], "triage"),
    (["triage", "tests/fixtures/failure_logs/npu-oom", "--json"], "triage"),  # the old flag is an alias
])
def test_static_commands_json_validates(capsys, monkeypatch, argv, schema):
    from k3lab import paths

    monkeypatch.chdir(paths.PACKAGE.parent)
    _json(capsys, argv, schema, codes=(1,) if schema == "triage" else (0,))  # triage: a cause found is exit 1


def test_faults_matrix_json_validates(capsys):
    doc = _json(capsys, ["faults", "--static-only", "--id", "S-DP-RANK-DUP", "--format", "json"], "faults")
    assert [r["fault"] for r in doc["rows"]] == ["S-DP-RANK-DUP"]


def test_release_and_compare_json_validate(capsys, tmp_path):
    for side in ("a", "b"):
        doc = _json(capsys, ["release", "--static-only", "-s", "a3_pd", "-s", "k3_a3_mixed", "--out",
                             str(tmp_path / side), "--format", "json"], "release")
        assert doc["overall"] == "PASS" and not doc["live"]
    doc = _json(capsys, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"], "compare")
    assert [r["scenario"] for r in doc["scenarios"]] == ["a3_pd", "k3_a3_mixed"] and not doc["regression"]


class _Container:
    def __init__(self, run, node):
        self.labels = {"k3lab.run": run, "k3lab.node": node}
        self.status, self.name = "running", f"k3lab-{run}-{node}"


class _Pool:
    def __init__(self, ssh):
        pass

    def get(self, ep):
        return type("C", (), {"containers": type("L", (), {"list": lambda self, **kw: [_Container("r1", "n0")]})()})()


def test_status_json_validates(capsys, monkeypatch):
    monkeypatch.setattr(commands, "ClientPool", _Pool)
    doc = _json(capsys, ["status", "--format", "json"], "status")
    assert doc["containers"][0]["node"] == "n0"


def test_a_format_a_command_cannot_give_is_refused(capsys):
    assert cli.main(["schema", "--format", "text"]) == 2
    assert "invalid choice: 'text'" in capsys.readouterr().err


def test_logs_go_to_stderr_and_quiet_silences_them(capsys):
    formats.set_verbosity(0)
    formats.log("k3lab", "stage heads: ready")
    out = capsys.readouterr()
    assert out.out == "" and "stage heads: ready" in out.err
    formats.set_verbosity(-1)
    formats.log("k3lab", "hidden")
    assert capsys.readouterr().err == ""
    formats.set_verbosity(0)


def test_report_and_baseline_json_validate(capsys, tmp_path):
    import shutil

    from tests.unit.tools.test_compare import RUN, _lab_perf_run

    shutil.copytree(RUN, tmp_path / "run")
    doc = _json(capsys, ["report", str(tmp_path / "run"), "--format", "json"], "report", codes=(0, 1))
    assert doc["reports"]["gate"] == str(tmp_path / "run" / "gate.json")
    run = _lab_perf_run(tmp_path / "perf")
    doc = _json(capsys, ["baseline", "record", str(run), "--out", str(tmp_path / "b.json"), "--format", "json"],
                "baseline")
    assert doc["scenario"] == "k3_a3_mixed" and doc["out"] == str(tmp_path / "b.json")


def test_bench_json_validates_and_every_step_says_so_on_stderr(capsys, monkeypatch, tmp_path):
    """The steps themselves take a minute (tests/unit/tools has none of them); their figures are stand-ins here."""
    from k3lab.tools import bench

    cli_row = {"best_wall_s": 3.0, "meets_target": True, "best_cpu_s": 2.0, "median_wall_s": 3.1,
               "floor_import_pydantic_yaml_s": 1.0, "load_average": [1.0, 1.0, 1.0]}
    diag = {"best_s": 1.0, "best_cpu_s": 0.9, "meets_target": True, "judged_on": "wall", "preempted": 0,
            "top": "npu-oom@d3", "load_average": [1.0, 1.0, 1.0]}
    monkeypatch.setattr(bench, "render_preflight", lambda: {"all_twelve_s_median": 0.1})
    monkeypatch.setattr(bench, "cli_processes", lambda: cli_row)
    monkeypatch.setattr(bench, "cli_start", lambda: {"best_s": 0.1, "median_s": 0.12})
    monkeypatch.setattr(bench, "diagnosis", lambda: diag)
    formats.set_verbosity(0)
    code = cli.main(["bench", "--no-live", "--out", str(tmp_path / "bench.json"), "--format", "json"])
    out = capsys.readouterr()
    assert code == 0
    doc = json.loads(out.out)
    jsonschema.validate(doc, formats.schema("bench"), cls=jsonschema.Draft202012Validator)
    assert doc["live"] is False and json.loads((tmp_path / "bench.json").read_text())["diagnosis"] == diag
    for step in ("render + preflight", "version processes", "render/preflight processes", "diagnosis of a 17-node run"):
        assert f"{step}" in out.err and out.err.count(step) == 2, step  # announced, then timed
    assert cli.main(["bench", "--no-live", "--out", str(tmp_path / "bench.json")]) == 0
    printed = capsys.readouterr().out
    assert "24 CLI processes: best 3.0s wall" in printed and "k3lab --version process: best 0.1s" in printed


def test_a_ticker_logs_at_most_every_interval(capsys, monkeypatch):
    import time

    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    formats.set_verbosity(0)
    tick = formats.ticker("bench", every_s=2.0)
    for i in range(10):  # one item every 0.5 s: a line every fourth
        now[0] += 0.5
        tick(f"item {i}")
    assert [line.split("] ")[1] for line in capsys.readouterr().err.splitlines()] == ["item 3", "item 7"]


def test_labemu_status_json_validates(capsys, monkeypatch):
    from k3lab.launch import labemu

    monkeypatch.setattr(labemu.os, "geteuid", lambda: 0)
    monkeypatch.setattr(labemu, "status", lambda: [{"host": "h1", "node": "p0", "ip": "10.0.0.1",
                                                   "endpoint": "ssh://root@10.0.0.1", "engine": "up", "sshd": "up",
                                                   "containers": "none"}])
    assert _json(capsys, ["labemu", "status", "--format", "json"], "labemu")["hosts"][0]["node"] == "p0"
