"""Start-up and life of this process's engines and groups; routing for the API front-end."""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any

from k3sim import hw
from k3sim.vllm import VLLM_VERSION, config, hostenv, kvconfig
from k3sim.vllm.config import ServeConfig
from k3sim.vllm.engine import Engine, wait_while_hung
from k3sim.vllm.errors import RequestError
from k3sim.vllm.kv import MooncakeSide, PoolClient
from k3sim.vllm.log import Logger, engine_logger, fatal_exit
from k3sim.vllm.topology import GroupClient, GroupServer, ready_timeout


class Runtime:
    def __init__(self, cfg: ServeConfig, log: Logger) -> None:
        self.cfg = cfg
        self.log = log
        self.engines: dict[int, Engine] = {}
        self.mooncakes: list[MooncakeSide] = []
        self.pools: list[PoolClient] = []
        self.dp_server: GroupServer | None = None
        self.dp_clients: dict[int, GroupClient] = {}
        self.pp_server: GroupServer | None = None
        self.pp_client: GroupClient | None = None
        self.dead = threading.Event()
        self.serving_since: float | None = None
        self.inflight = {r: 0 for r in cfg.managed_ranks}
        self._rr = itertools.count()
        self._lock = threading.Lock()
        self.kv_configured = bool(cfg.kv and cfg.kv.get("kv_connector"))

    # ---- start-up -------------------------------------------------------------------------
    def bind_dp(self) -> None:
        """The DP handshake socket, bound by the rank-0 front-end before engines start (§5.3)."""
        cfg = self.cfg
        if cfg.dp > 1 and 0 in cfg.local_ranks:
            expected = set(range(cfg.dp)) - set(cfg.local_ranks)
            self.dp_server = GroupServer("dp", cfg.dp_address, cfg.dp_rpc_port, expected, set(cfg.local_ranks),
                                         cfg.fingerprint(), self.log, self._lost_dp)
            self.dp_server.bind()

    def start(self) -> None:
        cfg = self.cfg
        t0 = time.time()
        deadline_head = t0 + ready_timeout(600)
        for r in cfg.local_ranks:
            self._log_engine_config(engine_logger(r), r)
        if cfg.dp > 1 and 0 not in cfg.local_ranks:
            self._join_dp()
        if cfg.nnodes > 1:
            self._join_pp()
        elog = engine_logger(cfg.local_ranks[0] if cfg.local_ranks else 0)
        hostenv.visible_devices(cfg.local_world * len(cfg.local_ranks))
        hostenv.check_network()
        hostenv.check_shm()
        config.pp_partition(cfg)
        ip = hostenv.get_ip()
        for r in cfg.local_ranks:
            self._init_engine(r, ip)
        if cfg.local_ranks:  # --data-parallel-size-local 0: an API-only head loads nothing
            self._load(elog)
        for mc in self.mooncakes:
            mc.bind()
        info = {"host": ip, "engine_id": self.mooncakes[0].engine_id if self.mooncakes else None}
        self._first_collective()
        self._pp_loaded(info, deadline_head)
        self._dp_loaded(info, deadline_head)
        self.serving_since = time.time()
        threading.Thread(target=self._monitor, daemon=True).start()

    def _join_dp(self) -> None:
        """A DP node without rank 0: one handshake client per local engine."""
        cfg = self.cfg
        if cfg.headless:
            self.log.info("serve.py:194", "Launching %d data parallel engine(s) in headless mode, with head node "
                          "address %s.", len(cfg.local_ranks), f"tcp://{cfg.dp_address}:{cfg.dp_rpc_port}")
        for r in cfg.local_ranks:
            client = GroupClient("dp", cfg.dp_address, cfg.dp_rpc_port, r, cfg.fingerprint(),
                                 {"host": hostenv.get_ip()}, engine_logger(r))
            client.connect(time.time() + ready_timeout(300))
            self.dp_clients[r] = client

    def _pp_loaded(self, info: dict[str, Any], deadline_head: float) -> None:
        """Node 0 waits for the other PP nodes and hands their Mooncake peers out; the others report in."""
        cfg = self.cfg
        if self.pp_server is not None:
            self.pp_server.wait_loaded(deadline_head, lambda: True)
            nodes = {0: info, **self.pp_server.member_info()}
            peers = {rank * cfg.pp // cfg.nnodes: node for rank, node in nodes.items()}
            for mc in self.mooncakes:
                mc.set_peers(peers)
            self.pp_server.start({})
        elif self.pp_client is not None:
            self.pp_client.loaded(info, time.time() + ready_timeout(600), self.rank_id)
            threading.Thread(target=self._pp_watch, daemon=True).start()
        else:
            for mc in self.mooncakes:
                mc.set_peers({0: info})

    @property
    def rank_id(self) -> int:
        """The HCCL rank of this process's first device (torch_npu prints it as RankID)."""
        cfg = self.cfg
        if cfg.nnodes > 1:
            return cfg.node_rank * cfg.local_world
        return (cfg.local_ranks[0] if cfg.local_ranks else 0) * cfg.tp

    def _first_collective(self) -> None:
        """HCCL sets up its links at the first collective after loading; the members tell the group they are in
        it, so a rank lost there leaves the others waiting for links (they time out after it, as on hardware).
        The ``hccl_link_timeout_s`` fault: this node's links never come up, and it gives up first."""
        for client in [self.pp_client, *self.dp_clients.values()]:
            if client is not None:
                client.linking()
        after = hw.faults("engine").get("hccl_link_timeout_s")
        if after is not None:
            time.sleep(float(after))
            raise hostenv.hccl_link_timeout(self.rank_id)

    def _dp_loaded(self, info: dict[str, Any], deadline_head: float) -> None:
        if self.dp_server is not None:
            self.dp_server.wait_loaded(deadline_head, lambda: True)
            self.dp_server.start({})
            if self.dp_server.kind == "dp":
                self.dp_server.close_listener()  # as real vLLM: the handshake port listens only during start-up
        for r, client in self.dp_clients.items():
            client.loaded(info, time.time() + ready_timeout(300), r * self.cfg.tp)
            threading.Thread(target=self._dp_serve, args=(r, client), daemon=True).start()

    def _join_pp(self) -> None:
        cfg = self.cfg
        if cfg.node_rank == 0:
            self.pp_server = GroupServer("pp", cfg.args.master_addr, cfg.args.master_port,
                                         set(range(1, cfg.nnodes)), {0}, cfg.fingerprint(), self.log, self._lost_pp)
            self.pp_server.bind()
        else:
            self.log.info("serve.py:210", "Launching vLLM multi-node executor in headless mode, node rank %d of %d, "
                          "master %s:%d.", cfg.node_rank, cfg.nnodes, cfg.args.master_addr, cfg.args.master_port)
            self.pp_client = GroupClient("pp", cfg.args.master_addr, cfg.args.master_port, cfg.node_rank,
                                         cfg.fingerprint(), {"host": hostenv.get_ip()}, self.log)
            self.pp_client.connect(time.time() + ready_timeout(600))

    def _log_engine_config(self, elog: Logger, rank: int) -> None:
        cfg, a = self.cfg, self.cfg.args
        spec = "None" if not cfg.speculative else f"SpeculativeConfig(method={cfg.speculative.get('method')!r}, " \
            f"model={cfg.speculative.get('model')!r}, num_spec_tokens={cfg.speculative.get('num_speculative_tokens')})"
        elog.info("core.py:93", "Initializing a V1 LLM engine (v%s) with config: model=%r, speculative_config=%s, "
                  "tokenizer=%r, skip_tokenizer_init=False, tokenizer_mode=%s, revision=None, trust_remote_code=%s, "
                  "dtype=%s, max_seq_len=%d, download_dir=None, load_format=%s, tensor_parallel_size=%d, "
                  "pipeline_parallel_size=%d, data_parallel_size=%d, prefill_context_parallel_size=%d, "
                  "decode_context_parallel_size=%d, disable_custom_all_reduce=False, quantization=%s, "
                  "enforce_eager=%s, kv_cache_dtype=%s, device_config=npu, seed=%d, served_model_name=%s, "
                  "enable_prefix_caching=%s, enable_chunked_prefill=True, block_size=%d",
                  VLLM_VERSION, cfg.model, spec, a.tokenizer or cfg.model, a.tokenizer_mode, a.trust_remote_code,
                  "torch.bfloat16" if a.dtype in ("auto", "bfloat16") else a.dtype, cfg.max_model_len, a.load_format,
                  cfg.tp, cfg.pp, cfg.dp, cfg.pcp, cfg.dcp, a.quantization, a.enforce_eager, a.kv_cache_dtype,
                  a.seed, cfg.model_name, cfg.prefix_caching, cfg.block_size)

    def _init_engine(self, rank: int, ip: str) -> None:
        cfg = self.cfg
        elog = engine_logger(rank)
        pp_rank = cfg.pp_ranks[0]
        elog.info("parallel_state.py:1208", "rank %d in world size %d is assigned as DP rank %d, PP rank %d, "
                  "PCP rank 0, TP rank 0, EP rank %d", cfg.node_rank * cfg.local_world, cfg.tp * cfg.pp * cfg.pcp,
                  rank, pp_rank, rank * cfg.tp)
        kv = kvconfig.build(cfg.kv, cfg.dp, rank)
        mooncake = pool = None
        if kv is not None:
            if kv.mooncake is not None:
                mooncake = MooncakeSide(kv.mooncake, dp_rank=rank, tp=cfg.tp, pp=cfg.pp, pcp=cfg.pcp, dcp=cfg.dcp,
                                        pp_ranks=cfg.pp_ranks, host=ip, block_size=cfg.block_size, log=elog)
                self.mooncakes.append(mooncake)
            if kv.pool is not None:
                pool = PoolClient(kv.pool, os.path.basename(cfg.model.rstrip("/")), rank, elog)
                pool.init(0)
                self.pools.append(pool)
        self.engines[rank] = Engine(dp_rank=rank, block_size=cfg.block_size, num_gpu_blocks=cfg.num_gpu_blocks,
                                    prefix_caching=cfg.prefix_caching,
                                    kv=kv, mooncake=mooncake, pool=pool, log=elog)

    def _load(self, elog: Logger) -> None:
        cfg = self.cfg
        start = time.time()
        elog.info("model_runner_v1.py:2811", "Starting to load model %s...", cfg.model)
        delay = float(os.environ.get("K3SIM_LOAD_SECONDS", "0.3")) + float(hw.faults("engine").get("slow_start_s", 0))
        time.sleep(delay)
        wait_while_hung()  # an injected hang never finishes loading
        took = time.time() - start
        elog.info("default_loader.py:267", "Loading weights took %.2f seconds", took)
        elog.info("model_runner_v1.py:2830", "Loading model weights took 0.0000 GB")
        tokens = cfg.num_gpu_blocks * cfg.block_size
        elog.info("kv_cache_utils.py:1087", "GPU KV cache size: %s tokens", f"{tokens:,}")
        elog.info("kv_cache_utils.py:1091", "Maximum concurrency for %s tokens per request: %.2fx",
                  f"{cfg.max_model_len:,}", tokens / cfg.max_model_len)
        elog.info("core.py:210", "init engine (profile, create kv cache, warmup model) took %.2f seconds", took)

    # ---- life -----------------------------------------------------------------------------
    def _monitor(self) -> None:
        while True:
            time.sleep(0.25)
            crash = hw.faults("engine").get("crash_after_s")
            if crash is not None and self.serving_since and time.time() - self.serving_since >= float(crash):
                r = self.cfg.local_ranks[0] if self.cfg.local_ranks else 0
                fatal_exit(engine_logger(r), ["EngineCore encountered a fatal error.",
                                              "RuntimeError: NPU device error: the engine process crashed "
                                              "(injected fault crash_after_s)."])
            for mc in self.mooncakes:
                mc.expire()

    def _dp_serve(self, rank: int, client: GroupClient) -> None:
        engine = self.engines[rank]

        def handle(payload: dict[str, Any]) -> Any:
            if payload.get("op") == "reset_prefix_cache":
                return engine.reset_prefix_cache()
            return engine.process(payload["req"])

        client.serve(handle)
        fatal_exit(engine_logger(rank), ["EngineCore encountered a fatal error.",
                                         f"RuntimeError: Lost connection to the data parallel front-end at "
                                         f"{self.cfg.dp_address}:{self.cfg.dp_rpc_port}."])

    def _pp_watch(self) -> None:
        assert self.pp_client is not None
        self.pp_client.serve(lambda payload: None)
        fatal_exit(self.log, ["RuntimeError: Lost connection to the master node "
                              f"{self.cfg.args.master_addr}:{self.cfg.args.master_port}; the pipeline "
                              "parallel group is broken."])

    def _lost_dp(self, rank: int) -> None:
        self.dead.set()
        fatal_exit(self.log, [f"Engine core proc EngineCore_DP{rank} died unexpectedly, shutting down client."])

    def _lost_pp(self, node: int) -> None:
        self.dead.set()
        fatal_exit(self.log, [f"Worker proc on node {node} died unexpectedly, shutting down executor.",
                              "EngineCore encountered a fatal error."])

    # ---- routing --------------------------------------------------------------------------
    def pick(self, header: str | None) -> int:
        """X-data-parallel-rank (§5.1): bypasses the balancer; otherwise least in-flight."""
        ranks = self.cfg.managed_ranks
        if header is not None:
            try:
                index = int(header)
            except ValueError:
                index = None
            if index is not None:
                if not 0 <= index < len(ranks):
                    raise RequestError(f"data_parallel_rank {index} is out of range [0, {len(ranks)}).",
                                       param="data_parallel_rank")
                if not hw.faults("engine").get("ignore_dp_rank_header"):  # fault: the header is not honoured
                    return ranks[index]
        with self._lock:
            low = min(self.inflight[r] for r in ranks)
            cands = [r for r in ranks if self.inflight[r] == low]
            return cands[next(self._rr) % len(cands)]

    def process(self, rank: int, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.inflight[rank] += 1
        try:
            if rank in self.engines:
                return self.engines[rank].process(req)
            assert self.dp_server is not None
            result = self.dp_server.call(rank, {"op": "generate", "req": req})
            if result is None:
                return {"error": {"status": 500, "message": "Internal server error", "cause": "engine dead"}}
            return result
        finally:
            with self._lock:
                self.inflight[rank] -= 1

    def reset_prefix_cache(self) -> None:
        for rank in self.cfg.managed_ranks:
            if rank in self.engines:
                self.engines[rank].reset_prefix_cache()
            elif self.dp_server is not None:
                self.dp_server.call(rank, {"op": "reset_prefix_cache"}, timeout=10)

    def close(self) -> None:
        for mc in self.mooncakes:
            mc.close()
        for pool in self.pools:
            pool.close()
        for server in (self.dp_server, self.pp_server):
            if server is not None:
                server.close()
