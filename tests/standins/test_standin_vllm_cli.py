"""``vllm serve`` stand-in: the guides' command lines, FlexibleArgumentParser spelling, argparse
errors and the start-up validation that ends the process before serving."""
from __future__ import annotations

import json
import shlex

import pytest
from k3sim.vllm import cli, config, kvconfig  # noqa: E402  (site path set by tests.standins._vllm)

from tests.standins import _standin
from tests.standins._vllm import VLLM, env, free_port, model_dir

MC_PD = json.dumps({"prefill": {"dp_size": 8, "tp_size": 16}, "decode": {"dp_size": 8, "tp_size": 16}})
V2_PD = json.dumps({"prefill": {"dp_size": 1, "tp_size": 4, "pp_size": 4, "pcp_size": 4, "dcp_size": 1},
                    "decode": {"dp_size": 4, "tp_size": 16, "pp_size": 1, "pcp_size": 1, "dcp_size": 16}})

# Seed 000 §5.1.1 node 0 (mixed DP4/TP16) and §5.1.2.2 Prefill template (MultiConnector + pool).
K3_MIXED_NODE0 = """serve MODEL --served-model-name kimi-k3 --port 8000 --allowed-local-media-path / --trust-remote-code
 --tensor-parallel-size 16 --data-parallel-size 4 --data-parallel-size-local 1 --data-parallel-address 10.0.0.1
 --data-parallel-rpc-port 13345 --enable-prefix-caching --enable-expert-parallel --max-num-seqs 16
 --max-model-len 131072 --max-num-batched-tokens 24576 --gpu-memory-utilization 0.9
 --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' --mm-processor-cache-gb 0
 --additional-config '{"enable_cpu_binding":true, "enable_flashcomm1":true}' --mm-encoder-tp-mode data
 --limit-mm-per-prompt '{"vision_chunk": 2}' --enable-auto-tool-choice --reasoning-parser kimi_k3
 --tool-call-parser kimi_k3"""
K3_PD_PREFILL = """serve MODEL --host 0.0.0.0 --port 9000 --data-parallel-size 8 --data-parallel-rank 0
 --data-parallel-address 10.0.0.1 --data-parallel-rpc-port 12321 --tensor-parallel-size 16 --enable-expert-parallel
 --seed 1024 --served-model-name kimi-k3 --max-model-len 133120 --max-num-batched-tokens 8192 --max-num-seqs 16
 --enforce-eager --trust-remote-code --gpu-memory-utilization 0.9 --mm-encoder-tp-mode data --skip-mm-profiling
 --safetensors_load_strategy prefetch --mamba-cache-mode align --enable-prefix-caching
 --additional-config '{"recompute_scheduler_enable":false}' --limit-mm-per-prompt '{"vision_chunk": 2}'
 --kv-transfer-config '{"kv_connector": "MultiConnector", "kv_role": "kv_producer", "kv_connector_extra_config":
 {"connectors": [{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": "36000",
 "kv_connector_extra_config": MCPD}, {"kv_connector": "AscendStoreConnector", "kv_role": "kv_producer",
 "kv_connector_extra_config": {"backend": "memcache", "lookup_rpc_port": "0"}}]}}'""".replace("MCPD", MC_PD)
# Seed 002 §5.1.1 A3 Prefill node 1 (PP4/PCP4/TP4, headless) and 950DT Decode (DCP8 + DSpark3).
K31_A3_PREFILL = """serve /root/.cache/Kimi-K3.1-Pro-w4a8 --host 0.0.0.0 --port 8000 --quantization ascend
 --enable-auto-tool-choice --reasoning-parser kimi_k3 --tool-call-parser kimi_k3 --tokenizer-mode kimi_k3
 --data-parallel-size 1 --pipeline-parallel-size 4 --prefill-context-parallel-size 4
 --decode-context-parallel-size 1 --nnodes 4 --node-rank 1 --headless --distributed-executor-backend mp
 --data-parallel-backend mp --master-addr 10.0.0.1 --master-port 29600 --tensor-parallel-size 4
 --enable-expert-parallel --seed 1024 --served-model-name kimi-k3.1-pro --max-model-len 204800
 --max-num-batched-tokens 8192 --max-num-seqs 12 --enforce-eager --trust-remote-code --gpu-memory-utilization 0.90
 --block-size 768 --kv-cache-dtype int8 --attention_config.indexer_kv_dtype int8 --mm-encoder-tp-mode data
 --mm-processor-cache-gb 1 --skip-mm-profiling --enable-prefix-caching
 --additional-config '{"enable_flashcomm1":false,"multistream_overlap_shared_expert":false,
 "enable_fused_mc2":0,"enable_shared_expert_dp":false}'
 --limit-mm-per-prompt '{"vision_chunk":2}'
 --kv-transfer-config '{"kv_connector": "MooncakeConnectorV2", "kv_role": "kv_producer", "kv_port": "30000",
 "kv_connector_extra_config": V2PD}'""".replace("V2PD", V2_PD)
