"""``vllm serve``: parse, validate, bind, start engines and groups, then serve (or idle headless)."""
from __future__ import annotations

import os
import signal
import threading

from k3sim.vllm import VLLM_VERSION, ascend_config, cli, config
from k3sim.vllm.errors import StartupError
from k3sim.vllm.log import Logger, api, bare, engine_logger

_FRAMES_API = [("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
               ("/usr/local/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", 73, "main",
                "args.dispatch_function(args)"),
               ("/usr/local/lib/python3.11/site-packages/vllm/entrypoints/cli/serve.py", 60, "cmd",
                "uvloop.run(run_server(args))")]


def _report(exc: StartupError, log: Logger, engine_rank: int | None) -> int:
    where = exc.where or "vllm/engine/arg_utils.py"
    frame = (f"/usr/local/lib/python3.11/site-packages/{where}", 1, "<module>", "...")
    text = exc.message
    if exc.stage == "engine" and engine_rank is not None:
        elog = engine_logger(engine_rank)
        for level, at, line in exc.pre_log:  # what the failing component logged itself, before the traceback
            elog.log(level, at, "%s", line)
        elog.error("core.py:708", "EngineCore failed to start.")
        elog.traceback(exc.exc_type, text, [frame]) if text else elog.traceback(exc.exc_type, "", [frame])
        if not log.prefix or log is api:
            api.traceback("RuntimeError", "Engine core initialization failed. See root cause above. Failed core "
                          f"proc(s): {{'EngineCore_DP{engine_rank}': 1}}", _FRAMES_API)
    else:
        for level, at, line in exc.pre_log:
            log.log(level, at, "%s", line)
        log.traceback(exc.exc_type, text, _FRAMES_API + [frame])
    return 1


def _platform_lines() -> None:
    bare.info("__init__.py:36", "Available plugins for group vllm.platform_plugins:")
    bare.info("__init__.py:38", "- ascend -> vllm_ascend:register")
    bare.info("__init__.py:41", "All plugins in this group will be loaded. Set `VLLM_PLUGINS` to control which "
              "plugins to load.")
    bare.info("__init__.py:207", "Platform plugin ascend is activated")


def main(argv: list[str]) -> int:
    args = cli.parse(argv)
    _platform_lines()
    api.info("api_server.py:1896", "vLLM API server version %s", VLLM_VERSION)
    api.info("utils.py:233", "non-default args: %s", cli.non_default(args))
    try:
        cfg = config.resolve(args)
        cfg.additional = ascend_config.check(cfg.additional, cfg.kv_role, api)
    except StartupError as exc:
        return _report(exc, api, None)
    arch = (cfg.hf.get("architectures") or ["KimiK3ForConditionalGeneration"])[0]
    api.info("model.py:547", "Resolved architecture: %s", arch)
    api.info("model.py:1510", "Using max model len %d", cfg.max_model_len)
    if args.max_num_batched_tokens:
        api.info("scheduler.py:205", "Chunked prefill is enabled with max_num_batched_tokens=%d.",
                 args.max_num_batched_tokens)
    if os.environ.get("VLLM_SERVER_DEV_MODE", "0") in ("1", "true", "True"):
        api.warning("api_server.py:1420", "SECURITY WARNING: Development endpoints are enabled! This should NOT be "
                    "used in production!")

    from k3sim.vllm.runtime import Runtime

    log = api
    runtime = Runtime(cfg, log)
    front = None
    if not cfg.headless:
        from k3sim.vllm.api import Frontend

        front = Frontend(cfg, log)
        try:
            front.bind()
        except OSError as exc:
            log.traceback("OSError", f"[Errno {exc.errno}] {exc.strerror}", _FRAMES_API)
            return 1
    try:
        runtime.bind_dp()
    except StartupError as exc:
        return _report(exc, log, None)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        if front is not None:
            log.uvicorn("Shutting down")
            front.shutdown()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        runtime.start()
    except StartupError as exc:
        runtime.close()
        return _report(exc, log, cfg.local_ranks[0] if cfg.local_ranks else None)
    if front is None:
        stop.wait()
        runtime.close()
        return 0
    from k3sim.vllm.metrics import Metrics

    metrics = Metrics(cfg.model_name, cfg.managed_ranks, log_stats=cfg.log_stats, connector=runtime.kv_configured,
                      multiprocess=cfg.mode == "internal" and cfg.dp > 1, capacity_blocks=cfg.num_gpu_blocks,
                      cache_config=cfg.cache_config_info())
    if cfg.log_stats:
        interval = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
        threading.Thread(target=metrics.log_loop, args=(log, interval, stop), daemon=True).start()
    api.info("api_server.py:1634", "Supported tasks: ['generate']")
    try:
        front.serve(runtime, metrics)
    finally:
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        runtime.close()
    return 0
