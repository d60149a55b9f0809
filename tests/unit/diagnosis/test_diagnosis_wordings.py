"""The Ascend stack's wordings of a cause across versions (#32 item 3): each signature widened from the upstream
source is tested on a line built from that source's raise/log statement, never called a real log line.

BUILT lines stand in for a real excerpt in test_diagnosis.test_every_signature_matches_a_real_excerpt: each one
names the statement it was built from (file and, where the wording changed, the release or commit that brought it).
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import codes
from k3lab.diagnosis.engine import diagnose

# (cause, line, source): the format string of the statement named, its placeholders filled with plausible values
BUILT: list[tuple[str, str, str]] = [
    ("npu-oom", "EE9999: rtMalloc execute failed, reason=[driver error:out of memory]"
                "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:50]",
     "CANN runtime FuncErrorReason (error_message_manage.cc): 'reason=[driver error:<driver reason>]'"),
    ("hccl-buffsize-too-small", "EZ9999: HCCL_BUFFSIZE is too SMALL, m = 4096, k = 7168, topK = 8 expected HCCL_BUFFSIZE "
                                "is ((m * k * topK * sizeof(int8_t)) * 3 + 3MB)= 675MB, HCCL_BUFFSIZE=200MB.",
     "vllm-ascend csrc/mc2/dispatch_ffn_combine/op_host/dispatch_ffn_combine_tiling.cpp OP_LOGE (PR 6130)"),
    ("npu-network-port-down", "[ERROR] HCCL(3001,python):2026-01-05-10:00:00.000.001 [adapter_hccp.cc:1010] [3001]"
                              "[InitGroup][Resource]rdma init failed because RoCE link status is down, please check the "
                              "network adapter configuration.",
     "hicann/hcomm adapter_hccp.cc HrtRaRdmaInitWithAttr: HCCL_ERROR on HCCP_ELINKDOWN"),
    ("hccl-transport-init", "EI0009: Device 3 transport init error. Reason: [Create][DestLink]Create Dest error!",
     "hicann/hcomm docs/en/error_codes/EI0009: 'Device %s transport init error. Reason: %s.'"),
    ("hccl-port-in-use", "The IP address 192.1.3.198 add port 16666 have already been bound.",
     "hicann/hcomm docs/en/error_codes/EI0020's error example, as the document spells it"),
    ("driver-cann-mismatch", "RuntimeError: Failed to find function aclrtStreamQuery, Please upgrade CANN version.",
     "torch_npu csrc/core/npu/interface/AclInterface.cpp TORCH_CHECK(func, 'Failed to find function ', ...)"),
    ("driver-cann-mismatch", "Warning : CANN package version 8.0.RC1 and PyTorch version 2.1.0.post3 do not match. "
                             "Please check the README of the Ascend PyTorch repo.",
     "torch_npu utils/npu_intercept.py print (since 39776f153, 2023; registry_manager.py 'Warning: ' from 2026)"),
    ("driver-cann-mismatch", "EI0008: The ops (cann-hccl) versions are inconsistent. The local version is 9.2.0 (version "
                             "file: /usr/local/Ascend/cann-9.2.0/share/info/hccl/version.info), while the remote "
                             "version is 9.1.0.",
     "hicann/hcomm docs/en/error_codes/EI0008: 'The %s versions are inconsistent. The local %s, while the remote %s.'"),
    ("no-visible-npu", "RuntimeError: No NPUs are available",
     "torch_npu csrc/core/npu/NPUFunctions.cpp TORCH_CHECK(count, 'No NPUs are available') (since 2d7913166, 2024)"),
    ("no-visible-npu", "[ERROR] PYTORCH(4242,python):2026-01-05-10:00:00.000.001 [NPUFunctions.cpp:160]4242 get device "
                       "count of NPU failed",
     "torch_npu csrc/core/npu/NPUFunctions.cpp ASCEND_LOGE('get device count of NPU failed')"),
    ("aicore-timeout", "EZ9999: Kernel task happen error, retCode=0x25, [aicore timeout].[FUNC:PreCheckTaskErr]"
                       "[FILE:davinci_kernel_task.cc][LINE:1493]",
     "CANN runtime davinci_kernel_task.cc PreCheckTaskErr, retCode 0x25 (507014's task error)"),
    ("npu-soc-unsupported", "RuntimeError: Unsupported soc version: Ascend910 9382",
     "torch_npu csrc/core/npu/NpuVariables.cpp AT_ERROR('Unsupported soc version: ', ...) (since 27c2d44b4, 2022)"),
    ("npu-soc-unsupported", "RuntimeError: Undefined soc_version: Ascend910_9599. Please file an issue to vllm-ascend.",
     "vllm-ascend vllm_ascend/device/hardware.py raise RuntimeError (since 829c1a182f, 2026)"),
    ("npu-soc-unsupported", "ValueError: Unsupported soc_version: AscendSocVersion.UNDEFINED",
     "vllm-ascend vllm_ascend/ascend_forward_context.py raise ValueError (since d3c93fba5c, 2025)"),
    ("hccl-exec-timeout", "An timeout occurs when the Notify register waits for execution. Waiting peer rank: 4; task "
                          "information: streamID:[90], taskID[686], taskType[Notify Wait]; communicator: none.",
     "hicann/hcomm docs/en/error_codes/EI0002: 'An timeout occurs when the Notify register waits for execution. ...'"),
    ("hccl-port-in-use", "EI0019: Failed to enable listening for the host network adapter socket. Reason: The IP "
                         "address 10.0.0.1 and port 60000 have already been bound.",
     "hicann/hcomm's HCCL error-message registry (hcomm_g_msg) EI0019"),
    ("npu-oom", "EI0011: Failed to allocate 2147483648 bytes of NPU memory.",
     "hicann/hcomm's HCCL error-message registry (hcomm_g_msg) EI0011"),
    ("hccl-link-timeout", "EI0015: Failed to collect cluster information of the communicator based on rootInfo "
                          "detection. Reason: topo detect timeout.",
     "hicann/hcomm's HCCL error-message registry (hcomm_g_msg) EI0015"),
    # these two verbatim, as test_diagnosis_codes quotes them (not a corpus excerpt, so listed here for the signature test)
    ("npu-device-occupied", "dcmi model initialized failed, because the device is used. ret is -8020",
     "Ascend/RecSDK's container guide (the driver's -8020)"),
    ("npu-device-occupied", "EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe "
                            "the last training process is running.",
     "hiyouga/LlamaFactory#3839 (HCCP's EJ0001)"),
    ("memcache-config-invalid", "(EngineCore_DP0 pid=1) ERROR 01-05 10:00:00 [memcache_backend.py:90] Configuration "
                                "loading failed. error=invalid ock.mmc.local_service.world_size. Check memcache config "
                                "and environment.",
     "vllm-ascend kv_pool/ascend_store/backend/memcache_backend.py logger.error (': %s' from 5447a039b9, 2025)"),
    ("memcache-local-config-missing", "ValueError: The environment variable 'MMC_LOCAL_CONFIG_PATH' is not set.",
     "vllm-ascend kv_pool/ascend_store/backend/memcache_backend.py raise ValueError (3d077f975b, 2026)"),
    ("library-missing", "RuntimeError: mooncake is not available",
     "vllm-ascend distributed/mooncake_connector.py raise RuntimeError when TransferEngine is None (03ca2b26ca, 2025)"),
    ("hccn-conf-missing", "E0105 10:00:00.000000  4242 hccl_transport.cpp:330] can't open conf 文件：/etc/hccn.conf",
     "Mooncake transfer-engine ascend_transport/hccl_transport/hccl_transport.cpp LOG(ERROR)"),
    ("mooncake-store-master", "E0105 10:00:00.000000  4242 client.cpp:201] Failed to connect to master",
     "Mooncake mooncake-store/src/client.cpp LOG(ERROR) (2025; client_service.cpp from 5509e6403, 2026)"),
    ("visible-devices", "ValueError: ASCEND_RT_VISIBLE_DEVICES should be in format {device_id},{device_id},...,{device_id}",
     "MindIE ATB models atb_llm/utils/env.py raise ValueError"),
    ("dtype-unsupported", "AclNN_Parameter_Error(EZ1001): Tensor self not implemented for DT_BFLOAT16, should be in dtype "
                          "support list [DT_FLOAT,DT_FLOAT16,DT_INT32].",
     "CANN opbase OP_CHECK_DTYPE_NOT_SUPPORT: 'Tensor %s not implemented for %s, should be in dtype support list %s.'"),
    ("graph-capture-failed", "RuntimeError: ACL graph capture failed with a known stream-resource exhaustion signature. "
                             "Consider reducing cudagraph_capture_sizes, lowering max_cudagraph_capture_size, preferring "
                             "FULL or FULL_DECODE_ONLY for mostly uniform decode workloads, or temporarily disabling graph "
                             "mode to confirm the failure is capture-related.",
     "vllm-ascend vllm_ascend/compilation/acl_graph.py raise RuntimeError"),
    ("graph-capture-failed", "Exception: Capture npu graph failed: RuntimeError: The current NPU stream is not currently "
                             "capturing.",
     "SGLang's graph runner 'Capture cuda graph failed: ' with torch_npu NPUGraph.cpp's TORCH_CHECK message"),
    ("package-version-mismatch", "AttributeError: '_OpNamespace' 'npu' object has no attribute 'npu_moe_gating_top_k'",
     "torch torch/_ops.py _OpNamespace.__getattr__ raise AttributeError"),
    ("package-version-mismatch", "AttributeError: _ARRAY_API not found",
     "numpy's generated __multiarray_api.h: PyErr_SetString(PyExc_AttributeError, '_ARRAY_API not found')"),
    ("package-version-mismatch", "ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 "
                                 "from C header, got 88 from PyObject",
     "Cython's type-size check of numpy.dtype in a module built against numpy 1"),
]


def _diagnose(tmp_path, *lines: str):
    (tmp_path / "n0").mkdir()
    (tmp_path / "n0" / "engine.log").write_text("\n".join(lines) + "\n")
    return diagnose(tmp_path)


@pytest.mark.parametrize("cause, line, source", BUILT, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(BUILT)])
def test_a_built_line_names_its_cause(tmp_path, cause, line, source):
    d = _diagnose(tmp_path, line, "Segmentation fault (core dumped)")  # a failure follows: a warning is a cause then
    assert d.top is not None and d.top.cause.id == cause, (source, [f.cause.id for f in d.findings])
    assert not d.top.by_code  # the wording itself, not only a code on the line


def test_the_port_down_reason_of_ei0009_outranks_the_transport_symptom(tmp_path):
    # hicann/hcomm docs/en/error_codes/EI0009's error example: the reason is the root cause
    d = _diagnose(tmp_path, "EI0009: Device 0 transport init error. Reason: The network port is down.")
    assert [f.cause.id for f in d.findings] == ["npu-network-port-down", "hccl-transport-init"]


def test_the_graph_capture_api_missing_stays_graph_capture(tmp_path):
    # built from torch_npu AclInterface.cpp's TORCH_CHECK for aclmdlRICaptureBegin
    d = _diagnose(tmp_path, "RuntimeError: Failed to find function aclmdlRICaptureBegin")
    assert d.top.cause.id == "graph-capture-failed" and [f.cause.id for f in d.findings] == ["graph-capture-failed"]


@pytest.mark.parametrize("line", [
    # torch_npu npu_intercept.py's pairing warning (old "Warning : " spelling): healthy start-ups print it too
    "Warning : CANN package version 8.0.RC1 and PyTorch version 2.1.0.post3 do not match. Please check the README of "
    "the Ascend PyTorch repo.",
    # the notify_dispatch tiling's OP_LOGW (sgl-kernel-npu): a warning only, the kernel still runs
    "[WARNING] OP(1234,python):2026-01-05-10:00:00.000.001 [notify_dispatch_tiling.cc:300] HCCL_BUFFSIZE is too small, "
    "min required HCCL_BUFFSIZE ((moeExpertNum + epWorldSize / 4) * maxBs * (h * 2 + 16 * ((k + 7) / 8 * 8)) / 1MB + "
    "6MB) = 300MB, actual HCCL_BUFFSIZE = 200MB",
])
def test_a_warning_alone_fails_nothing(tmp_path, line):
    d = _diagnose(tmp_path, line, "INFO 01-05 10:00:01 [api_server.py:1000] Starting vLLM API server 0 on http://0.0.0.0:8000")
    assert d.findings == [] and not d.failed


@pytest.mark.parametrize("line", [
    "export HCCL_BUFFSIZE=1024",
    "INFO 01-05 10:00:00 [platform.py:100] soc_version: Ascend910B3, device count: 8",
    "HCCL(1,python):2026-01-05-10:00:00.000.001 [transport_manager.cc:200] transport init success, rank[0]",
    "INFO 01-05 10:00:00 [worker.py:200] Available memory: 52.3 GiB, no out of memory risk at 0.9",
    "torch_npu version: 2.5.1, CANN version: 8.1.RC1",
])
def test_healthy_lines_near_the_widened_wordings_match_nothing(tmp_path, line):
    # built to sit next to the widened wordings: settings, versions, a successful transport, a memory report
    d = _diagnose(tmp_path, line)
    assert d.findings == []


@pytest.mark.parametrize("code, name, cause", [
    ("100000", "ACL_ERROR_INVALID_PARAM", ""),
    ("148049", "ACL_ERROR_INVALID_OPP_PATH", ""),
    ("507046", "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", ""),
    ("EI0008", "Package_Error_Incorrect_HCCL_Version", "driver-cann-mismatch"),
    ("EI0011", "Resource_Error_Insufficient_Device_Memory", "npu-oom"),
    ("EI0020", "Communication_Error_Bind_IP_Port", "hccl-port-in-use"),
])
def test_documented_codes_added_with_their_names(code, name, cause):
    c = codes.load().codes[code]
    assert (c.name, c.cause) == (name, cause) and c.source.startswith("https://")


def test_an_acl_code_is_decoded_where_torch_npu_prints_it():
    # built from torch_npu's NPU_CHECK_ERROR wording ("... failed, error code is %d")
    assert [k for k, _ in codes.decode("RuntimeError: call aclnnFoo failed, error code is 148049")] == ["148049"]


def test_a_documented_symptom_seen_first_outranks_the_dead_engine_after_it(tmp_path):
    # built from vLLM's EngineCore start-up failure after HCCL's EI0002 (the code alone, its message cut): the code's
    # symptom came first, the dead engine follows from it
    d = _diagnose(tmp_path,
                  "(EngineCore_DP0 pid=1) ERROR 01-05 10:00:00 [core.py:700] RuntimeError: EI0002: [PID: 1] "
                  "2026-01-05-10:00:00.000.000",
                  "ERROR 01-05 10:00:05 [core.py:710] RuntimeError: Engine core initialization failed. See root cause above.")
    assert [f.cause.id for f in d.findings] == ["hccl-exec-timeout", "engine-died"] and d.top.by_code


@pytest.mark.parametrize("line, want", [
    # vllm-ascend#1972's dev excerpt: torch_npu's stream synchronize prints the code after a colon
    ("ERROR 07-23 10:35:57 [core.py:586] RuntimeError: Worker failed with error 'ACL stream synchronize failed, error "
     "code:507034', please check the stack trace above for the root cause", ["507034"]),
    # built from torch_npu's OpCommand wording for an aclnn call ("NPU function error: call aclnnX failed, error code is N")
    ("RuntimeError: npu_moe_distribute_dispatch_v2: NPU function error: call aclnnMoeDistributeDispatchV3 failed, error "
     "code is 561002", ["561002"]),
])
def test_runtime_and_aclnn_codes_are_decoded(line, want):
    assert [k for k, _ in codes.decode(line)] == want
