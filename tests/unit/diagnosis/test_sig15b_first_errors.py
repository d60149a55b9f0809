"""Never silent (pass 15 of #32): a log with no error-level line still failed when it shows a failure event at any
level. Lines BUILT from the components' statements (named beside each; none is a real log line), and near lines
that must stay clean.
"""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

FAILED = [
    # bash's report of a foreground job killed by SIGKILL (its signal name list: "Killed"; from memory), as a
    # launcher's output ends after the OOM killer or a supervisor took the process
    "Start to parse ranktable file\nFinished parsing ranktable file.\nKilled\n",
    # ...and bash's form for a script's child ("<script>: line <n>: <pid> Killed <command>"; from memory)
    "./start.sh: line 12: 31337 Killed                  python -m vllm.entrypoints.openai.api_server\n",
    # Triton Inference Server's model status table (server.cc, printed at INFO level): a model that did not load shows
    # "UNAVAILABLE: <reason>" in its Status cell (wording from memory and the table heldout13's triton-server#3786 shows)
    "I0101 00:00:00.000000 1 server.cc:592]\n+-------+---------+--------+\n| Model | Version | Status |\n"
    "+-------+---------+--------+\n| llama | 1       | UNAVAILABLE: Not found: unable to load shared library |\n",
    # torchvision/extension.py _assert_has_ops: "Couldn't load custom C++ ops. This can happen if ..." printed by a
    # wrapper that only warns
    "[W] torchvision: Couldn't load custom C++ ops. Falling back to Python ops.\n",
]


@pytest.mark.parametrize("text", FAILED)
def test_a_failure_event_at_any_level_is_a_first_error(tmp_path, text):
    d = diagnose_text(tmp_path, text)
    assert d.failed and (d.findings or d.first_errors), text


CLEAN = [
    # a word of the event inside an ordinary line: not bash's job report
    "INFO 01-01 00:00:00 [pool.py:10] Killed 2 idle workers after 60 s without requests\n",
    # Triton's table of models that loaded
    "I0101 00:00:00.000000 1 server.cc:592]\n| Model | Version | Status |\n| llama | 1       | READY  |\n",
    # vLLM's start-up warning on every vllm-ascend start (an import, not a load of an extension's ops)
    "WARNING 01-01 00:00:00 [_custom_ops.py:21] Failed to import from vllm._C with ImportError('libcuda.so.1: "
    "cannot open shared object file: No such file or directory')\n",
    # Hadoop's NativeCodeLoader warning on every start without its native library (it falls back; from memory)
    "WARN util.NativeCodeLoader: Unable to load native-hadoop library for your platform... using builtin-java classes "
    "where applicable\n",
]


@pytest.mark.parametrize("text", CLEAN)
def test_near_lines_stay_clean(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))