A5_DECODE = """serve /root/.cache/Kimi-K3.1-Pro-w4a8-mxfp --host 0.0.0.0 --port 9000 --data-parallel-size 4
 --data-parallel-rank 2 --data-parallel-address 10.0.0.5 --data-parallel-rpc-port 12777 --tensor-parallel-size 8
 --decode-context-parallel-size 8 --block-size 1536 --cp-kv-cache-interleave-size 1536
 --served-model-name kimi-k3.1-pro --allowed-local-media-path / --trust-remote-code
 --model-loader-extra-config '{"enable_multithread_load":true,"num_threads":128}' --enable-expert-parallel
 --max-num-seqs 64 --max-model-len 140000 --max-num-batched-tokens 768 --gpu-memory-utilization 0.92
 --enable-prefix-caching --kv-cache-dtype fp8 --quantization ascend --attention_config.indexer_kv_dtype fp8
 --tokenizer-mode kimi_k3 --mm-processor-cache-gb 0 --mm-encoder-tp-mode data
 --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}'
 --additional-config '{"enable_mlapo":true,"multistream_overlap_shared_expert":true,
 "scheduler_config":{"recompute_scheduler_enable":true}}'
 --profiler-config '{"profiler":"torch","torch_profiler_dir":"/tmp/prof","torch_profiler_with_stack":false}'
 --kv-transfer-config '{"kv_connector": "MooncakeConnectorV2", "kv_role": "kv_consumer", "kv_port": "30200",
 "engine_id": "d2", "kv_connector_extra_config": {"prefill": {"pp_size": 4, "pcp_size": 8, "dp_size": 1,
 "tp_size": 1}, "decode": {"dp_size": 4, "tp_size": 8}}}'
 --speculative-config '{"method":"dspark","model":"DRAFT","num_speculative_tokens":3,
 "draft_tensor_parallel_size":8,"draft_sample_method":"greedy","enforce_eager":false,"kv_cache_dtype":"auto"}'"""

procs = _standin.procs  # the shared fixture: started processes are killed after each test


@pytest.mark.parametrize("line", [K3_MIXED_NODE0, K3_PD_PREFILL, K31_A3_PREFILL, A5_DECODE],
                         ids=["k3-mixed-node0", "k3-pd-prefill", "k31-a3-prefill-node1", "k31-a5-decode"])
def test_guide_command_lines_pass_parsing_and_config(line, tmp_path, monkeypatch):
    model = model_dir(tmp_path)
    draft = model_dir(tmp_path, "draft")
    argv = shlex.split(line.replace("MODEL", str(model)).replace("DRAFT", str(draft)))
    argv = [str(model) if a.startswith("/root/.cache/") else a for a in argv]
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "25,25,24,19")
    args = cli.parse(argv)
    cfg = config.resolve(args)
    config.pp_partition(cfg)
    assert cfg.max_model_len == args.max_model_len
    if cfg.kv:
        built = kvconfig.build(cfg.kv, cfg.dp, cfg.local_ranks[0])
        if built.mooncake:
            kvconfig.check_mooncake_extra(built.mooncake)


def test_flexible_spelling_underscores_and_dotted_args():
    args = cli.parse(["serve", "/m", "--attention_config.indexer_kv_dtype", "int8", "--max_model_len=4k",
                      "--safetensors_load_strategy", "prefetch", "--kv-transfer-config.kv_role", "kv_both",
                      "--kv-transfer-config.kv_connector", "MooncakeConnectorV1", "-O3"])
    assert args.attention_config == {"indexer_kv_dtype": "int8"}
    assert args.max_model_len == 4000
    assert args.safetensors_load_strategy == "prefetch"
    assert args.kv_transfer_config["kv_role"] == "kv_both"
    assert args.optimization_level == 3


def _run(tmp_path, argv, **extra):
    import subprocess
    e = env(tmp_path, **extra)
    return subprocess.run(VLLM + argv, env=e, capture_output=True, text=True, timeout=10)


