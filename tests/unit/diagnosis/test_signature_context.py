"""A signature's `context`: a wording shared by several causes (an MTE address out of range: any faulty kernel) names
the cause only beside the context that makes it that cause; precision wordings of the third pass (#32): a module CANN's
op compiler imports is not a library missing from the image, the HCCL op-retry's foreign ack, the driver's dmesg when
another container holds the device. Lines that must match are in tests/fixtures/upstream_lines/ascend-stack.yaml."""
from __future__ import annotations

import pytest

from k3lab.diagnosis.catalogue import Signature
from tests.unit.diagnosis.onelog import top_cause as _top

# CANN runtime device_error_proc.cc's extend info (errorStr as it prints it; values made up)
MTE = ("        The extend info: errcode:(95) errorStr: The DDR address of the MTE instruction is out of range. "
       "subErrType: 0x4.[FUNC:ProcessStarsCoreErrorInfo][FILE:device_error_proc.cc][LINE:583]\n")


def test_a_context_is_a_regular_expression_and_may_be_empty():
    assert Signature(pattern="MTE instruction", context=r"\[rank\d+\]:").context_regex is not None
    assert Signature(pattern="MTE instruction").context_regex is None
    with pytest.raises(ValueError):
        Signature(pattern="MTE instruction", context="(")


def test_an_mte_error_alone_is_no_buffer_cause(tmp_path):
    # a single kernel's validation run (aclrtSynchronizeStream's failure in its own main.cpp), no HCCL anywhere
    log = "[ERROR] aclrtSynchronizeStream(stream) failed: 507015 (main.cpp:108)\n" + MTE
    assert _top(tmp_path, log) != "hccl-buffsize-too-small"


@pytest.mark.parametrize("context", [
    # torch_npu's op name in the traceback (vllm-ascend's MC2 dispatch)
    "RuntimeError: npu_moe_distribute_dispatch_v2:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:161 NPU function "
    "error: call aclnnMoeDistributeDispatchV3 failed, error code is 507015\n",
    # a distributed run's rank prefix (torch.distributed's "[rank0]:")
    "[rank0]: RuntimeError: The Inner error is reported as above.\n",
    # an HCCL plog line
    "[ERROR] HCCL(4021,python):2026-05-02-10:00:01.123.456 [task_exception_handler.cc:120][4030] Task run failed\n",
])
def test_an_mte_error_beside_hccl_or_moe_context_is_the_buffer(tmp_path, context):
    assert _top(tmp_path, context + MTE) == "hccl-buffsize-too-small"


def test_a_python_module_cann_imports_is_not_library_missing(tmp_path):
    # CANN's EC0010 (as the error message manager prints it; values made up): its op compiler's own Python dependency
    log = ("EC0010: 2026-05-02-10:00:01.425.686 Failed to import Python module [ModuleNotFoundError: No module named "
           "'decorator'.].\n")
    assert _top(tmp_path, log) != "library-missing"


def test_hccl_op_retry_hint_alone_is_no_port_cause(tmp_path):
    # hcomm op_retry_connection.cc prints its reasons after any failed connect: a hint, not the failure's statement
    log = ("[ERROR] HCCL(4021,python):2026-05-02-10:00:01.123.456 [op_retry_connection.cc:290][4030]1. The port may "
           "have been used so we will bind error. OpRetry used port range [60000-60015]\n")
    assert _top(tmp_path, log) != "hccl-port-in-use"


@pytest.mark.parametrize("line", [
    # other programs' "used by other docker" wordings (a port allocator, an installer's echo)
    "Check if ports are used by other Docker containers",
    "Some docker images will be kept in case they are used by other docker stacks",
])
def test_other_used_by_other_docker_wordings_are_not_device_occupied(tmp_path, line):
    assert _top(tmp_path, line + "\n") != "npu-device-occupied"


def test_a_request_past_any_device_is_no_npu_oom(tmp_path):
    # torch_npu's caching allocator formats a size of an exabyte or more as "more than 1EB" (values made up): a size
    # from corrupted lengths, not HBM that ran out; a real request still is npu-oom
    absurd = "RuntimeError: NPU out of memory. Tried to allocate more than 1EB memory.\n"
    real = ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total capacity; 58.10 GiB "
            "already allocated; 58.10 GiB current active; 1.02 GiB free)\n")
    assert _top(tmp_path / "a", absurd) != "npu-oom"
    assert _top(tmp_path / "b", real) == "npu-oom"


def test_torch_npu_own_compiled_module_is_not_library_missing(tmp_path):
    # python started inside torch_npu's source tree, or a broken wheel (the import system's wording)
    assert _top(tmp_path, "ModuleNotFoundError: No module named 'torch_npu._C'\n") != "library-missing"


@pytest.mark.parametrize("line", [
    # vLLM config _get_and_verify_dtype: logger.info("Downcasting %s to %s.", config_dtype, torch_dtype), built
    "INFO 05-02 10:00:01 [config.py:1200] Downcasting torch.float32 to torch.bfloat16.",
    # a flag's help text on a healthy start
    "  --bf16        use bfloat16 where the device supports it",
])
def test_healthy_bf16_mentions_are_not_dtype_unsupported(tmp_path, line):
    assert _top(tmp_path, line + "\n") != "dtype-unsupported"
