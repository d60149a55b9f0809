"""Fifth "other components" pass (#32) on the device, collective and graph-capture causes: what the new wordings
must leave alone, and the capture codes of the CANN runtime deciding their cause. The positive wordings are built
lines in tests/fixtures/upstream_lines/sig11-device.yaml (each names its source)."""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis import codes
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text, top_cause

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"

# lines healthy start-ups print near the new wordings, each built from the statement named beside it
HEALTHY = [
    # Ascend/pytorch torch_npu/csrc/core/npu/NPUGraph.cpp capture_begin: TORCH_WARN_ONCE while earlier collectives drain
    "[W502 10:00:01.123456789 NPUGraph.cpp:118] Warning: Waiting for pending NCCL work to finish before starting graph "
    "capture. (function capture_begin)",
    # vllm-omni vllm_omni/engine/stage_runtime.py: logger.debug after the device count check passed
    "DEBUG 05-02 10:00:01 [stage_runtime.py:330] Parallel config: TP=4, PP=1, DP=1, PCP=1, SP=1, CFG=1; will lock 4 "
    "devices: [0, 1, 2, 3]",
    # vLLM's graph capture progress (vllm/v1/worker/gpu_model_runner.py capture_model): an INFO line of a healthy start
    "INFO 05-02 10:00:01 [gpu_model_runner.py:2000] Graph capturing finished in 12 secs, took 0.45 GiB",
    # MindSpore mindspore/run_check/_check_version.py check_version: the warning of every custom CANN install path
    "[WARNING] ME(4021:281473041023008,MainProcess):2026-05-02-10:00:01.640.411 [mindspore/run_check/_check_version.py:348]"
    " Using custom Ascend AI software package (Ascend Data Center Solution) path, package version checking is skipped. "
    "Please make sure Ascend AI software package (Ascend Data Center Solution) version is supported, you can refer to "
    "the installation guidelines https://www.mindspore.cn/install",
]


@pytest.mark.parametrize("line", HEALTHY, ids=range(len(HEALTHY)))
def test_a_healthy_line_near_the_new_wordings_flags_nothing(tmp_path, line):
    assert_clean(diagnose_text(tmp_path, line + "\n"))


def test_hccls_task_stage_timeout_keyword_alone_names_no_timeout(tmp_path):
    # the HCCL fault-diagnosis guide's SDMA ERROR (EI0012) example (triage corpus, heldout10, a stated SDMA page-table
    # fault) carries "[TaskExecStage][Timeout][Host]" on every line: the keyword does not tell a collective timeout
    text = (CORPUS / "heldout10" / "unknown--hccl-docs-task-exec-stage.log").read_text()
    assert top_cause(tmp_path, text) == ""


def test_the_capture_codes_of_the_runtime_name_graph_capture_only():
    named = {code: c.cause for code, c in codes.load().codes.items()}
    capture = [c for c, entry in codes.load().codes.items() if "CAPTURE" in entry.name]
    assert len(capture) >= 9 and all(named[c] == "graph-capture-failed" for c in capture)
    # the task-group and abort codes beside them are no capture failure
    for other in ("107021", "107022", "107023", "107033", "107034", "107035"):
        assert named[other] == "", other


def test_a_capture_code_decides_graph_capture_failed(tmp_path):
    # a BUILT line: torch_npu's NPU_CHECK_ERROR format ("NPU function error: <call>, error code is N") for a call the
    # runtime answers with ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED (hicann/runtime rt_error_codes.h 507903); no wording
    # of the cause on it, so the code alone decides
    d = diagnose_text(tmp_path, "RuntimeError: AclmdlRIExecuteAsync:torch_npu/csrc/core/npu/NPUGraph.cpp:212 NPU "
                                "function error: c10_npu::acl::AclmdlRIExecuteAsync(model_ri_, stream), error code "
                                "is 507903\n")
    assert d.top is not None and d.top.cause.id == "graph-capture-failed" and d.top.by_code


@pytest.mark.parametrize("line", [
    # the same driver calls with other return codes (ascend_hal_error.h: 1 DRV_ERROR_NO_DEVICE, 6 out of memory, 88
    # DRV_ERROR_PERMISSION): not a device held by another process
    "[ERROR] RUNTIME(4021,python3):2026-05-02-10:00:07.262.154 [driver.cc:65]4021 GetDeviceCount:Call drvGetDevNum, "
    "drvRetCode=1.",
    "halGetDeviceInfo get device type version failed , ret:88[FUNC:Init][FILE:config_manager.cpp][LINE:61]",
    "halMemAlloc failed, drvRetCode=6, size=1073741824",
])
def test_another_driver_return_code_is_no_occupied_device(tmp_path, line):
    assert top_cause(tmp_path, line + "\n") != "npu-device-occupied"


@pytest.mark.parametrize("line", [
    # Mooncake transfer_metadata_plugin.cpp: the handshake listener failing for an address the host lacks (PLOG with
    # EADDRNOTAVAIL) is no port clash
    "E0502 10:00:01.123456  4021 transfer_metadata_plugin.cpp:715] SocketHandShakePlugin: bind (port 15428): Cannot "
    "assign requested address [99]",
    # an HTTP client's successful request in a wrapper's log: no curl failure
    "INFO 05-02 10:00:01 [connector.py:10] GET http://10.0.0.9:8080/metadata?key=mooncake 200 OK",
])
def test_a_mooncake_line_near_the_new_wordings_names_no_kv_port_or_metadata_cause(tmp_path, line):
    assert top_cause(tmp_path, line + "\n") not in ("mooncake-kv-port-in-use", "mooncake-metadata-server")