def test_unknown_option_is_argparse_error(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--not-a-flag", "1"])
    assert r.returncode == 2
    assert "vllm: error: unrecognized arguments: --not-a-flag 1" in r.stderr
    nested = _run(tmp_path, ["serve", "/m", "--attention-config.indexer-kv-dtype", "int8"])
    assert nested.returncode == 2 and "Unexpected keyword argument" in nested.stderr


def test_bad_json_and_bad_kv_config_are_argparse_errors(tmp_path):
    r = _run(tmp_path, ["serve", "/m", "--additional-config", "{bad"])
    assert r.returncode == 2
    assert ("vllm serve: error: argument --additional-config: Value {bad cannot be converted to <function loads"
            in r.stderr)
    r = _run(tmp_path, ["serve", "/m", "--kv-transfer-config", '{"kv_connector":"MooncakeConnectorV1","kv_role":"x"}'])
    assert r.returncode == 2
    assert "1 validation error for KVTransferConfig" in r.stderr
    assert "Input should be 'kv_producer', 'kv_consumer' or 'kv_both'" in r.stderr
    r = _run(tmp_path, ["serve", "/m", "--kv-transfer-config", '{"kv_connector":"MooncakeConnectorV1"}'])
    assert r.returncode == 2 and "Please specify kv_role when kv_connector is set" in r.stderr
    r = _run(tmp_path, ["serve", "/m", "--kv-transfer-config", '{"kv_connector":"X","kv_role":"kv_both","kv_rank":0}'])
    assert r.returncode == 2 and "Unexpected keyword argument" in r.stderr


@pytest.mark.parametrize("argv,extra,text", [
    (["--tensor-parallel-size", "3"], {},
     "ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3)."),
    (["--pipeline-parallel-size", "4", "--nnodes", "4", "--tensor-parallel-size", "4",
      "--prefill-context-parallel-size", "4", "--master-port", str(free_port())],
     {"VLLM_PP_LAYER_PARTITION": "25,25,24,18"},
     "ValueError: sum(partitions)=92 does not match num_hidden_layers=93."),
    (["--tensor-parallel-size", "16", "--speculative-config", '{"method":"dspark","draft_tensor_parallel_size":4}'],
     {}, "speculative_draft_tensor_parallel_size=4 cannot be other value than target model tensor_parallel_size (16)"),
    (["--tensor-parallel-size", "16"], {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
     "please set tensor_parallel_size (16) to less than max local gpu count (8)"),
    (["--tensor-parallel-size", "8"], {"HCCL_IF_IP": "10.255.255.1"}, "HCCL_IF_IP=10.255.255.1 is not an address"),
    (["--tensor-parallel-size", "8"], {"GLOO_SOCKET_IFNAME": "nosuchnic0"}, "Unable to find address for: nosuchnic0"),
    (["--kv-transfer-config", '{"kv_connector":"NoSuchConnector","kv_role":"kv_both"}'], {},
     "ValueError: Unsupported connector type: NoSuchConnector"),
    (["--kv-transfer-config", json.dumps({"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer",
                                          "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 4},
                                                                        "decode": {"dp_size": 1, "tp_size": 8}}})],
     {}, "prefill_tp_size: 4 must be greater than or equal to the decode_tp_size: 8"),
    (["--additional-config", '{"scheduler_config":{"recompute_scheduler_enable":true}}'], {},
     "recompute_scheduler_enable is only supported on PD-disaggregated D nodes"),
    (["--max-model-len", "2000000"], {}, "User-specified max_model_len (2000000) is greater than the derived"),
    (["--enable-auto-tool-choice"], {}, "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"),
])
def test_startup_validation_fails_with_real_text(tmp_path, argv, extra, text):
    model = model_dir(tmp_path)
    r = _run(tmp_path, ["serve", str(model), "--port", str(free_port()), *argv], **extra)
    assert r.returncode == 1, r.stdout + r.stderr
    assert text in r.stdout + r.stderr


def test_missing_model_dir(tmp_path):
    r = _run(tmp_path, ["serve", str(tmp_path / "absent"), "--port", str(free_port())])
    assert r.returncode == 1
    assert f"Invalid repository ID or local directory specified: '{tmp_path / 'absent'}'" in r.stderr


def test_unhealthy_visible_device_fails_start(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(free_port()), "-tp", "16"],
             faults={"devices": {"3": {"health": "Alarm"}}})
    assert r.returncode == 1
    assert "EngineCore failed to start." in r.stdout
    # torch_npu's real wording for a device the runtime cannot start (vllm-ascend #1558, PTOAS #523)
    assert "NPU function error: c10_npu::SetDevice(device_id_), error code is 507033" in r.stderr
    assert "open device 3 failed, runtime result = 507033." in r.stderr
    assert "RuntimeError: Engine core initialization failed. See root cause above." in r.stderr


def test_api_port_refuses_while_loading(tmp_path, procs):
    from tests.standins._standin import port_open
    from tests.standins._vllm import wait_ready
    port = free_port()
    p = procs(VLLM + ["serve", str(model_dir(tmp_path)), "--port", str(port)], env(tmp_path, K3SIM_LOAD_SECONDS="1.0"))
    p.wait_output("Starting to load model", timeout=5)
    assert not port_open(port)  # bound, not listening: connection refused, no HTTP status
    wait_ready(p, port)
    p.wait_output("Application startup complete.", stream="err")
    assert "Starting vLLM API server 0 on http://0.0.0.0:%d" % port in p.out


def test_api_port_held_by_another_program_fails_at_bind(tmp_path):
    import socket
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(port)])
    assert r.returncode == 1 and "OSError: [Errno 98] Address already in use" in r.stderr
