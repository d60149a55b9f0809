"""The Ascend-stack signatures widened from one thread's wording to the meaning (any failed call of the ACL capture
API, the CANN runtime's capture steps, an operator with no kernel for this SoC, hccn_tool or hccn.conf missing, an
undefined symbol in any library under an Ascend root) leave alone what healthy runs and other programs print.
The lines that must match are in tests/fixtures/upstream_lines/ascend-stack.yaml (test_upstream_lines.py)."""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import diagnose_text as _diagnose

# each built from (not quoted from) the statement named beside it
NOT_A_CAUSE = [
    # vllm/v1/worker/gpu_model_runner.py capture_model: logger.info("Graph capturing finished in %.0f secs, took %.2f
    # GiB", ...), also printed by vllm-ascend's NPU model runner
    "INFO 05-02 10:00:01 [model_runner_v1.py:2471] Graph capturing finished in 14 secs, took 0.52 GiB",
    # CANN runtime: RT_LOG(RT_LOG_INFO, "Capture event_id=%d, stream_id=[%d->%d] bounded to model_id=%u.")
    "[INFO] RUNTIME(881,python):2026-05-02-10:00:01.123.456 [capture_model_utils.cc:101]881 GetCaptureStream: "
    "Capture event_id=12, stream_id=[57->58] bounded to model_id=3.",
    # another program's capture stream (a PipeWire screen recorder: error!("PipeWire capture stream failed: {e}"))
    "ERROR stargaze: PipeWire capture stream failed: connection closed",
    # hccl_tools.py on a host with hccn_tool: the command it runs and the answer it parses
    "hccn_tool -i 0 -ip -g",
    "ipaddr:192.168.100.100",
    # MindSpore's CPU kernels out of host memory (DeviceContext CPU branch: "Memory isn't enough and alloc failed, kernel
    # name: " ...): not the device's HBM
    "RuntimeError: Memory isn't enough and alloc failed, kernel name: Default/Concat-op3, alloc size: 4096B.",
    # vLLM's CUDA extension failing to import on every Ascend start (a warning, outside any Ascend root)
    "WARNING 05-02 10:00:01 [_custom_ops.py:21] Failed to import from vllm._C with ImportError('/usr/local/lib/"
    "python3.11/site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi')",
]


@pytest.mark.parametrize("line", NOT_A_CAUSE)
def test_healthy_and_foreign_lines_name_no_ascend_cause(tmp_path, line):
    d = _diagnose(tmp_path, line + "\n")
    assert [f.cause.id for f in d.findings] == []


def test_a_capture_error_code_names_the_capture_not_the_code(tmp_path):
    # built from torch_npu NPUGraph.cpp capture_begin (NPU_CHECK_ERROR) and its ERR00100 trailer: 207005 is a memory
    # code, but the call that failed is the capture, and the engine's hint says to cut the capture sizes
    d = _diagnose(tmp_path, "RuntimeError: capture_begin:torch_npu/csrc/core/npu/NPUGraph.cpp:230 NPU function error: "
                  "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005\n"
                  "[ERROR] 2026-05-02-10:00:01 (PID:881, Device:0, RankID:-1) ERR00100 PTA call acl api failed\n")
    assert d.top is not None and d.top.cause.id == "graph-capture-failed"
