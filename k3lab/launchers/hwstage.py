"""The hardware stage: the suite's NPU and HCCN checks as a gate, after the containers exist and before
any engine starts.

On a lab the expensive part is the model load (tens of minutes per node); a link DOWN, an NPU in
Alarm or an unreachable node pair would surface only as an HCCL or handshake timeout after it. The
checks are the suite's own (``conformance/test_npu.py``: the guides' §3.2 procedure), run through
the one suite runner against the run directory, so the gate and the suite never disagree; the
suite keeps them too, since a deployment can break after start. On failure nothing is launched:
the caller tears down, and the message names each failing check with its node, host and device.
"""
from __future__ import annotations

import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from k3lab.errors import ChecksFailed
from k3lab.launchers import suite

TIMEOUT_S = 660  # the node batches' bound (nodetools.BATCH_TIMEOUT_S, 300 s) + two ping rounds (test_npu.PING_BUDGET_S)
JUNIT = "hardware-stage.xml"


class HardwareStageFailed(ChecksFailed):
    """A hardware check failed before launch (exit 1); ``failures``: (check id, first line of its message)."""

    def __init__(self, message: str, failures: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.failures = failures


def failures(junit: Path) -> list[tuple[str, str]]:
    """(test id, its message's first line) per failed or errored test case of a junit file."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            text = (bad.get("message") or bad.text or "").strip()
            out.append((case.get("name", "?"), text.removeprefix("AssertionError: ").splitlines()[0][:400]))
    return out


def _hosts(run_dir: Path) -> dict[str, str]:
    """node -> its host, from the run's plan (a suite message may name nodes only, e.g. a device pair)."""
    from k3lab.launchers.endpoints import describe
    from k3lab.model.plan import Plan

    try:
        plan = Plan.model_validate_json((run_dir / "plan.json").read_text())
    except (OSError, ValueError):
        return {}
    return {n.name: describe(n.endpoint) for n in plan.nodes}


def _named(msg: str, where: dict[str, str]) -> str:
    """' [hosts: p3 (10.0.0.4), ...]' for the nodes a message names without their host."""
    import re

    named = [n for n in where if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", msg) and f"{n} ({where[n]})" not in msg]
    return f" [hosts: {', '.join(f'{n} ({where[n]})' for n in named)}]" if named else ""


def gate(run_dir: Path, timings: dict[str, float]) -> None:
    t = time.monotonic()
    junit = run_dir / JUNIT
    try:
        res = subprocess.run(suite.hardware_command(run_dir, junit), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HardwareStageFailed(f"hardware stage: no verdict within {TIMEOUT_S}s; nothing was launched", []) from None
    timings["hardware_stage_s"] = time.monotonic() - t
    (run_dir / "hardware-stage.txt").write_text(res.stdout + res.stderr)
    if res.returncode == 0:
        print(f"[k3lab {time.strftime('%H:%M:%S')}] hardware stage: NPU and HCCN checks passed in "
              f"{timings['hardware_stage_s']:.1f}s", flush=True)
        return
    found = failures(junit) if junit.exists() else []
    if not found:
        tail = (res.stdout + res.stderr).strip()[-800:]
        raise HardwareStageFailed(f"hardware stage: the checks did not run (pytest exit {res.returncode}); "
                                  f"nothing was launched:\n{tail}", [])
    where = _hosts(run_dir)
    lines = "\n".join(f"  {name}: {msg}{_named(msg, where)}" for name, msg in found)
    raise HardwareStageFailed(f"hardware stage failed ({len(found)} check(s)); nothing was launched:\n{lines}", found)
