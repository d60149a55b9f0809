"""Terminal and report hygiene (issue #35 item 4): text from outside the kit (evidence, results, versions,
log lines, file names, policy and acceptance reasons) reaches the terminal, summary.md and report.html only
through one printable function (k3lab.errors.printable), and a lone surrogate anywhere is shown, never a
crash (exit 4). capsys encodes strictly as UTF-8, as a terminal's stdout does: a surrogate that slipped
through would fail the command here too."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from k3lab import errors
from k3lab.cli.main import main

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "release" / "run-k3_a3_mixed"
ESC_MSG = "boom \x1b[31mRED\x1b]0;owned\x07 \u202eevil \x9b2J"
# what must never reach a terminal or a report raw: C0 but tab and newline, DEL, C1, bidi, surrogates
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def raw_chars(text: str) -> list[str]:
    return RAW.findall(text)


def _run(tmp_path: Path, name: str = "run", message: str | None = None) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURE, run)
    if message is not None:  # the first passed check fails with ``message``
        doc = json.loads((run / "conformance-results.json").read_text())
        t = next(t for t in doc["tests"] if t["outcome"] == "passed")
        t["outcome"], t["message"] = "failed", message
        (run / "conformance-results.json").write_text(json.dumps(doc))
    return run


def _log(run: Path, name: str | bytes, data: bytes) -> None:
    node = run / "evidence" / "node0"
    node.mkdir(parents=True, exist_ok=True)
    (node / os.fsdecode(name)).write_bytes(data)


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_printable_shows_a_lone_surrogate_and_keeps_tab_and_newline():
    assert errors.printable("a\udc80b\ud800\tc\nd") == "a\\udc80b\\ud800\tc\nd"
    assert errors.printable("plain text, ü and 中文") == "plain text, ü and 中文"


def test_an_escape_sequence_in_a_results_message_never_reaches_the_terminal_raw(tmp_path, capsys):
    good, bad = _run(tmp_path, "good"), _run(tmp_path, "bad", ESC_MSG)
    for argv in (["compare", str(good), str(bad)], ["compare", str(good), str(bad), "--format", "markdown"],
                 ["report", str(bad)]):
        code, out = _cli(capsys, *argv)
        assert code == 1 and "RED" in out, (argv, out)
        assert not raw_chars(out), (argv, raw_chars(out))
    for report in ("summary.md", "report.html"):
        text = (bad / report).read_text()
        assert "RED" in text and not raw_chars(text), (report, raw_chars(text))


def test_an_escape_sequence_in_a_log_line_never_reaches_triage_or_the_report_raw(tmp_path, capsys):
    run = _run(tmp_path, message="x")
    _log(run, "vllm.log", b"2026-01-01 00:00:00 ERROR \x1b[2J\x1b]0;owned\x07 RuntimeError: boom \xe2\x80\xae\n")
    code, out = _cli(capsys, "triage", str(run))
    assert code == 1 and "RuntimeError: boom" in out and not raw_chars(out), raw_chars(out)
    assert _cli(capsys, "report", str(run))[0] == 1
    for report in ("summary.md", "report.html"):
        assert not raw_chars((run / report).read_text()), report


@pytest.mark.parametrize("argv", [["report", "{run}"], ["compare", "{good}", "{run}"],
                                  ["compare", "{good}", "{run}", "--format", "markdown"], ["triage", "{run}"]])
def test_a_file_name_that_is_not_utf8_is_shown_never_a_crash(tmp_path, capsys, argv):
    good, run = _run(tmp_path, "good"), _run(tmp_path, message="x")
    _log(run, b"bad\xff\x1b[31m.log", b"2026-01-01 00:00:00 ERROR RuntimeError: boom\n")
    code, out = _cli(capsys, *[a.format(run=run, good=good) for a in argv])
    assert code in (0, 1) and "internal error" not in out, out
    assert not raw_chars(out), raw_chars(out)
    if argv[0] in ("report", "triage"):
        assert "bad\\udcff" in out or "bad\\udcff" in (run / "summary.md").read_text().replace("\\\\", "\\")
    if argv[0] == "report":
        html = (run / "report.html").read_text()
        assert "bad\\udcff" in html and "bad%FF%1B%5B31m.log" in html  # shown escaped, linked to the real name


@pytest.mark.parametrize("argv", [["report", "{run}"], ["compare", "{good}", "{run}"], ["triage", "{run}"],
                                  ["compare", "{good}", "{run}", "--format", "markdown"]])
def test_a_lone_surrogate_in_a_message_or_a_log_line_is_shown_never_a_crash(tmp_path, capsys, argv):
    good, run = _run(tmp_path, "good"), _run(tmp_path, message="lone \udc80 and \ud800 surrogates")
    _log(run, "vllm.log", b"2026-01-01 00:00:00 ERROR bad \xff\xfe \xed\xb2\x80 RuntimeError: boom\n")
    code, out = _cli(capsys, *[a.format(run=run, good=good) for a in argv])
    assert code in (0, 1) and "internal error" not in out, out
    assert not raw_chars(out), raw_chars(out)
    if argv[0] == "report":
        for report in ("summary.md", "report.html"):
            text = (run / report).read_text()
            assert "lone \\udc80 and \\ud800" in text.replace("\\\\", "\\") and not raw_chars(text), report


def test_a_preflight_acceptance_reason_with_an_escape_sequence_is_shown_not_run(tmp_path, capsys):
    inv = tmp_path / "lab.yaml"
    assert main(["init", "a3_pd", "--out", str(inv)]) == 0
    capsys.readouterr()
    inv.write_text(inv.read_text() + 'accept:\n  - check: PF-ADDR-PLACEHOLDER\n    nodes: []\n'
                   '    reason: "lab \\e[31mRED\\e]0;owned\\a \\u202eevil"\n')
    code, out = _cli(capsys, "preflight", "a3_pd", "-i", str(inv))
    assert code == 0 and "ACCEPTED PF-ADDR-PLACEHOLDER" in out and "RED" in out, out
    assert not raw_chars(out), raw_chars(out)


def test_catastrophic_policy_regexes_are_bounded_in_total_not_per_pattern(tmp_path, capsys):
    """Each deprecated regex rule had its own 0.2 s cap (0.5 s in practice) per skipped check: a policy of
    six catastrophic patterns over the fixture's 15 skips took about 45 s."""
    run = _run(tmp_path)
    bad = r"(\w|\s|.)*(\w|\s|.)*(\w|\s|.)*(y?){%d}\d"  # six distinct patterns, none with a literal to look for
    rules = "".join(f"    - {{check: '*', reason: '{bad % i}'}}\n" for i in range(6))
    pol = tmp_path / "policy.yaml"
    pol.write_text(f"schema: 1\nextends: none\ndefaults:\n  not_applicable:\n{rules}")
    start = time.monotonic()
    code, out = _cli(capsys, "report", str(run), "--policy", str(pol))
    assert code in (0, 1, 3) and "internal error" not in out
    assert time.monotonic() - start < 8


def test_the_diagnosis_added_to_junit_stays_valid_xml_with_hostile_log_names_and_lines(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    run = _run(tmp_path, message="x")
    (run / "junit.xml").write_text('<testsuites><testsuite name="pytest"><testcase classname="conformance.test_x" '
                                   'name="test_a"/></testsuite></testsuites>')
    _log(run, b"bad\xff\x1b[31m.log", b"2026-01-01 00:00:00 ERROR \x1b[2J RuntimeError: HCCL timeout \xed\xb2\x80\n")
    code, out = _cli(capsys, "report", str(run))
    assert code == 1 and "internal error" not in out, out
    text = (run / "junit.xml").read_text()
    ET.fromstring(text.encode())  # a control character XML 1.0 does not allow would raise here
    assert "k3lab.diagnosis" in text and "bad\\udcff" in text and not raw_chars(text)
