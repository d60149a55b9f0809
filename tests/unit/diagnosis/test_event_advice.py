"""A failure event is the first error of a log with no error-level line (a watchdog timeout, a crash signal, "out of
memory" at any level), but ADVICE about one is not an event: vLLM's model_runner (v0.2-v0.5) logs at INFO on every
start that captures CUDA graphs "If you are running out of memory, consider decreasing `gpu_memory_utilization`".
The healthy case is heldout13's pastebin vjSgS4up (a serverless vLLM worker that came up), flagged on first contact.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def test_the_real_healthy_worker_log_stays_clean(tmp_path):
    text = (CORPUS / "heldout13" / "healthy--pastebin-vjSgS4up.log").read_text()
    assert "If you are running out of memory" in text
    assert_clean(diagnose_text(tmp_path, text))


@pytest.mark.parametrize("line", [
    # vLLM model_runner.py (v0.4.x), logger.info at CUDA graph capture: the line every such start prints
    "INFO 02-17 03:15:22 model_runner.py:629] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are "
    "running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
    # the same advice shape for a timeout (built, not a real line)
    "[INFO] collective wait is 1800 s; if the job timed out, raise HCCL_EXEC_TIMEOUT",
])
def test_advice_about_an_event_is_no_first_error(tmp_path, line):
    assert_clean(diagnose_text(tmp_path, f"INFO start\n{line}\nINFO ready\n"))


@pytest.mark.parametrize("line", [
    "[INFO] RUNTIME(123,python):2025-01-01-00:00:00.000.000 [device.cc:1] watchdog timeout, stream 3",
    "(raylet) Task was killed because the node ran out of memory",
    "worker 3: Bus error (core dumped)",
])
def test_an_event_at_any_level_is_still_the_first_error(tmp_path, line):
    d = diagnose_text(tmp_path, f"INFO start\n{line}\n")
    assert d.failed and (d.findings or d.first_errors[0].text == line.strip()), d.first_errors
