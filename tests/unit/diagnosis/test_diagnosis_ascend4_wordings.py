"""Fourth pass of #32 on Ascend causes: the SoC-unsupported meaning as other components word it (built lines in
tests/fixtures/upstream_lines/sig9-ascend4.yaml), and library-missing's plain 'No module named' only where an inference
stack imports the module (any script's missing dependency is that script's install)."""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis.engine import diagnose


def _top(tmp_path: Path, text: str) -> str:
    node = tmp_path / "logs" / "n0"
    node.mkdir(parents=True)
    (node / "engine.log").write_text(text)
    d = diagnose(tmp_path / "logs")
    return d.top.cause.id if d.top else ""


# Python's import error in a user's own script (paths and module made up): no serving stack in sight
SCRIPT = ('Traceback (most recent call last):\n  File "/home/u/bot/chat.py", line 3, in <module>\n'
          "    import tokenizer_kit\nModuleNotFoundError: No module named 'tokenizer_kit'\n")


def test_a_scripts_missing_module_is_not_library_missing(tmp_path):
    assert _top(tmp_path, SCRIPT) != "library-missing"


@pytest.mark.parametrize("frame", [
    '  File "/usr/local/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", line 19, in main\n',
    '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 35, in <module>\n',
    '  File "/usr/local/lib/python3.11/site-packages/vllm_ascend/distributed/mooncake_connector.py", line 9\n',
])
def test_a_module_an_inference_stack_imports_is_library_missing(tmp_path, frame):
    head, tail = SCRIPT.split("    import", 1)
    assert _top(tmp_path, head + frame + "    import" + tail) == "library-missing"


@pytest.mark.parametrize("line", [
    # a chip named in passing on a healthy start-up (vllm-ascend's platform log; values made up)
    "INFO 05-02 10:00:01 [platform.py:120] Current SoC: Ascend910B3, supported ops loaded\n",
    # torch_npu's device name
    "INFO: device name Ascend910_9382 is supported by this build\n",
])
def test_a_chip_named_without_a_refusal_is_no_soc_cause(tmp_path, line):
    assert _top(tmp_path, line) != "npu-soc-unsupported"
