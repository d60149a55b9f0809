"""One output convention: every listing and status command's --format json validates against the JSON
Schema shipped in k3lab/schemas/, on stdout alone; no command ignores --format."""
from __future__ import annotations

import argparse
import json

import jsonschema
import pytest

from k3lab import formats
from k3lab.cli import commands
from k3lab.cli import main as cli

LISTING = ["list", "status", "faults", "preflight", "compare", "release", "policy", "schema", "env"]


def _json(capsys, argv, schema, codes=(0,)):
    code = cli.main(argv)
    out = capsys.readouterr()
    assert code in codes, (argv, out.err)
    doc = json.loads(out.out)  # stdout holds the document and nothing else
    jsonschema.Draft202012Validator.check_schema(formats.schema(schema))
    jsonschema.validate(doc, formats.schema(schema), cls=jsonschema.Draft202012Validator)
    return doc


def test_every_listing_command_takes_format():
    ap = cli.parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name in LISTING:
        opts = {s for a in sub.choices[name]._actions for s in a.option_strings}
        assert "--format" in opts, name
        assert {"-q", "-v"} <= opts, name


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
])
def test_static_commands_json_validates(capsys, monkeypatch, argv, schema):
    from k3lab import paths

    monkeypatch.chdir(paths.PACKAGE.parent)
    _json(capsys, argv, schema)


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
