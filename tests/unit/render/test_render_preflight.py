"""``k3lab render`` runs the static preflight: a plan that cannot come up is not written unless --force, and
then RUNBOOK.md opens with its errors (#36 item 2)."""
from __future__ import annotations

import yaml

from k3lab.cli import main
from k3lab.model import siminventory


def _inventory(tmp_path, **ranks):
    inv = siminventory.default("k3_a3_mixed").model_dump(mode="json", exclude_none=True)
    for node in inv["nodes"]:
        if node["name"] in ranks:
            node["rank"] = ranks[node["name"]]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def test_a_render_with_preflight_errors_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    code = main.main(["render", "k3_a3_mixed", "--target", "sim", "-i", _inventory(tmp_path, node2=1),
                      "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert "PF-DP-RANKS" in err and "nothing written" in err and "--force" in err


def test_force_writes_it_with_the_errors_on_top_of_the_runbook(tmp_path, capsys):
    out = tmp_path / "out"
    code = main.main(["render", "k3_a3_mixed", "--target", "sim", "-i", _inventory(tmp_path, node2=1),
                      "--out", str(out), "--force"])
    assert code == 0
    head = (out / "RUNBOOK.md").read_text().splitlines()[:4]
    assert head[0].startswith("> **Rendered with --force despite these preflight errors")
    assert any("PF-DP-RANKS" in line for line in head)


def test_a_clean_render_has_no_preamble(tmp_path):
    out = tmp_path / "out"
    assert main.main(["render", "k3_a3_mixed", "--target", "sim", "-i", _inventory(tmp_path), "--out", str(out)]) == 0
    assert not (out / "RUNBOOK.md").read_text().startswith(">")
