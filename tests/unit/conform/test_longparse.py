"""Long requests (K3.1 §5.2.2) offline: workload limits, vLLM's reply format, npu-smi HBM usage, the gate."""
from __future__ import annotations

import json

import pytest

from k3lab.conform import longparse

MML = 1_048_576

# vLLM's /v1/completions reply (OpenAI schema as vLLM serves it, prompt given as token ids)
REPLY_OK = json.dumps({
    "id": "cmpl-8a4c0f5e3b7d4e2a9c1f6b2d7e8a9b0c", "object": "text_completion", "created": 1764806400,
    "model": "kimi-k3.1-pro",
    "choices": [{"index": 0, "text": " the rack holds sixteen", "logprobs": None, "finish_reason": "length",
                 "stop_reason": None, "prompt_logprobs": None}],
    "service_tier": None, "system_fingerprint": None,
    "usage": {"prompt_tokens": MML - 16, "total_tokens": MML, "completion_tokens": 16, "prompt_tokens_details": None},
    "kv_transfer_params": None})
# vLLM's 400 for a request past --max-model-len (the proxy passes the engine's status and body on)
REPLY_TOO_LONG = json.dumps({"error": {
    "message": "This model's maximum context length is 204800 tokens. However, your request has 1048560 input "
               "tokens. Please reduce the length of the input messages.",
    "type": "BadRequestError", "param": "input_tokens", "code": 400}})

# npu-smi info, A3 (two dies per card, Phy-ID) and A2 (no Phy-ID, "22283/ 32768" without a space)
NPU_SMI_A3 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc3.3               Version: 24.1.rc3.3                                           |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     Ascend910           | OK            | 182.0       36                0    / 0             |
| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3402 / 65536         |
+------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -           37                0    / 0             |
| 1     1                   | 0000:9F:00.0  | 0           0    / 0          61230/ 65536         |
+===========================+===============+====================================================+
"""
NPU_SMI_A2 = """\
| npu-smi 24.1.rc3                 Version: 24.1.rc3                                             |
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
| 0     910B4               | OK            | 85.0        36                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          22283/ 32768         |
"""


def test_default_workload_is_the_longest_the_limit_allows():
    load = longparse.workload(MML)
    assert (load.prompt_tokens, load.output_tokens, load.concurrency) == (MML - 16, 16, 1)
    assert load.describe() == "1 concurrent request(s) of 1,048,560 prompt + 16 output tokens (limit 1,048,576)"


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt_tokens": MML, "output_tokens": 16}, "exceed the configured limit 1,048,576"),
    ({"output_tokens": 0}, "positive sizes"),
    ({"concurrency": 0}, "positive sizes"),
])
def test_workloads_that_cannot_pass_are_refused_before_sending(kwargs, message):
    with pytest.raises(ValueError, match=message):
        longparse.workload(MML, **kwargs)


def test_prompts_have_exact_lengths_and_differ_per_request():
    a, b = longparse.prompt_ids(5000, 0, 7), longparse.prompt_ids(5000, 1, 7)
    assert len(a) == len(b) == 5000 and a[:2] != b[:2] and all(1000 <= t < 21000 for t in a)
    assert len(longparse.prompt_ids(1, 0, 7)) == 1


def test_a_complete_long_request_passes():
    load = longparse.workload(MML)
    ok = longparse.parse_reply(0, 200, 312.5, REPLY_OK)
    assert (ok.prompt_tokens, ok.completion_tokens, ok.finish_reason, ok.error) == (MML - 16, 16, "length", "")
    assert longparse.failures([ok], load) == []


def test_an_engine_with_a_shorter_limit_fails_with_vllms_message():
    bad = longparse.parse_reply(1, 400, 0.2, REPLY_TOO_LONG)
    [line] = longparse.failures([bad], longparse.workload(MML))
    assert line.startswith("request 1: HTTP 400: This model's maximum context length is 204800 tokens.")


@pytest.mark.parametrize("usage, finish, expected", [
    ({"prompt_tokens": 1000, "completion_tokens": 16}, "length", "the engine counted 1,000 prompt tokens, 1,048,560 were sent"),
    ({"prompt_tokens": MML - 16, "completion_tokens": 20}, "length", "exceed the configured limit"),
    ({"prompt_tokens": MML - 16, "completion_tokens": 0}, "abort", "0 output token(s), finish_reason 'abort'"),
])
def test_wrong_lengths_and_unfinished_requests_fail(usage, finish, expected):
    body = json.dumps({"choices": [{"finish_reason": finish}], "usage": usage})
    [line] = longparse.failures([longparse.parse_reply(0, 200, 1.0, body)], longparse.workload(MML))
    assert expected in line


@pytest.mark.parametrize("status, body, expected", [
    (None, "", "HTTP None: "),
    (502, "<html>Bad Gateway</html>", "not JSON"),
    (200, json.dumps({"choices": [{}]}), "no usage in the reply"),
])
def test_transport_and_malformed_replies_fail(status, body, expected):
    outcome = longparse.parse_reply(0, status, 1.0, body)
    if status is None:
        outcome.error = "no answer: connection reset"
    assert expected in longparse.failures([outcome], longparse.workload(MML))[0]


def test_hbm_usage_from_npu_smi_on_a3_and_a2():
    assert longparse.hbm_usage(NPU_SMI_A3) == [(3402, 65536), (61230, 65536)]
    assert longparse.hbm_usage(NPU_SMI_A2) == [(22283, 32768)]
    assert longparse.hbm_usage("npu-smi: command not found") == []
