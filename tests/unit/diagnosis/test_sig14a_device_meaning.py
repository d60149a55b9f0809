"""Pass 8 of #32, device side: the meaning groups that name a device-side cause in another component's words.

Each group is tested on a real line (an excerpt of the triage corpus; tests/fixtures/triage_corpus/corpus.yaml names
the thread), on a wording of another component BUILT from its source (labelled, never called real), on a healthy
line that stays clean, and on a line that holds one group only and so names nothing. Signatures of the same pass are
tested on built lines in tests/fixtures/upstream_lines/sig14a.yaml.
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

CAT = catalogue.load()


def _means(cause_id: str, line: str) -> bool:
    return CAT.get(cause_id).means(line)


def _likely(tmp_path, text: str) -> list[str]:
    d = diagnose_text(tmp_path, text)
    return [f.cause.id for f in d.findings] + [f.cause.id for f in d.likely]


NAMES = [
    # driver-cann-mismatch: an Ascend-stack library with an undefined symbol
    ("driver-cann-mismatch",  # real, dev dlinfer-183
     "`OSError: /home/dlinfer/dlinfer/vendor/ascend/ascend_extension.so: undefined symbol: "
     "_ZN7c10_npu3acl20AclrtPeekAtLastErrorE17aclrtLastErrLevel`"),
    ("driver-cann-mismatch",  # built: glibc dlerror's "%s: undefined symbol: %s" for MindIE's ATB speed library
     "OSError: /usr/local/Ascend/atb-models/lib/libatb_speed.so: undefined symbol: _ZN3atb9Operation4NameEv"),
    # mooncake-connect-failure: a KV transfer that failed, any connector's words
    ("mooncake-connect-failure",  # real, heldout vllm-ascend-7846 (its "Failed to transfer KV cache" line)
     "ERROR 03-31 02:49:30 [mooncake_connector.py:441] Failed to transfer KV cache for request chatcmpl-ba31-8b8e:"
     " Mooncake transfer failed, ret: -1"),
    ("mooncake-connect-failure",  # built from NIXL's raise in SGLang's nixl backend: RuntimeError("NIXL direct KV transfer failed")
     "RuntimeError: NIXL direct KV transfer failed"),
    ("mooncake-connect-failure",  # real, heldout3 mooncake-919 (client.cpp, OCR of a screenshot: "Transferfailed")
     "E20251012 09:10:11.485489 140180342169600 c1ient.cpp:526] Transferfailed for key: 600000 replica: with"
     " error:TRANSFER_FAIL"),
    ("mooncake-connect-failure",  # built: the transfer engine's connect failure worded with "unable"
     "E0101 00:00:00.000001 1 ascend_direct_transport.cpp:581] unable to connect to segment: 10.0.0.2:16584"),
    # npu-oom: CANN's allocation failures and a serving framework's remedy
    ("npu-oom",  # real, heldout4 helios-62
     "[PID: 210907] 2026-04-09-21:56:40.384.694 Memory_Allocation_Failure(EL0004): Failed to allocate memory"
     " requested by GE module."),
    ("npu-oom",  # real, heldout6 hiascend-cann800-troubleshooting-0050
     "[ERROR] RUNTIME(4176881,python3.7):2024-06-29-16:19:28.521.933 [api_c.cc:4738]4176881 rtMallocPhysical:"
     "[INIT][DEFAULT]ErrCode=207001, desc=[driver error:out of memory], InnerCode=0x7020016"),
    ("npu-oom",  # real, dev gpustack-3541 (MindIE)
     "[llm] [ERROR] [logging.py-348] : Warmup failed, because of multimodal model inference out of memory when"
     " `maxInputTokenLen` set to 8192. Please try to decrease `maxPrefillTokens` in config."),
    ("npu-oom",  # built from SGLang's advice on an OOM (its server_args help: lower --mem-fraction-static)
     "RuntimeError: Prefill out of memory. Try to lower --mem-fraction-static or mem_fraction_static."),
    ("npu-oom",  # real, dev mindact-1761 (MindSpore mem_dynamic_allocator.cc)
     "AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 29356337664 plus TotalUsedByEventMemStatistics : 0"
     " and plus alloc size : 301990400 is more than total mem size : 29464985600."),
    # shm-too-small: a bus error in a worker, torch's shm files, NCCL's shm transport returning a system error
    ("shm-too-small", "Fatal python error:Bus error"),  # real, dev vllm-1771
    ("shm-too-small",  # real, heldout8 pipedream-76 (UCX's signal handler)
     "[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)"),
    ("shm-too-small",  # built from torch's DataLoader: "DataLoader worker (pid(s) {pids}) exited unexpectedly" after SIGBUS
     "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."),
    ("shm-too-small", "RuntimeError: unable to write to file </torch_1509_1969058146>"),  # real, heldout11 kubeflow-2522
    ("shm-too-small",  # real, heldout11 kserve-3791
     "hugging-model-1-predictor:1:1 [0] NCCL INFO transport/shm.cc:114 -> 2"),
    # hccl-port-in-use: HCCL's listen failure in its own words
    ("hccl-port-in-use",  # real, heldout vllm-ascend-4725
     "[ERROR] HCCL(60570,):2025-12-04-14:46:07.911.312 [hccl_socket.cc:106] [60570][HcclSocket][Listen] socket"
     " type[0], listen on ip[192.2.2.195] and specific port[16666] fail. Please check the port status and whether the"
     " port is being used by other process."),
    # hccl-buffsize-too-small: the MoE ops' window check, named by their tiling file
    ("hccl-buffsize-too-small",  # real, heldout7 vllm-ascend-16835
     "Tiling check actual window size failed.[FUNC:CheckWinSize][FILE:moe_distribute_combine_v2_tiling.cpp][LINE:165]"),
    # npu-heartbeat-lost: the task scheduler's heartbeat
    ("npu-heartbeat-lost", "[Error]: The task scheduler loses the heartbeat."),  # real, dev vllm-ascend-8186
    # dtype-unsupported: an aclnn operator's "not support"
    ("dtype-unsupported",  # real, heldout12 paddle-70866
     "[aclnn_matmul.cpp:103][NNOP][CheckDtypeValid][360969] errno[161002] OpName:[aclnnMatmul_1] Self dtype DT_FLOAT"
     " or mat2 dtype DT_FLOAT not support under keep type mode."),
    # graph-capture-failed: the capture call's error code
    ("graph-capture-failed",  # real, heldout6 vllm-ascend-5650
     "capture_begin:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:178 NPU function error:"
     " c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207000"),
    # library-missing: a Python module an inference stack imports
    ("library-missing",  # real, heldout5 gpustack-1779 (MindIE's [llm] log)
     "[llm] [ERROR] [model_deploy_config.cpp:159] Failed to get vocab size from tokenizer wrapper with exception:"
     " ModuleNotFoundError: No module named 'torchvision'"),
]


@pytest.mark.parametrize(("cause", "line"), NAMES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(NAMES)])
def test_a_line_stating_the_cause_in_other_words_means_it(cause, line):
    assert _means(cause, line)


@pytest.mark.parametrize(("cause", "line"), [
    # one group only: a symbol that resolved elsewhere, a transfer that worked, memory words without an allocation
    ("driver-cann-mismatch", "/usr/local/lib/python3.10/site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
    ("driver-cann-mismatch", "INFO loaded /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"),
    # vLLM's CUDA ops failing to import on an Ascend start (real, as the corpus holds it, venv renamed "ascend")
    ("driver-cann-mismatch", "WARNING 09-08 07:48:19 [_custom_ops.py:22] Failed to import from vllm._C with ImportError("
     "'/envs/ascend/lib/python3.10/site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c108ListType3getE')"),
    ("mooncake-connect-failure", "I0101 transfer_engine.cpp:10] KV cache transfer of 42 blocks completed"),
    ("mooncake-connect-failure", "ERROR failed to create shared memory segment /dev/shm/mooncake_seg (open segment)"),
    # a batch's or a segment descriptor's status alone stays unnamed (labelled unknown in the corpus)
    ("mooncake-connect-failure", "E0722 transfer_task.cpp:141] Transfer failed for batch 281456655998048 task 1 with status 6"),
    ("mooncake-connect-failure", "E0522 transfer_metadata.cpp:150] Failed to register segment descriptor, name 156:2345"),
    ("npu-oom", "RuntimeError: CUDA out of memory. Try lowering gpu_memory_utilization"),
    ("npu-oom", "INFO mem_fraction_static=0.88 max_num_seqs=256"),
    ("npu-oom", "Failed to allocate memory for the tokenizer cache"),  # no device named
    ("shm-too-small", "Segmentation fault in worker 3"),
    ("shm-too-small", "NCCL INFO transport/p2p.cc:114 -> 2"),  # another transport's trace
    ("shm-too-small", "RuntimeError: unable to write to file </tmp/out.txt>"),
    ("hccl-port-in-use", "the port is being used by other process"),  # no HCCL named
    ("hccl-buffsize-too-small", "INFO moe_distribute_combine_v2_tiling.cpp: window size 200MB"),
    ("npu-heartbeat-lost", "INFO the task scheduler sends a heartbeat"),
    ("dtype-unsupported", "INFO dtype DT_FLOAT16 selected for aclnnMatmul"),
    ("graph-capture-failed", "INFO capture_begin: graph 3 of 67 captured"),
    ("library-missing", "ModuleNotFoundError: No module named 'tiktoken'"),  # no inference stack
    ("library-missing", "EC0010: Failed to import Python module [ModuleNotFoundError: No module named 'sympy' in ascend."),
    ("library-missing", "ModuleNotFoundError: No module named 'vllm.model_executor.models.foo'"),  # a release without it
])
def test_one_group_or_an_excluded_wording_means_nothing(cause, line):
    assert not _means(cause, line)


@pytest.mark.parametrize("line", [
    "INFO 01-01 00:00:00 [mooncake_connector.py:10] KV transfer for request cmpl-1 finished in 12 ms",
    "I0101 00:00:00.000001 1 transfer_engine.cpp:10] Mooncake transfer engine started, segment 10.0.0.2:16584",
    "[INFO] RUNTIME(42,python):2026-01-01-00:00:00.000.001 [npu_driver.cc:1] rtMallocPhysical succeeded, size=20971520",
    "INFO NCCL INFO transport/shm.cc:114 Using shared memory transport",
    "INFO 01-01 00:00:00 worker.py:1] Loaded /usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libatb.so",
])
def test_healthy_lines_stay_clean(tmp_path, line):
    assert_clean(diagnose_text(tmp_path, line + "\n"))


def test_a_built_nixl_failure_is_named_by_meaning_on_a_log(tmp_path):
    # built (NIXL's raise above) in a vLLM worker's error frame: no signature holds it, the meaning names it
    text = ("ERROR 01-01 00:00:00 [core.py:1] EngineCore encountered an issue.\n"
            "ERROR 01-01 00:00:00 [core.py:1] RuntimeError: NIXL direct KV transfer failed\n")
    assert _likely(tmp_path, text)[:1] == ["mooncake-connect-failure"]
