"""The README's newcomer path and the inventory walk-through (docs/inventories.md) work as written; `k3lab init`
output is valid."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k3lab import errors
from k3lab.cli import main as cli
from k3lab.model import catalog, inventory
from k3lab.preflight import checks as preflight
from k3lab.render import artefacts as render

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
INVENTORIES = (ROOT / "docs" / "inventories.md").read_text()


def _block_after(heading: str, lang: str = "", text: str = README) -> str:
    start = text.index(heading)
    m = re.compile(r"```" + lang + r"\n(.*?)```", re.S).search(text, start)
    assert m, heading
    return m.group(1)


def test_first_steps_run_as_written(tmp_path):
    """Every k3lab line of "First steps" (the venv and pip lines are the install itself)."""
    lines = [ln.split("#")[0].strip() for ln in _block_after("## First steps").splitlines()]
    commands = [shlex.split(ln) for ln in lines if ln.startswith("k3lab")]
    assert len(commands) >= 6
    for argv in commands:
        res = subprocess.run([sys.executable, "-m", "k3lab.cli.main", *argv[1:]], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                          "PYTHONPATH": str(ROOT)})
        assert res.returncode == 0, (argv, res.stderr)
    assert (tmp_path / "lab.yaml").is_file() and (tmp_path / "build" / "a3_pd_1m" / "plan.json").is_file()
    assert "PF-ADDR-PLACEHOLDER" in res.stdout  # the last line: preflight of the fresh inventory


def test_walkthrough_inventory_is_valid_and_clean(tmp_path):
    data = yaml.safe_load(_block_after("## Writing a lab inventory", "yaml", INVENTORIES))
    inv = inventory.parse(data, "README")
    r = render.build(inv.scenario, inv, target="lab")
    findings = preflight.run(r.plan, r.files)
    assert preflight.errors(findings) == []
    assert not [f for f in findings if f.check.startswith("PF-ADDR")]


def test_walkthrough_error_example_is_what_the_kit_says(tmp_path, capsys):
    data = yaml.safe_load(_block_after("## Writing a lab inventory", "yaml", INVENTORIES))
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
    lines = text.splitlines()
    d0 = next(i for i, ln in enumerate(lines) if "name: d0" in ln)
    lines[d0] = lines[d0].replace("rank: 0", "rank: true")
    (tmp_path / "lab.yaml").write_text("\n".join(lines) + "\n")
    code = cli.main(["preflight", "a3_pd_1m", "-i", str(tmp_path / "lab.yaml")])
    err = capsys.readouterr().err
    assert code == errors.USAGE
    assert "nodes.4.rank (node 'd0', " in err and "expected a number, got the boolean true" in err


@pytest.mark.parametrize("sid", list(catalog.SCENARIOS))
def test_init_writes_a_valid_commented_inventory(sid, tmp_path, capsys):
    out = tmp_path / "lab.yaml"
    assert cli.main(["init", sid, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith(f"# k3lab lab inventory for {sid}")
    for key in ("scenario:", "image:", "model_path:", "ports:", "paths:", "lab:", "nodes:", "rank:", "local_ip:",
                "nic:", "endpoint:"):
        assert key in text
    inv = inventory.load(out)
    r = render.build(sid, inv, target="lab")
    findings = preflight.run(r.plan, r.files)
    assert preflight.errors(findings) == []
    assert {f.check for f in findings} >= {"PF-ADDR-PLACEHOLDER"}
    capsys.readouterr()
    # an existing file is never overwritten without --force
    assert cli.main(["init", sid, "--out", str(out)]) == errors.USAGE
    assert "exists" in capsys.readouterr().err
    assert cli.main(["init", sid, "--out", str(out), "--force"]) == 0


@pytest.mark.parametrize("out, words", [("", "empty path"), ("@dir", "is a directory"), ("/proc/x.yaml", "/proc"),
                                        ("@nodir", "does not exist")])
def test_init_bad_out(tmp_path, capsys, out, words):
    out = {"@dir": str(tmp_path), "@nodir": str(tmp_path / "no" / "lab.yaml")}.get(out, out)
    assert cli.main(["init", "a3_pd", "--out", out]) == errors.USAGE
    assert words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_init_unknown_scenario(tmp_path, capsys):
    assert cli.main(["init", "a3-pd", "--out", str(tmp_path / "x.yaml")]) == errors.USAGE
    assert "did you mean 'a3_pd'" in capsys.readouterr().err
