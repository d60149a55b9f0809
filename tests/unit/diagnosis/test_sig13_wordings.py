"""Pass 7 of #32: causes heldout12 missed, by their meaning as other components word it.

Real lines are excerpts of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names the thread); BUILT lines
format an upstream statement with their source beside them (more in tests/fixtures/upstream_lines/sig13.yaml).
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text, top_cause

CAT = catalogue.load()


@pytest.mark.parametrize("line", [
    # real, heldout12 llamafactory-6694 (CANN GE's op-info check)
    "[Dynamic shape check]: data type DT_BFLOAT16 of input [x] is not supported. All supported data type and format"
    " of tensor input0.x is: Data Type: {DT_FLOAT16,DT_INT8}Format:{NDC1HWC0,NDC1HWC0}.",
    # real, heldout12 paddle-70866 (aclnn_matmul.cpp CheckDtypeValid)
    "[ERROR] OP(360745,python):2025-01-16-09:40:17.645.275 [aclnn_matmul.cpp:103][NNOP][CheckDtypeValid][360969]"
    " errno[161002] OpName:[aclnnMatmul_1] Self dtype DT_FLOAT or mat2 dtype DT_FLOAT not support under keep type mode.",
])
def test_a_cann_operator_refusing_a_dt_type_is_dtype_unsupported(tmp_path, line):
    assert top_cause(tmp_path, line + "\n") == "dtype-unsupported"


@pytest.mark.parametrize("line", [
    # real, heldout12 nemo-rl-89 (NeMo-RL virtual_cluster.py)
    "ValueError: Not enough GPUs available. Requested 16 GPUs, but only 8 are available in the cluster.",
    # built from NeMo-RL's statement for a cluster of NPUs (virtual_cluster.py's wording, device name changed)
    "ValueError: Not enough NPUs available. Requested 16 NPUs, but only 8 are available in the cluster.",
])
def test_a_framework_counting_too_few_cluster_devices_is_ray_placement(tmp_path, line):
    assert top_cause(tmp_path, line + "\n") == "ray-placement-unsatisfiable"


def test_no_checkpoint_files_raised_as_an_error_is_model_files_missing(tmp_path):
    # real, heldout12 llama-577 (Meta llama's generation.py build)
    text = ('    assert len(checkpoints) > 0, f"no checkpoint files found in {ckpt_dir}"\n'
            "AssertionError: no checkpoint files found in llama-2-7b/\n")
    assert top_cause(tmp_path, text) == "model-files-missing"


@pytest.mark.parametrize("line", [
    # a trainer resuming: no checkpoint is healthy (built, the shape of HF Trainer / Lightning info lines)
    "INFO 01-01 00:00:00 trainer.py:12] No checkpoint found in /ckpt, training from scratch",
    "[INFO] no checkpoint files found in /ckpt/run1, starting a new run",
    # a device count that fits, and dtypes listed as supported
    "INFO Requested 8 GPUs; 8 are available in the cluster.",
    "INFO supported data type DT_BFLOAT16 of input [x] is listed in the op store",
    # a CANN plog INFO line of an engine tried and passed over (built in the plog shape of paddle-70866's lines)
    "[INFO] GE(4242,python):2026-01-01-00:00:00.000.001 [engine_place.cc:1] data type DT_BFLOAT16 of input [x] is not"
    " supported by AIcoreEngine, try AICPU",
])
def test_near_lines_stay_clean(tmp_path, line):
    assert_clean(diagnose_text(tmp_path, line + "\n"))


@pytest.mark.parametrize("line", [
    # real, heldout12 ollama-8597 (llama.cpp's CUDA backend, ggml-cuda.cu)
    "ollama[1418]: ggml_backend_cuda_buffer_type_alloc_buffer: allocating 45108.64 MiB on device 0: cudaMalloc failed:"
    " out of memory",
    # built from llama.cpp's HIP build of the same statement (ggml-cuda.cu with cudaMalloc mapped to hipMalloc)
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: hipMalloc failed: out of memory",
])
def test_a_gpu_out_of_memory_is_not_npu_oom_by_meaning(line):
    cause = next(c for c in CAT.causes if c.id == "npu-oom")
    assert not cause.means(line)
    # the NPU's own words stay read (built from the CANN runtime's rtMalloc reason, without the signature's prefix)
    assert cause.means("device 0: aclrtMalloc failed: out of memory")
