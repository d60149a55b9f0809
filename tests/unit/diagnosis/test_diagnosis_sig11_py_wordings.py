"""The fifth pass's signatures (a cause as a wrapper, another engine or runtime words it; built lines in
tests/fixtures/upstream_lines/sig11-py.yaml) left alone by the lines near them that state another cause or none:
a divisor that is no tensor-parallel size, a free port looked for, pip's resolver notes, a transformers range.
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue

CAT = catalogue.load()

# each built from the statement named beside it (not real log lines), with the cause whose signatures must not match
NEAR = [
    # verl's config check (trainer batch sizes over the data-parallel world): a batch size, not the model's split
    ("tp-heads-indivisible", "ValueError: train_batch_size (6) must be divisible by world size (4)"),
    # LMDeploy pytorch/backends/cuda/token_dispatcher.py: experts over the expert-parallel group (EP, not TP)
    ("tp-heads-indivisible", "AssertionError: num_experts: 160 must be divisible by ep_size: 3"),
    # transformers' attention layers: the model's own shape, whatever the parallel size
    ("tp-heads-indivisible",
     "ValueError: embed_dim must be divisible by num_heads (got `embed_dim`: 1000 and `num_heads`: 16)."),
    # vLLM's INFO while it looks for a free port (it moves on)
    ("port-in-use", "INFO 05-06 10:00:00 [utils.py:512] Port 8000 is already in use, trying port 8001"),
    ("port-in-use", "INFO 05-06 10:00:00 [utils.py:512] Port 8000 is in use, trying port 8001"),
    ("port-in-use", "INFO port 29500 is used for the master's store"),
    # pip's resolver after an install: a mismatched pair (package-version-mismatch's), or a requirement not installed
    ("transformers-too-old",
     "vllm 0.6.3 requires transformers>=4.45.0, but you have transformers 4.44.0 which is incompatible."),
    ("transformers-too-old", "simpletransformers 0.70.0 requires transformers>=4.31.0, which is not installed."),
    # LMDeploy pytorch/check_env/transformers.py with a release outside a range (too new as well as too old)
    ("transformers-too-old",
     "LMDeploy requires transformers>=4.56.0,!=5.0.*,!=5.1.*, but found transformers==5.1.0."),
    # bitsandbytes' loader (vLLM model_loader/bitsandbytes_loader.py): the first sentence alone, a checkpoint's shape
    ("tp-heads-indivisible", "ValueError: The input size is not aligned with the quantized weight shape."),
    # TGI's launcher for a shard the kernel's OOM killer stopped (9: SIGKILL), not SIGBUS
    ("shm-too-small", "ERROR text_generation_launcher: Shard process was signaled to shutdown with signal 9"),
    # vLLM's INFO on the memory it gave the KV cache
    ("kv-cache-insufficient", "INFO 05-06 10:00:00 [gpu_worker.py:276] Available KV cache memory: 21.30 GiB"),
    # Ray's GCS client retrying while the head may still come up (src/ray/rpc/rpc_client.h, its W level)
    ("ray-not-running",
     "[2026-05-06 10:00:00,000 W 6578 6578] rpc_client.h:153: Failed to connect to GCS at address 10.0.0.1:6379 "
     "within 5 seconds."),
    # a dtype the dispatch does take, named in a note
    ("dtype-unsupported", "INFO 05-06 10:00:00 [config.py:100] Downcasting torch.float32 to torch.bfloat16."),
    # huggingface_hub's retry warning quoting the same timeout (http_backoff: "'{err}' thrown while requesting ...")
    ("hf-hub-unreachable",
     "'(ReadTimeoutError(\"HTTPSConnectionPool(host='cdn-lfs-us-1.hf.co', port=443): Read timed out. (read timeout=10)"
     "\"), '(Request ID: 1a2b)')' thrown while requesting GET https://huggingface.co/x"),
    # the Hub answering that a repo is not there (a client error: a wrong name or a gated repo, not an unreachable hub)
    ("hf-hub-unreachable",
     "huggingface_hub.errors.HfHubHTTPError: 404 Client Error: Not Found for url: https://huggingface.co/api/models/x/y"),
    # Ollama's registry reached, the name not there
    ("hf-hub-unreachable", "Error: pull model manifest: file does not exist"),
    # a quantisation config that was found, and a method named in an INFO line (made up)
    ("quantization-config", "INFO 05-06 10:00:00 [modelslim_config.py:880] ModelSlim quantization config found at /m."),
    ("quantization-config", "INFO 05-06 10:00:00 [config.py:900] Using quantization method ascend (w8a8)."),
    # LMDeploy's paged KV blocks (paging/block_manager: MemoryError('No enough free memory blocks.')): device memory
    ("host-oom", "MemoryError: No enough free memory blocks."),
    # gunicorn's INFO of the address it listens on
    ("port-in-use", "[2026-05-06 10:00:00 +0000] [1] [INFO] Listening at: http://0.0.0.0:8000 (1)"),
    # NCCL's INFO when it makes the segment (nothing failed)
    ("shm-too-small", "node0:1:2 [0] NCCL INFO Allocated shared memory /dev/shm/nccl-Ab12Cd (size 9637888)"),
    # a local directory named triton shadowing the package: not a release mismatch
    ("package-version-mismatch", "ImportError: cannot import name 'jit' from 'triton' (unknown location)"),
]


@pytest.mark.parametrize(("cause", "line"), NEAR, ids=range(len(NEAR)))
def test_a_line_near_a_fifth_pass_wording_matches_no_signature_of_its_cause(cause, line):
    assert not any(s.regex.search(line.encode()) for s in CAT.get(cause).signatures), (cause, line)
