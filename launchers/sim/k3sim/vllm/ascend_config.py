"""``--additional-config`` checks of vLLM-Ascend's AscendConfig (vllm-ascend-internals.md §7).

Unknown top-level keys are ignored like the real ``additional_config.get(...)`` reads; only the
combinations the reference lists as errors or warnings act here.
"""
from __future__ import annotations

from typing import Any

from k3sim.vllm.errors import StartupError
from k3sim.vllm.log import Logger

WHERE = "vllm_ascend/ascend_config.py"


def check(additional: dict[str, Any] | None, kv_role: str | None, log: Logger) -> dict[str, Any]:
    """Validate and return the effective settings; raises StartupError like AscendConfig.__init__."""
    cfg = dict(additional or {})
    if "enable_sleep_mode_extra_cleanup" in cfg:
        raise StartupError("ValueError", "enable_sleep_mode_extra_cleanup has been removed; remove it from "
                           "additional_config.", WHERE)
    sched = cfg.get("scheduler_config", {})
    if sched is None:
        sched = {}
    if not isinstance(sched, dict):
        raise StartupError("ValueError", f"scheduler_config must be a dict, got {type(sched).__name__}", WHERE)
    _check_mc2(cfg, log)
    if "enable_mlapo" in cfg:
        log.info("ascend_config.py:98", "AscendConfig.enable_mlapo is set from additional_config with value %s",
                 bool(cfg["enable_mlapo"]))
    for key in ("recompute_scheduler_enable", "enable_balance_scheduling"):
        if key in cfg:
            log.warning("ascend_config.py:140", "%s at the top level of additional_config is deprecated, "
                        "please set it in scheduler_config.", key)
            sched = dict(sched, **{key: cfg[key]})
    _check_scheduler(sched, kv_role, log)
    cfg["scheduler_config"] = sched
    cfg.setdefault("enable_cpu_binding", True)
    return cfg


def _check_mc2(cfg: dict[str, Any], log: Logger) -> None:
    """enable_fused_mc2 against mix_placement and multistream_overlap_shared_expert."""
    fused = cfg.get("enable_fused_mc2", 0)
    if fused not in (0, 1, True, False):
        raise StartupError("ValueError", f"enable_fused_mc2 must be 0 or 1, got {fused!r}", WHERE)
    if cfg.get("mix_placement") and (cfg.get("multistream_overlap_shared_expert") or int(fused) == 1):
        raise StartupError("ValueError", "mix_placement cannot be used together with multistream_overlap_shared_expert "
                           "or enable_fused_mc2", WHERE)
    if int(fused) == 1 and cfg.get("multistream_overlap_shared_expert"):
        log.warning("ascend_config.py:171", "multistream_overlap_shared_expert is not supported with "
                    "enable_fused_mc2=1, it is forced to False.")
        cfg["multistream_overlap_shared_expert"] = False


def _check_scheduler(sched: dict[str, Any], kv_role: str | None, log: Logger) -> None:
    """The scheduler options that need a PD role (platform.py)."""
    if sched.get("recompute_scheduler_enable"):
        if kv_role == "kv_producer":
            log.warning("platform.py:412", "recompute_scheduler_enable is ignored on PD-disaggregated P nodes "
                        "(kv_role=kv_producer); it is forced to False.")
            sched["recompute_scheduler_enable"] = False
        elif kv_role != "kv_consumer":
            raise StartupError("ValueError", "recompute_scheduler_enable is only supported on PD-disaggregated "
                               f"D nodes (kv_role=kv_consumer), got kv_role={kv_role}", "vllm_ascend/platform.py")
    if sched.get("enable_balance_scheduling") and kv_role != "kv_both":
        raise StartupError("ValueError", "enable_balance_scheduling requires kv_role=kv_both, "
                           f"got kv_role={kv_role}", "vllm_ascend/platform.py")
