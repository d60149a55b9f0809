"""The third pass's wordings of vLLM-stack causes (built lines in tests/fixtures/upstream_lines/sig8-vllm3.yaml:
kv-cache-insufficient with no budget left, dtype-unsupported in xformers', flash-attn's and vLLM's quantisation words,
hf-hub-unreachable in snapshot_download's, OfflineModeIsEnabled's and the Hub's file hosts', ray-not-running in Ray 1.x's
and Ray Client's, package-version-mismatch in torchvision's, numpy's and huggingface_hub's) left alone by the healthy
start-up lines of the same statements and by near wordings that state no failure.
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean
from tests.unit.diagnosis.onelog import diagnose_text as _diagnose

CAT = catalogue.load()

# each built from the statement named beside it (not real log lines): a start-up that has memory for the cache
HEALTHY = [
    # vllm-ascend worker_v1 determine_available_memory: logger.info(f"Available memory: {...}, total memory: {...}")
    "(EngineCore_DP0 pid=811) INFO 03-02 09:12:40 [worker_v1.py:262] Available memory: 21474836480, total memory: "
    "65452113920",
    # vllm/v1/worker/gpu_worker.py: logger.info("Available KV cache memory: %.2f GiB", ...)
    "(EngineCore_DP0 pid=4120) INFO 03-02 09:12:40 [gpu_worker.py:298] Available KV cache memory: 0.52 GiB",
    "(EngineCore_DP0 pid=4120) INFO 03-02 09:12:40 [gpu_worker.py:298] Available KV cache memory: 51.96 GiB",
]


@pytest.mark.parametrize("line", HEALTHY, ids=range(len(HEALTHY)))
def test_a_start_up_with_memory_for_the_cache_names_no_cause(tmp_path, line):
    assert_clean(_diagnose(tmp_path, line + "\n"))


@pytest.mark.parametrize(("cid", "line"), [
    # a budget that starts with 0 but is not nothing
    ("kv-cache-insufficient", b"Available memory: 0.75 GiB"),
    ("kv-cache-insufficient", b"Available KV cache memory: 0.05 GiB"),
    # another tool's pool, not the engine's KV budget
    ("kv-cache-insufficient", b"INFO swap: Available memory: 0 MB"),
    # a dtype named as supported, not as missing
    ("dtype-unsupported", b"INFO bf16 is supported on this device, using torch.bfloat16"),
    ("dtype-unsupported", b"FlashAttention supports fp16 and bf16 data types"),
    # a local directory named like the package shadowing it, not another release of it
    ("package-version-mismatch", b"ImportError: cannot import name 'snapshot_download' from 'huggingface_hub' "
                                 b"(unknown location)"),
    # a host whose name only ends like the Hub's
    ("hf-hub-unreachable", b"requests.exceptions.ConnectionError: HTTPSConnectionPool(host='nothuggingface.com', port=443)"),
    # another program's Redis client, not Ray's wait for its head
    ("ray-not-running", b"Error: Unable to connect to Redis at localhost:6379"),
    # offline mode named as a setting, and the retry warning huggingface_hub logs before it may still succeed
    ("hf-hub-unreachable", b"INFO offline mode is enabled (HF_HUB_OFFLINE=1), loading from the local cache"),
    ("hf-hub-unreachable", b"'(MaxRetryError(\"HTTPSConnectionPool(host='www.modelscope.cn', port=443): Max retries\"))' "
                           b"thrown while requesting GET https://www.modelscope.cn/api/v1/models/Qwen/Qwen3-8B"),
])
def test_words_near_the_new_wordings_match_no_signature_of_their_cause(cid, line):
    assert not any(s.regex.search(line) for s in CAT.get(cid).signatures), (cid, line)
