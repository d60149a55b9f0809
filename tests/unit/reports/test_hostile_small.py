"""The smaller hostile cases of issue #26 (item 5): each one refused or defused, with exit 2 where it is
bad input. Docker-free."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from k3lab import errors
from k3lab.cli.main import main
from k3lab.model import siminventory
from k3lab.reports import gate, releasereport
from k3lab.reports.templating import render_html

HOSTILE = "red \x1b[31mALARM\x1b[0m nul\x00 bel\x07 csi\x9b2J bidi\u202eevil del\x7f vt\x0b"


def _doc(message: str) -> dict:
    item = gate.Item("conformance/test_npu.py::t[node1]", "npu.t", "npu", "block", "fail", message, "node1")
    return {"scenarios": [gate.decide("a3_pd", [item]).to_json()]}


def test_release_junit_stays_valid_xml_with_control_characters():
    text = releasereport.release_junit(_doc(HOSTILE))
    root = ET.fromstring(text.encode())  # raises on a character XML 1.0 does not allow
    [failure] = root.iter("failure")
    msg = failure.get("message") or ""
    assert "ALARM" in msg and "\\x00" in msg and "\\u202e" in msg
    assert not any(c in msg for c in "\x1b\x00\x07\x9b\u202e\x7f\x0b")


def test_printable_never_lets_a_control_or_bidi_character_through():
    out = errors.printable(HOSTILE + "\ttab\nline")
    assert out.startswith("red \\x1b[31mALARM\\x1b[0m nul\\x00") and "\ttab\nline" in out  # shown, not run
    assert not any(0x80 <= ord(c) <= 0x9f or ord(c) < 0x20 and c not in "\t\n" or c in "\u202e\x7f" for c in out)


@pytest.mark.parametrize("argv", [["render", "a3_pd\u202e", "--out", "x"], ["render", "a3\x9b2Jpd", "--out", "x"],
                                  ["status", "run\x1b]0;owned\x07"], ["down", "r\u2066un"]])
def test_c1_controls_and_bidi_never_reach_the_terminal_raw(argv, capsys, tmp_path):
    os.chdir(tmp_path)
    assert main(argv) == errors.USAGE
    err = capsys.readouterr().err
    assert err and not any(0x80 <= ord(c) <= 0x9f or c in "\x1b\u202e\u2066" for c in err), repr(err)


def test_an_ssh_endpoint_with_a_password_is_refused_without_printing_it(capsys, tmp_path):
    inv = siminventory.default("a3_pd_1m").model_dump(mode="json", exclude_none=True)
    inv["nodes"][0]["endpoint"] = "ssh://root:Hunter2Secret@10.0.0.1:22"
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(inv))
    assert main(["render", "a3_pd_1m", "-i", str(path), "--out", str(tmp_path / "out")]) == errors.USAGE
    err = capsys.readouterr().err
    assert "Hunter2Secret" not in err and "ssh://root:***@10.0.0.1:22" in err and "no password" in err


def test_redaction_is_of_values_never_of_the_finished_html(monkeypatch):
    monkeypatch.setenv("K3LAB_API_KEY", "td")  # a short key: a replace over HTML would rewrite <td>
    html = render_html("<table><tr><td class='td'>{{ v }}</td>{% for x in xs %}<td>{{ x }}</td>{% endfor %}</tr></table>",
                       v="key td here", xs=["std", {"k": "td"}])
    assert html.count("<td") == 3 and "class='td'" in html
    assert "key &lt;redacted&gt; here" in html and "s&lt;redacted&gt;" in html and "td" not in html.replace("<td", "").replace("'td'", "").replace("</td>", "")


# which rename of a --force render fails: the new tree taking the old one's place, or the old tree moving
# aside (a mount point cannot be moved)
_BLOCKED_RENAME = {
    "new-tree-cannot-take-its-place": lambda src, dst, out: Path(dst) == out and ".k3lab-old-" not in str(src),
    "old-tree-cannot-move": lambda src, dst, out: Path(src) == out,
}


@pytest.mark.parametrize("blocked", sorted(_BLOCKED_RENAME))
def test_a_failed_force_render_leaves_the_old_tree_and_nothing_behind(blocked, monkeypatch, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous render")
    real = os.rename

    def failing(src, dst):
        if _BLOCKED_RENAME[blocked](src, dst, out):
            raise OSError(16, "Device or resource busy")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    assert main(["render", "a3_pd", "--out", str(out), "--force"]) == errors.USAGE
    assert "cannot write" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "previous render"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no .out.k3lab-old-*, no .out.k3lab-*
