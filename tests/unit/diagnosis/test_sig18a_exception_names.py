"""An exception whose class is named under its module's dotted path, whatever its case, is an error line (#32, pass
18a): a pybind11 binding's lower-case classes ("nixl._bindings.nixlNotFoundError") and the socket module's
("socket.gaierror") were read as no error at all, so a log holding nothing else was silent."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def test_a_bindings_exception_is_the_first_error_of_a_real_excerpt(tmp_path):
    # heldout15/unknown--dynamo-1519.log (ai-dynamo/dynamo#1519): frames of vLLM's NixlConnector, then the exception
    text = (CORPUS / "heldout15/unknown--dynamo-1519.log").read_text()
    d = diagnose_text(tmp_path, text)
    assert [e.text for e in d.first_errors][:1] == ["nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND"]


@pytest.mark.parametrize("line", [
    # real, shadowsocks/shadowsocks#1143 (the traceback's last line, found with search)
    "socket.gaierror: [Errno -2] Name or service not known",
    # real, heldout15/unknown--dynamo-814.log (ai-dynamo/dynamo#814)
    "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND",
])
def test_a_dotted_lower_case_exception_is_an_error(tmp_path, line):
    frame = '  File "/srv/app/main.py", line 9, in <module>\n    main()\n'
    d = diagnose_text(tmp_path, frame + line + "\n")
    assert [e.text for e in d.first_errors] == [line]


@pytest.mark.parametrize("line", [
    "INFO 01-24 11:28:59 api_server.py:651] metrics.lasterror: 0",  # a counter's name, not a class with a colon
    "config.on_error: retry",  # a setting named error, no class
    "stats.num_errors: 0 of 128 requests",
    "self.terror: none",  # a word ending in "error" under no module path
])
def test_names_that_only_end_like_an_error_stay_clean(tmp_path, line):
    assert_clean(diagnose_text(tmp_path, line + "\n"))
