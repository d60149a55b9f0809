"""Pass 6 of #32: causes heldout11 missed, by their meaning as other components word it.

Real lines are excerpts of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names the thread); a BUILT line
formats an upstream statement, labelled with its source beside it (signature-built lines: tests/fixtures/upstream_lines/
sig12.yaml).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import diagnose_text, top_cause

CAT = catalogue.load()
CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def _means(cause: str, line: str) -> bool:
    return next(c for c in CAT.causes if c.id == cause).means(line)


# real, heldout11 vllm-9737 (vLLM 0.6.0's run_server binds the API port itself)
OLD_RUN_SERVER = """\
  File "/home/user/.venv/lib/python3.10/site-packages/vllm/entrypoints/openai/api_server.py", line 544, in run_server
    sock.bind(("", args.port))
OSError: [Errno 98] Address already in use
"""


def test_the_api_servers_own_bind_is_the_api_port(tmp_path):
    assert top_cause(tmp_path, OLD_RUN_SERVER) == "api-port-in-use"


def test_a_bind_raised_elsewhere_in_an_api_server_run_stays_port_in_use(tmp_path):
    # the API server's frame calls something else; the bind that failed is torch's / ZMQ's, not the API port's
    # (frames built from vLLM's api_server.py run_server and Python's socket error)
    text = """\
  File "/x/vllm/entrypoints/openai/api_server.py", line 1020, in run_server
    async with build_async_engine_client(args) as engine_client:
  File "/x/vllm/utils.py", line 610, in get_open_zmq_ipc_path
    s.bind(addr)
