"""Never silent on a Go or Rust program's crash (#32): a backend written in either language (LocalAI's vllm-cpp, a
router, an operator) dies with a runtime panic, not a Python traceback or an ERROR line.

The real case is heldout11's LocalAI#11379 ("panic: vllm-cpp: ABI mismatch ..." then "goroutine 1 [running]:"); the
lines below are built from the runtimes' own formats (Go: runtime/panic.go prints "panic: " and the value, then the
goroutine trace; Rust: std's default hook prints "thread '<name>' panicked at <file>:<line>:<col>:"), not real logs.
"""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

BUILT = [
    # Go runtime format (runtime/panic.go printpanics), another node's backend
    "starting backend on 127.0.0.1:40123\npanic: runtime error: invalid memory address or nil pointer dereference\n"
    "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x4a1b2c]\n\ngoroutine 1 [running]:\nmain.main()\n",
    # Rust std's default panic hook (Rust >= 1.73 puts the message on the next line)
    "router listening on 0.0.0.0:8080\nthread 'main' panicked at src/main.rs:41:10:\n"
    "called `Result::unwrap()` on an `Err` value: Os { code: 2, kind: NotFound }\n",
]


@pytest.mark.parametrize("text", BUILT)
def test_a_runtime_panic_is_the_first_error(tmp_path, text):
    d = diagnose_text(tmp_path, text)
    assert d.first_errors and "panic" in d.first_errors[0].text, d.first_errors


@pytest.mark.parametrize("text", [
    'time=2026-03-25T09:28:05.821+08:00 level=INFO source=server.go:88 msg="recovered from a panic in a handler: none"\n',
    "INFO 12-04 10:00:00 [api_server.py:1] the word panic in a sentence: panic: is not at the start of this line\n",
])
def test_the_word_panic_in_a_healthy_line_is_no_error(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))
