"""An exception raised with no message is an error line (#32 pass 20, from heldout17's one silent failed log).

Python then ends the traceback with the class name alone ("NotImplementedError"), with no colon for the exception
rule to find; under torchrun each line carries its rank's prefix ("[rank0]: ").
"""
from __future__ import annotations

from pathlib import Path

from tests.unit.diagnosis.onelog import diagnose_text

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def _first(tmp_path: Path, text: str) -> list[str]:
    return [e.text for e in diagnose_text(tmp_path, text).first_errors]


def test_a_ranks_bare_notimplementederror_is_the_first_error(tmp_path):
    # heldout17/unknown--vllm-fork-1557.log (real, HabanaAI/vllm-fork PR#1557): warmup raises NotImplementedError
    text = (CORPUS / "heldout17/unknown--vllm-fork-1557.log").read_text()
    assert any(t.endswith("NotImplementedError") for t in _first(tmp_path, text)), _first(tmp_path, text)


def test_a_bare_class_at_the_start_of_a_line_is_an_error(tmp_path):
    # built from CPython's traceback format: "raise KeyError" with no argument prints the class alone
    text = 'Traceback (most recent call last):\n  File "serve.py", line 3, in <module>\n    raise TimeoutError\nTimeoutError\n'
    assert "TimeoutError" in _first(tmp_path, text)


def test_prose_or_an_info_line_ending_in_a_class_name_is_no_error(tmp_path):
    # near lines: a class named at the end of a sentence, or by an INFO line, raises nothing
    text = ("INFO 05-21 16:41:10 [registry.py:1] retry policy registered for ConnectionError\n"
            "the handler maps every timeout to TimeoutError\n")
    assert _first(tmp_path, text) == []