OSError: [Errno 98] Address already in use
"""
    assert top_cause(tmp_path, text) == "port-in-use"


def test_a_shell_killed_run_that_was_loading_weights_is_host_oom(tmp_path):
    # real, heldout11 langchain-chatchat-35: "Killed" right after the progress bar, nothing else
    line = "Loading checkpoint shards:  38%|██████▊           | 3/8 [00:02<00:03,  1.28it/s]Killed\n"
    assert top_cause(tmp_path, line) == "host-oom"


@pytest.mark.parametrize("name", ["heldout7/unknown--hiascend-forum-02104167047335054008.log",  # MindIE daemon's own exit
                                  "heldout6/port-in-use--hiascend-forum-02117189238761175355.log",
                                  "heldout8/cuda-path-on-npu--vllm-ascend-780.log"])
def test_killed_without_weights_loading_is_not_host_oom(tmp_path, name):
    d = diagnose_text(tmp_path, (CORPUS / name).read_text())
    assert "host-oom" not in [f.cause.id for f in d.findings]


@pytest.mark.parametrize("line", [
    # real, heldout11 vllm-22164 (ModelScope hub/errors.py on a 404, through vLLM's config.py)
    "ERROR 08-03 19:16:47 [config.py:114] Error retrieving file list: The request model: Qwen3-30B-A3B-Thinking-2507"
    " does not exist!, retrying 1 of 2",
    # BUILT: huggingface_hub validators: an invalid model id (already a wording of the group, kept as its neighbour)
    "HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/qwen/'.",
])
def test_a_hub_that_has_no_such_model_means_model_files_missing(line):
    assert _means("model-files-missing", line)


@pytest.mark.parametrize("line", [
    # BUILT: vLLM serving_engine.py _check_model: a client asked for a model name the server does not serve
    "ErrorResponse: The model `gpt-4` does not exist.",
    # real, heldout11 huatuogpt-31 / qwen-1015 (transformers tokenization_auto.py): a class, code not files
    "ValueError: Tokenizer class BaiChuanTokenizer does not exist or is not currently imported.",
])
def test_a_model_name_or_class_unknown_is_not_files_missing(line):
    assert not _means("model-files-missing", line)


@pytest.mark.parametrize("line", [
    # real, heldout11 lm-evaluation-harness-762 (datasets load.py: ConnectionError "Couldn't reach '%s' on the Hub (%s)")
    "ConnectionError: Couldn't reach 'truthful_qa' on the Hub (ProxyError)",
    # BUILT: datasets utils/file_utils.py get_from_cache: raise ConnectionError(f"Couldn't reach {url} ({repr(head_error)})")
    "ConnectionError: Couldn't reach https://huggingface.co/datasets/gsm8k/resolve/main/README.md (ReadTimeout('timed out'))",
])
def test_a_hub_that_cannot_be_reached_means_hf_hub_unreachable(line):
    assert _means("hf-hub-unreachable", line)


@pytest.mark.parametrize("line", [
    # real, heldout11 nanodet-pytorch-4 (torch c10/cuda: "The NVIDIA driver on your system is too old (found version %d)")
    "RuntimeError: The NVIDIA driver on your system is too old (found version 10010).",
    # BUILT: nvidia-smi when the kernel module and the user-space NVML differ
    "Failed to initialize NVML: Driver/library version mismatch",
])
def test_another_vendors_driver_is_no_cann_mismatch(line):
    assert not _means("driver-cann-mismatch", line)


def test_an_ascend_driver_too_old_still_means_the_mismatch():
    # BUILT: the sentence shape of the group (the Ascend driver named, its version too old for the CANN toolkit)
    assert _means("driver-cann-mismatch", "The driver version is too old for CANN 8.0.RC3, please upgrade the driver")


@pytest.mark.parametrize("line", [
    # real, heldout11 nearai-65 (vLLM's Ray executor)
    "ValueError: The number of required GPUs exceeds the total number of available GPUs in the cluster.",
    # BUILT: the same check on a placement group (quoted in a public test suite's notes of a vLLM run)
    "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.",
])
def test_more_devices_than_the_cluster_holds_means_placement_unsatisfiable(line):
    assert _means("ray-placement-unsatisfiable", line)


def test_more_devices_than_visible_without_a_cluster_is_not_placement():
    # BUILT: a single-host check (no cluster or placement group named) says nothing of Ray's placement
    assert not _means("ray-placement-unsatisfiable", "The number of required GPUs (8) exceeds the 4 visible devices.")


@pytest.mark.parametrize("line", [
    # real, heldout11 mergekit-175 (torch's dispatch: the CPU kernel has no float16)
    "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
    # BUILT: torch aten LayerNorm's CPU dispatch of the same macro, AT_DISPATCH's '"%s" not implemented for \\'%s\\''
    "RuntimeError: \"LayerNormKernelImpl\" not implemented for 'Half'",
])
def test_a_kernel_without_the_half_dtype_means_dtype_unsupported(line):
    assert _means("dtype-unsupported", line)


def test_half_as_a_word_is_not_a_dtype():
    assert not _means("dtype-unsupported", "NotImplementedError: the second half of the pipeline is not implemented")


@pytest.mark.parametrize("line", [
    # real, heldout11 mm-eureka-54 (Ray's gcs_rpc_client.h and gcs_client.cc, no head at the address)
    "[2025-07-23 10:05:49,679 W 51000 51000] gcs_rpc_client.h:151: Failed to connect to GCS at address :6379 within 5 seconds.",
    "[2025-07-23 10:06:19,681 W 51000 51000] gcs_client.cc:183: Failed to get cluster ID from GCS server: TimedOut: Timed"
    " out while waiting for GCS to become available.",
])
def test_no_gcs_at_the_address_means_ray_not_running(line):
    assert _means("ray-not-running", line)


def test_google_cloud_storage_is_not_rays_gcs():
    # BUILT: a GCS bucket client's wording (no address, no server): not Ray's head
    assert not _means("ray-not-running", "ERROR: failed to connect to GCS bucket gs://ckpts: 403 Forbidden")


@pytest.mark.parametrize("line", [
    # real, heldout11 flash-attention-784 (flash-attn built against another torch)
    "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined"
    " symbol: _ZN2at4_ops15sum_IntList_out4callERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS5_10ScalarTypeEERS2_",
    # BUILT: torchvision's extension loaded into another torch (the loader's '<lib>.so: undefined symbol: <name>')
    "OSError: /usr/local/lib/python3.10/dist-packages/torchvision/_C.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev",
    # BUILT: vLLM's kernels loaded into another torch
    "ImportError: /opt/venv/lib/python3.10/site-packages/vllm/_C.abi3.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs",
])
def test_an_extension_missing_a_torch_symbol_means_package_version_mismatch(line):
    assert _means("package-version-mismatch", line)


def test_an_unrelated_librarys_undefined_symbol_is_no_package_mismatch():
    # BUILT: the dynamic loader on a system library, no torch-ecosystem package named
    assert not _means("package-version-mismatch", "python: symbol lookup error: /lib/x86_64-linux-gnu/libssl.so.3: undefined symbol: EVP_foo")


@pytest.mark.parametrize("line", [
    # real, heldout11 ai-cloud-validation-643 (UCX uct/sm/mm/base/mm_iface.c under OpenMPI, a 64Mi /dev/shm)
    "mm_iface failed to allocate receive FIFO",
    # BUILT: the same file's next allocation: ucs_error("failed to create a receive descriptor memory pool for the MM transport")
    "[1733500000.123456] [node1:4242:0] mm_iface.c:812 UCX ERROR failed to create a receive descriptor memory pool for the MM transport",
])
def test_ucx_shared_memory_transport_failing_to_allocate_means_shm_too_small(line):
    assert _means("shm-too-small", line)
