"""The CLI's contract: documented exit codes, one-line messages naming the problem, nothing written."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from k3lab import errors
from k3lab.cli import main as cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_bare_k3lab_prints_help(capsys):
    code, out, _ = run(capsys)
    assert code == 0 and "usage: k3lab" in out and "exit codes:" in out


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("k3lab ")


@pytest.mark.parametrize("argv, words", [
    (["rendr", "a3_pd"], "did you mean 'render'"),
    (["render", "a3_pdd", "--out", "x"], "did you mean 'a3_pd'"),
    (["preflight", "a3_pd", "--jsn"], "did you mean '--json'"),
    (["render", "a3_pd", "--out", "x", "-o", "parser=off"], "unknown option(s) 'parser' (did you mean 'parsers'?)"),
    (["render", "a3_pd", "--out", "x", "-o", "parsers"], "KEY=VALUE"),
    (["preflight"], "give a SCENARIO or --list"),
    (["faults", "--id", "S-DP-RANK"], "did you mean"),
    (["up", "nope"], "unknown scenario 'nope'"),
    # an empty $RUN in a script is not every run; a path is not a run id (no read outside runs/)
    (["down", ""], "not a run id: ''"),
    (["up", "a3_pd_1m", "--stages-only"], "--stages-only proves a lab's hosts and hardware"),
    (["up", "a3_pd_1m", "--stages-only", "--keep"], "--keep has nothing to keep"),
    (["down"], "give a run id (k3lab status) or --all"),
    (["down", "r1", "--all"], "not both"),
    (["down", "../x"], "not a run id: '../x'"),
    (["status", "../x"], "not a run id: '../x'"),
    (["status", ".."], "not a run id: '..'"),
    (["down", "/etc"], "not a run id"),
])
def test_usage_errors_exit_2_with_a_hint(capsys, tmp_path, argv, words):
    os.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == errors.USAGE, err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_every_option_has_help_and_o_lists_its_keys():
    ap = cli.parser()
    sub = next(a for a in ap._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"k3lab {name} {action.option_strings or action.dest} has no help text"
    text = sub.choices["render"].format_help()
    assert "draft:" in text and "parsers:" in text


@pytest.mark.parametrize("argv", [["list"], ["schema"], ["faults", "--list"]])
def test_a_closed_output_pipe_ends_quietly(argv):
    # `k3lab list | head -1`: the reader has gone; no "environment error", no traceback at exit
    r, w = os.pipe()
    os.close(r)
    try:
        res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", *argv], stdout=w, stderr=subprocess.PIPE,
                             text=True, timeout=60)
    finally:
        os.close(w)
    assert res.returncode == errors.PIPE_CLOSED and res.stderr == ""


def test_python_m_runs_the_whole_module_before_main():
    # `python -m k3lab.cli.main` runs main() at the __main__ guard: helpers defined after it did not exist yet
    res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", "rendr", "a3_pd"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == errors.USAGE and "did you mean 'render'" in res.stderr, res.stderr


def test_a_command_parsed_alone_behaves_as_in_the_whole_cli():
    import argparse

    def subparsers(ap):
        return next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices

    full = subparsers(cli.parser())
    for name in full:
        alone = subparsers(cli.parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == full[name].format_help()
    assert list(subparsers(cli.parser("rendr"))) == list(full)  # unknown: the whole CLI, for did-you-mean


def test_internal_error_is_one_line_and_logs_the_traceback(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_LOG_DIR", str(tmp_path))

    def boom(args):
        raise ValueError("something broke\nsecond line")

    monkeypatch.setattr(cli, "cmd_list", boom)
    code, _, err = run(capsys, "list")
    assert code == errors.INTERNAL
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    logs = list(tmp_path.glob("k3lab-crash-*.log"))
    assert len(logs) == 1 and "Traceback" in logs[0].read_text() and str(logs[0]) in err


def test_crash_log_takes_undecodable_argv(capsys, tmp_path, monkeypatch):
    # bytes that are not UTF-8 reach argv as lone surrogates; the log writer must not crash on them
    monkeypatch.setenv("K3LAB_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(cli, "cmd_list", lambda args: 1 / 0)
    code = cli.main(["list", "--", "\udcff"])
    assert code == errors.INTERNAL and "Traceback" not in capsys.readouterr().err
    assert "\\udcff" in next(tmp_path.glob("k3lab-crash-*.log")).read_text()


def test_environment_error_exits_3(capsys, monkeypatch):
    DockerException = type("DockerException", (Exception,), {"__module__": "docker.errors"})

    def down(args):
        raise DockerException("Error while fetching server API version")

    monkeypatch.setattr(cli, "cmd_list", down)
    code, _, err = run(capsys, "list")
    assert code == errors.ENVIRONMENT and "Traceback" not in err and "server API version" in err


def test_gate_failure_is_checks_failed():
    from k3lab.launch import lifecycle

    assert issubclass(lifecycle.GateFailed, errors.ChecksFailed)


def test_list_shows_roles_platform_guide_and_section(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("k3_a3_pd "))
    assert "8xprefill 8xdecode 1xmetaservice" in line and "A3" in line and "K3 §5.1.2" in line


def test_faults_list_and_unknown_id(capsys):
    code, out, _ = run(capsys, "faults", "--list")
    assert code == 0 and "S-KV-RESERVED" in out and "L-TLS" in out
    code, _, err = run(capsys, "faults", "--static-only", "--id", "NOPE")
    assert code == errors.USAGE and "unknown fault id 'NOPE'" in err


def test_preflight_list_has_every_finding_id(capsys):
    code, out, _ = run(capsys, "preflight", "--list")
    assert code == 0
    for cid in ("PF-CHECKPOINT", "PF-ADDR-PLACEHOLDER", "PF-ADDR-SPECIAL", "PF-SIM-SUBNET", "PF-CONTAINER-SHARED",
                "PF-OPTION-UNUSED"):
        assert cid in out


# ------------------------------------------------------------------------------ safe output


def test_render_refuses_non_empty_out_and_force_replaces_it(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old render")
    code, _, err = run(capsys, "render", "a3_pd", "--out", str(out))
    assert code == errors.USAGE and "not empty" in err and "--force" in err
    assert (out / "stale.txt").exists()
    code, _, _ = run(capsys, "render", "a3_pd", "--out", str(out), "--force")
    assert code == 0 and not (out / "stale.txt").exists() and (out / "plan.json").exists()
    assert os.access(out / "p0" / "docker_run.sh", os.X_OK)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary directories left behind"


def test_force_never_follows_symlinks_out_of_out(capsys, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "p0").symlink_to(victim)  # an old render's node directory replaced by a symlink
    (out / "plan.json").symlink_to(victim / "precious")
    code, _, _ = run(capsys, "render", "a3_pd", "--out", str(out), "--force")
    assert code == 0
    assert (victim / "precious").read_text() == "keep" and sorted(os.listdir(victim)) == ["precious"]
    assert not (out / "p0").is_symlink() and (out / "p0" / "docker_run.sh").is_file()


@pytest.mark.parametrize("out, words", [
    ("", "empty path"),
    ("/sys/k3lab", "refusing to write under /sys"),
    ("/proc/self/k3lab", "refusing to write under /proc"),
    ("@file", "not a directory"),
    ("@symlink", "symlink"),
])
def test_bad_out_is_refused_before_rendering(capsys, tmp_path, out, words):
    if out == "@file":
        out = str(tmp_path / "afile")
        (tmp_path / "afile").write_text("x")
    elif out == "@symlink":
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        out = str(tmp_path / "link")
    code, _, err = run(capsys, "render", "a3_pd", "--out", out)
    assert code == errors.USAGE and words in err and "Traceback" not in err
    assert not list((tmp_path / "real").iterdir()) if (tmp_path / "real").exists() else True


def test_bad_inventory_writes_nothing_even_into_an_existing_empty_out(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes: []\n")
    code, _, _ = run(capsys, "render", "a3_pd", "-i", str(inv), "--out", str(out))
    assert code == errors.USAGE and list(out.iterdir()) == [] and sorted(os.listdir(tmp_path)) == ["inv.yaml", "out"]


# Start-up speed guard (no timing: what a command imports decides what it costs). The live stack
# (Docker SDK, paramiko, rich, HTTP clients), report templating and schema validators cost ~0.6 s a
# process; YAML is not needed without --inventory, and listing needs no pydantic at all. Without
# --inventory no pydantic validator is built (building the first one loads pydantic's plugin loader).
NO_VALIDATOR = ("yaml", "pydantic.plugin._loader", "importlib.metadata")
LIVE_STACK = ("docker", "paramiko", "rich", "requests", "httpx", "openai", "jinja2", "jsonschema", "pytest",
              "testinfra", "hypothesis")
INVENTORY_FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "inventories", "a3_pd.yaml")


# render alone writes RUNBOOK.md with jinja2 (about 30 ms); preflight, list and the checks' lists never do
RENDER_ONLY = ("jinja2",)


@pytest.mark.parametrize("commands, also_absent", [
    ([["preflight", "a3_pd"], ["render", "a3_pd", "--out", "{out}"]], NO_VALIDATOR),
    ([["preflight", "a5_pd_pooled"], ["preflight", "k3_a3_mixed", "--target", "sim"]], NO_VALIDATOR + RENDER_ONLY),
    ([["list"], ["--version"], ["env"], ["env", "--format", "json"]], ("pydantic", "yaml")),
    ([["preflight", "--list"], ["faults", "--list"]], ("yaml",)),
    ([["schema"], ["init", "a3_pd", "--out", "{out}.yaml"], ["preflight", "a3_pd", "-i", INVENTORY_FIXTURE]], ()),
], ids=["render-preflight", "preflight", "list-version", "check-lists", "schema-init-inventory"])
def test_static_commands_do_not_import_the_live_stack(commands, also_absent, tmp_path):
    code = ("import json, sys, contextlib, io\n"
            "from k3lab.cli import main as cli\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        rc = cli.main(argv)\n"
            "    assert rc in (0, 1), (argv, rc)\n"
            "print('MODULES', json.dumps(sorted(sys.modules)))\n")
    import json

    argvs = [[a.replace("{out}", str(tmp_path / "out")) for a in argv] for argv in commands]
    res = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = set(json.loads(res.stdout.split("MODULES ", 1)[1]))
    stack = tuple(m for m in LIVE_STACK if not (m in RENDER_ONLY and any(a[0] == "render" for a in commands)))
    heavy = sorted(m for m in stack + also_absent if m in loaded)
    assert heavy == [], f"{commands} imported {heavy}"


@pytest.mark.parametrize("flag", ["--out", "--json"])  # --json FILE: the older spelling, kept
def test_faults_writes_its_rows_with_out(flag, tmp_path, capsys):
    out = tmp_path / "faults.json"
    assert cli.main(["faults", "--static-only", "--id", "S-DP-RANK-DUP", flag, str(out), "--format", "json"]) == 0
    import json

    printed = json.loads(capsys.readouterr().out)
    assert [r["fault"] for r in printed["rows"]] == ["S-DP-RANK-DUP"]
    assert out.is_file() and out.with_suffix(".md").is_file()


def test_triage_json_is_a_deprecated_spelling_of_format_json(capsys):
    assert cli.parser("triage").parse_args(["triage", "d", "--json"]).format == "json"
    assert cli.main(["triage", "--help"]) == 0
    assert "deprecated spelling of --format json" in " ".join(capsys.readouterr().out.split())
