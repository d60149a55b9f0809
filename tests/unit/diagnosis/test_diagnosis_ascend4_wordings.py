"""Fourth pass of #32 on Ascend causes: the SoC-unsupported meaning as other components word it (built lines in
tests/fixtures/upstream_lines/sig9-ascend4.yaml), and library-missing's plain 'No module named' only where an inference
stack imports the module (any script's missing dependency is that script's install)."""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import diagnose_text as _diagnose
from tests.unit.diagnosis.onelog import top_cause as _top

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


# HCCL's transport failure (EI0009's wording, values made up): a symptom, whatever came before it
TRANSPORT = ("        Transport init error. Reason: [Create] [DestLink]Create Dest error! createLink para:rank[1]-"
             "localUserrank[1]-localIpAddr[10.0.0.1], dst_rank[2]-remoteUserrank[2]-remote_ip_addr[10.0.0.1]\n")


def test_a_code_stating_a_cause_outside_the_catalogue_is_shown_before_its_symptoms(tmp_path):
    # EI0005 (hcomm docs/en/error_codes/EI0005-Invalid_Argument.md) as the error message manager prints it; made-up
    # values: the arguments differing between ranks is the cause, the transport failing after it follows from it
    log = ("EI0005: 2026-05-02-10:00:01.781.599 The arguments for collective communication are inconsistent between "
           "ranks:tag[HcomAllReduce_1_0], parameter[count], local[16], remote [8]\n" + TRANSPORT)
    d = _diagnose(tmp_path, log)
    assert d.findings == [] and any("EI0005" in e.text for e in d.first_errors)


def test_an_execution_error_code_before_a_symptom_leaves_the_symptom(tmp_path):
    # EI0013 (an error CQE: the network failed or the peer exited) is itself an event, not a cause
    log = ("EI0013: 2026-05-02-10:00:01.781.599 An error CQE occurred during operation. Local rank 1, remote rank 2\n"
           + TRANSPORT)
    assert _top(tmp_path, log) == "hccl-transport-init"


def test_ldd_with_every_library_found_is_no_missing_library(tmp_path):
    # glibc ldd's format for found dependencies (paths made up)
    log = ("\tlibascendcl.so => /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so (0x0000ffff9e000000)\n"
           "\tlibstdc++.so.6 => /lib/aarch64-linux-gnu/libstdc++.so.6 (0x0000ffff9e200000)\n")
    assert _top(tmp_path, log) != "library-missing"
