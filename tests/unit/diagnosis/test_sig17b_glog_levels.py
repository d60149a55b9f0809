"""glog's level letter is read on its own line (#32 pass 17b): "(?:^|\\s)E0805 ..." let the newline before the letter
start the match, so an E line was reported as the line above it, and an I line below another line was never seen as
INFO (the check starts at the line's first byte: the newline before it is out of reach). The meaning layer then read
the wrong line: the INFO above the error, not the error.
"""
from __future__ import annotations

from pathlib import Path

from tests.unit.diagnosis.onelog import diagnose_text
from tests.unit.diagnosis.test_meaning_reach import diagnose_without

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def _first(tmp_path: Path, text: str) -> list[str]:
    return [e.text for e in diagnose_text(tmp_path, text).first_errors]


def test_the_e_line_is_the_first_error_not_the_i_line_above_it(tmp_path):
    # vllm-ascend#13974 (Mooncake's Ascend direct transport): four I lines, then "E0805 ... Register mem ret:103900."
    # (the cause's own signature taken out, as for a wording nobody wrote one for: the first errors are then shown)
    text = (CORPUS / "dev/mooncake-register-memory--vllm-ascend-13974.log").read_text()
    first = [e.text for e in diagnose_without(tmp_path, "mooncake-register-memory", text).first_errors]
    assert any(t.startswith("E0805 ") and "Register mem ret:103900." in t for t in first), first
    assert not any(t.startswith("I0805 ") for t in first), first


def test_another_components_glog_lines_are_read_by_their_own_letter(tmp_path):
    # Triton server#7950 (heldout13/unknown--triton-server-7950.log, real): an E line between two I lines, the second I
    # line with "failed to load" in it; only the E line is an error
    text = (CORPUS / "heldout13/unknown--triton-server-7950.log").read_text()
    first = _first(tmp_path, text)
    assert [t[:6] for t in first] == ["E0120 "], first


def test_an_info_line_that_says_failed_is_no_error_below_another_line(tmp_path):
    # Mooncake#2177 (dev/unknown--mooncake-2177.log line 2, real): Mooncake logs a missing descriptor lookup at INFO
    line = (CORPUS / "dev/unknown--mooncake-2177.log").read_text().splitlines()[1]
    assert line.startswith("I0521 ") and "Failed to get segment descriptor" in line
    healthy = "INFO 05-21 16:41:10 [core.py:1] engine started\n" + line + "\n"
    assert _first(tmp_path, healthy) == []


def test_a_warning_line_below_another_is_a_warning(tmp_path):
    # glog's W letter below another line (built from glog's line format "Wmmdd hh:mm:ss.uuuuuu tid file:line] msg")
    text = "I0521 16:41:10.810740  4097 client.cpp:10] starting\nW0521 16:41:10.810750  4097 client.cpp:11] retry " \
           "failed once, trying again\n"
    assert _first(tmp_path, text) == []
