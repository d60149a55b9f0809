"""Pass 8 of #32 (s14b): the meaning layer's reach for software causes, each cause's own signatures and codes taken
out (tests/unit/diagnosis/test_meaning_reach._without), so only a meaning can name it.

Real lines are excerpts of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names the thread); BUILT lines
format an upstream statement with made-up values, their source beside them; never called real.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely

CAT = catalogue.load()


def _cause(cause_id: str) -> catalogue.Cause:
    return next(c for c in CAT.causes if c.id == cause_id)


# real excerpts, read whole: the line that states the cause and the frames above it
REAL = [
    ("tp-heads-indivisible", "dev/tp-heads-indivisible--vllm-440.log"),  # AssertionError: 250682 is not divisible by 8
    ("tp-heads-indivisible", "dev/tp-heads-indivisible--vllm-596.log"),  # ...per node is not divisible by ... tensor parallelism
    ("tp-heads-indivisible", "heldout9/tp-heads-indivisible--colossalai-3043.log"),  # ColossalAI's divide()
    ("tp-heads-indivisible", "heldout10/tp-heads-indivisible--vllm-recipes-qwen3-coder-480b.log"),  # fp8 output_size
    ("port-in-use", "heldout12/port-in-use--llama-cookbook-186.log"),  # [E socket.cpp] ... failed to listen
    ("port-in-use", "heldout8/port-in-use--lmdeploy-1366.log"),
    ("port-in-use", "heldout11/port-in-use--pipelinerl-27.log"),  # RuntimeError: The server socket has failed to listen
    ("model-files-missing", "heldout/model-files-missing--aibrix-834.log"),  # does not appear to have a file named x.py
    ("model-files-missing", "dev/model-files-missing--chinese-llama-2-7b-43.log"),  # Can't load the configuration of
    ("model-files-missing", "dev/model-files-missing--omniparser-130.log"),  # config file ... is not a valid JSON file
    ("model-files-missing", "dev/model-files-missing--vllm-13150.log"),  # No supported config format found in
    ("quantization-config", "dev/quantization-config--vllm-13612.log"),  # Cannot find the config file for gptq
    ("trust-remote-code", "heldout7/trust-remote-code--langchain-chatchat-3533.log"),  # resolve_trust_remote_code EOFError
    ("host-oom", "heldout7/host-oom--vllm-1160.log"),  # (raylet) ... the out of memory issue
    ("ray-placement-unsatisfiable", "heldout12/ray-placement-unsatisfiable--nemo-rl-89.log"),  # Not enough GPUs available
    ("hf-hub-unreachable", "heldout11/hf-hub-unreachable--comfyui-5695.log"),  # urllib3 create_connection, errno 101
    ("hf-hub-unreachable", "heldout7/hf-hub-unreachable--deepspeed-mii-427.log"),
    ("package-version-mismatch", "heldout11/package-version-mismatch--nanosam-7.log"),  # Numpy is not available
]


@pytest.mark.parametrize("cause, name", REAL, ids=[f"{c}:{n.split('/')[1][:40]}" for c, n in REAL])
def test_a_real_excerpt_is_named_by_its_meaning_alone(tmp_path, cause, name):
    assert _likely(tmp_path, cause, (CORPUS / name).read_text().rstrip("\n"))[0] == cause


# another component's wording of the same cause, BUILT from its statement (made-up values)
BUILT = [
    ("tp-heads-indivisible", "ValueError: Weight output_partition_size = 576 is not divisible by weight quantization "
                             "block_n = 128.",
     "vLLM/SGLang fp8 validate_block_quant_shapes: f'Weight output_partition_size = {n} is not divisible by weight "
     "quantization block_n = {block_n}.' (confirmed in upstream source)"),
    ("tp-heads-indivisible", 'File "/usr/lib/python3.10/site-packages/megatron/core/utils.py", line 31, in divide\n'
                             "    ensure_divisibility(numerator, denominator)\n"
                             "AssertionError: 5120 is not divisible by 3",
     "Megatron-style ensure_divisibility: assert numerator % denominator == 0, '{} is not divisible by {}' (confirmed "
     "in upstream copies of the helper)"),
    ("port-in-use", "ERROR 2026-01-01 00:00:00 server.py:42] Server failed to bind port 8000 on 0.0.0.0",
     "a generic server's own words for a bind failure (built; no errno on the line)"),
    ("model-files-missing", "OSError: Can't load tokenizer for '/models/qwen'. If you were trying to load it from "
                            "'https://huggingface.co/models', make sure you don't have a local directory with the same "
                            "name.",
     "transformers tokenization_utils_base.from_pretrained: raise EnvironmentError(f\"Can't load tokenizer for "
     "'{name}'. If you were trying to load it from 'https://huggingface.co/models', ...\") (confirmed)"),
    ("quantization-config", "ValueError: GPTQ checkpoint /models/qwen-gptq: cannot find quantize_config.json",
     "a GPTQ loader's raise ValueError(f'GPTQ checkpoint {ckpt_path}: cannot find quantize_config.json nor ...') "
     "(confirmed in public source; the line cut before 'nor')"),
    ("trust-remote-code", 'File "/opt/conda/lib/python3.11/site-packages/transformers/dynamic_module_utils.py", line '
                          "764, in resolve_trust_remote_code\n    answer = input(\nEOFError: EOF when reading a line",
     "transformers dynamic_module_utils.resolve_trust_remote_code: answer = input(... 'Do you wish to run the custom "
     "code? [y/N] ') (confirmed), stdin closed"),
    ("ray-placement-unsatisfiable", "ValueError: Total available GPUs 8 is less than total desired GPUs 16",
     "verl ray_trainer ResourcePoolManager._check_resource_available (confirmed)"),
    ("kv-cache-insufficient", "llama_init_from_model: failed to initialize the context: failed to allocate buffer for "
                              "kv cache",
     "llama.cpp llama-kv-cache.cpp: throw std::runtime_error('failed to allocate buffer for kv cache') (confirmed)"),
    ("kv-cache-insufficient", "RuntimeError: No enough gpu memory for kv cache.",
     "LMDeploy pytorch executor _get_num_gpu_blocks: raise RuntimeError('No enough gpu memory for kv cache.') "
     "(confirmed)"),
    ("dist-init-timeout", "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
                          "clients joined.",
     "torch TCPStore server's wait for its workers (confirmed in public threads quoting torch)"),
    ("dist-init-timeout", "RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for "
                          "key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
     "torch distributed_c10d._store_based_barrier (confirmed)"),
    ("host-oom", "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: you "
                 "tried to allocate 1073741824 bytes.",
     "torch c10/core/impl/alloc_cpu.cpp: 'DefaultCPUAllocator: not enough memory: you tried to allocate %d bytes.' "
     "(confirmed)"),
    ("host-oom", "ERROR: container vllm terminated, Reason: OOMKilled, Exit Code: 137",
     "Kubernetes container state (kubectl describe: 'Reason: OOMKilled', 'Exit Code: 137'), on one line (built)"),
    ("model-arch-unsupported", "llama_model_load: error loading model: error loading model architecture: unknown model "
                               "architecture: 'qwen3'",
     "llama.cpp llama-model loader: \"unknown model architecture: '%s'\" (confirmed in public threads, Ollama too)"),
    ("cli-argument-unknown", "error: unexpected argument '--tp' found",
     "Rust clap 4's parse error: \"error: unexpected argument '--foo' found\" (confirmed)"),
    ("max-model-len-too-large", "ValueError: User-specified context_length (200000) is greater than the derived "
                                "context_length (131072).",
     "SGLang model_config.py: f'User-specified context_length ({n}) is greater than the derived context_length "
     "({m}). ...' (confirmed)"),
    ("hf-hub-unreachable", "urllib3.exceptions.NewConnectionError: <urllib3.connection.HTTPSConnection object at "
                           "0x7f4769a3cc40>: Failed to establish a new connection: [Errno 101] Network is unreachable",
     "urllib3 connection.py _new_conn: NewConnectionError(self, f'Failed to establish a new connection: {e}') "
     "(confirmed in public threads)"),
    ("package-version-mismatch", "UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered internally "
                                 "at ../torch/csrc/utils/tensor_numpy.cpp:84.)\nImportError: numpy.core.multiarray "
                                 "failed to import",
     "torch tensor_numpy.cpp's warning under NumPy 2 (confirmed in public threads), then an extension built for "
     "NumPy 1.x failing its import_array()"),
    ("model-files-missing", 'Error: model "qwen3:8b" not found, try pulling it first',
     "Ollama server/routes.go: fmt.Sprintf(\"model %q not found, try pulling it first\", name) (confirmed)"),
    ("ray-not-running", "2026-01-01 00:00:00,000 ERROR gcs_utils.py:213 -- Failed to connect to GCS. Please check "
                        "`gcs_server.out` for more details.",
     "Ray gcs_utils.py: logger.error('Failed to connect to GCS. Please check `gcs_server.out` for more details.') "
     "(confirmed)"),
    ("model-files-missing", "FileNotFoundError: No safetensors found in /models/qwen",
     "mlx-lm mlx_lm/utils.py load_model ('No safetensors found in {model_path}'), as sig13.yaml has it"),
]


@pytest.mark.parametrize("cause, text, source", BUILT, ids=[f"{b[0]}:{i}" for i, b in enumerate(BUILT)])
def test_another_components_wording_is_named_by_meaning(tmp_path, cause, text, source):
    assert len(source) > 20 and _likely(tmp_path, cause, text)[0] == cause


HEALTHY = [  # the concepts on INFO lines healthy start-ups print: the layer never reads them
    "INFO 05-02 10:00:01 [parallel_state.py:1000] hidden size 4096 is divisible by tp 8, heads per rank 4",
    "[I socket.cpp:100] [c10d] The server socket has started to listen on [::]:29500.",
    "INFO 05-02 10:00:01 [config.py:100] Loading the configuration of /models/qwen from config.json",
    "INFO 05-02 10:00:01 [gptq.py:10] gptq quantize_config.json found, using the Marlin kernel",
    "(raylet) INFO 05-02 10:00:01 memory monitor: host memory usage 40% of 512 GiB",
    "INFO Requested 16 GPUs; 16 GPUs available in the cluster.",
    "llama_kv_cache: CUDA0 KV buffer size = 1024.00 MiB",
    "INFO 05-02 10:00:01 [store.py:10] 2/2 clients joined after 3 seconds waiting for clients",
    "INFO model architecture: qwen3 (known)",
    "[2026-01-01 00:00:00] context_length=131072, derived context_length=131072",
]


def test_healthy_lines_with_the_concepts_stay_clean(tmp_path):
    for i, line in enumerate(HEALTHY):
        assert_clean(diagnose_text(tmp_path / str(i), line + "\n"))


# one group of a new alternative alone, or another errno on the line: the meaning names nothing
ONE_GROUP = [
    ("tp-heads-indivisible", "ValueError: 7 is not divisible by 2"),  # no parallel word, no assertion
    ("tp-heads-indivisible", "AssertionError: global batch size (30) is not divisible by micro batch size (4)"),
    ("port-in-use", "ERROR failed to listen"),  # no port, address or socket
    ("port-in-use", "[E socket.cpp:462] [c10d] The server socket has failed to bind to 10.0.0.9:29500 (errno: 99 - "
                    "Cannot assign requested address)."),  # an address not on the host: not a port taken
    ("model-files-missing", "ERROR can't load plugin 'foo'"),
    ("quantization-config", "ERROR gptq kernel launch failed"),
    ("trust-remote-code", "EOFError: EOF when reading a line"),  # no prompt or frame of transformers' question
    ("ray-placement-unsatisfiable", "ValueError: Not enough GPUs available on this host"),  # no cluster
    ("kv-cache-insufficient", "ERROR failed to allocate buffer for activations"),
    # real, heldout2 vllm-52907 (an unknown-labelled deadlock): a store wait that timed out is no count of ranks joined
    ("dist-init-timeout", "torch.distributed.DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//2//cpu//0/2"),
    # real, heldout6 hiascend-cann800-troubleshooting-0050: the driver's out of memory is the device's, not the host's
    ("host-oom", "[ERROR] RUNTIME(4176881,python3.7):2024-06-29-16:19:28.521.947 [error_message_manage.cc:53]4176881 "
                 "FuncErrorReason:[INIT][DEFAULT]rtMallocPhysical execute failed, reason=[driver error:out of memory]"),
    ("host-oom", "ERROR container vllm terminated, Reason: Error, Exit Code: 1"),
    # Python's TypeError for a keyword its callee lacks: two releases' code, not a command line (real, heldout9
    # bentovllm-38)
    ("cli-argument-unknown", "TypeError: OpenAIServingCompletion.__init__() got an unexpected keyword argument "
                             "'served_model'"),
    ("model-arch-unsupported", "ERROR unknown model type in /models/x"),
    ("max-model-len-too-large", "ERROR context_length must be set"),
    ("model-files-missing", "ERROR no model files to upload, skipping"),
    # real, heldout7 vllm-2857 and ray-351 (unknown-labelled): a bare socket with no route, no HTTP client
    ("hf-hub-unreachable", "OSError: [Errno 101] Network is unreachable"),
    ("hf-hub-unreachable", "ERROR requests.exceptions.ReadTimeout: HTTPConnectionPool(host='localhost', port=8000)"),
    # a proxy's httpx client that cannot resolve an engine's service name (built; httpx.ConnectError's gaierror text)
    ("hf-hub-unreachable", "httpx.ConnectError: [Errno -3] Temporary failure in name resolution"),
    ("package-version-mismatch", "ERROR GPU is not available"),
    ("model-files-missing", "ERROR model server not found"),  # no pull hint: a host, not a model's files
    ("ray-not-running", "ERROR gcs_server.out rotated"),
]


@pytest.mark.parametrize("cause, line", ONE_GROUP, ids=[f"{c}:{i}" for i, (c, _) in enumerate(ONE_GROUP)])
def test_one_group_alone_names_nothing(cause, line):
    assert not _cause(cause).means(line)


def test_the_fixture_names_real_excerpts_that_exist():
    assert all((CORPUS / n).exists() for _, n in REAL) and Path(CORPUS / "corpus.yaml").exists()


# asyncio's create_server wording (uvicorn, aiohttp: real, heldout4 vllm-8791) is an HTTP server's: port-in-use's
# general bind signature leaves it to api-port-in-use, whose signature or meaning names it
ASYNCIO = "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"


def test_asyncios_bind_failure_is_the_api_port_by_signature_and_by_meaning(tmp_path):
    port = _cause("port-in-use")
    assert not any(s.regex.search(ASYNCIO.encode()) for s in port.signatures)
    assert _likely(tmp_path / "lco", "api-port-in-use", ASYNCIO)[0] == "api-port-in-use"
    assert diagnose_text(tmp_path / "full", ASYNCIO + "\n").top.cause.id == "api-port-in-use"
    # another component's bind failure with strerror after it stays port-in-use's (built from MindIE's endpoint
    # statement the signature's comment quotes)
    assert any(s.regex.search(b"[endpoint] Socket bind failed, bind_result is -1. Address already in use")
               for s in port.signatures)
