"""The hardware stage: the suite's NPU and HCCN checks as a gate, after the containers exist and before
any engine starts.

On a lab the expensive part is the model load (tens of minutes per node); a link DOWN, an NPU in
Alarm or an unreachable node pair would surface only as an HCCL or handshake timeout after it. The
checks are the suite's own (``conformance/test_npu.py``: the guides' §3.2 procedure), run through
the one suite runner against the run directory, so the gate and the suite never disagree; the
suite keeps them too, since a deployment can break after start. On failure nothing is launched:
the caller tears down, and the message names each failing check with its node, host and device.
The stage stops at its first verdict (``--hardware-stage``): the cross-node pings, a second or more
each on hardware, run last and not at all once another check failed, and round 2 not once round 1
failed; what it held back is named.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from k3lab import outputs
from k3lab.errors import ChecksFailed, InputError
from k3lab.launch import suite

JUNIT = "hardware-stage.xml"
BATCH_TIMEOUT_S = 300  # a node's batch: ~120 tool queries, each retried while hccn_tool answers busy
# A node's pings run one after another (hccn_tool is not re-entrant), and a real -hccs_ping lasts a
# second or more: it sleeps 1 s before each poll of its result (hccn_tool source,
# dsmi_get_hccs_ping_result). So a round's budget grows with its pings: 16 A3 nodes send up to 240
# each in round 2, past any fixed budget that suits 8. A RoCE -ping sends three echoes; at ping(8)'s
# 1 s interval that is ~3 s. A budget too short fails a healthy lab; one too long only delays the
# verdict on a hung one: PING_CALL_S allows 4 s a ping.
PING_CALL_S = 4.0
PING_ROUND_BASE_S = 30
SLACK_S = 60  # pytest start-up, the address reads between the batches and the rounds


def ping_budget_s(pings: int) -> int:
    """Seconds one node's exec of ``pings`` pings may take; past it the unanswered pairs fail as such."""
    return int(PING_ROUND_BASE_S + PING_CALL_S * pings)


def bound_s(device_counts: list[int]) -> int:
    """The stage's bound for nodes with these device counts: the batches, then round 1 (each device
    sends once) and round 2 (at most every device of every other node), each with its node budget."""
    if not device_counts:
        return BATCH_TIMEOUT_S + SLACK_S
    rest = max(sum(device_counts) - own for own in device_counts)
    return BATCH_TIMEOUT_S + ping_budget_s(max(device_counts)) + ping_budget_s(rest) + SLACK_S


class HardwareStageFailed(ChecksFailed):
    """A hardware check failed before launch (exit 1); ``failures``: (test name, first line of its message);
    ``checks``: (check key ``id[param]``, its message) from the stage's conformance-results.json."""

    def __init__(self, message: str, failures: list[tuple[str, str]],
                 checks: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures = failures
        self.checks = checks or []


def _rows(run_dir: Path) -> list:
    """The stage's result rows (conformance-results.json, which its pytest writes; its junit.xml is output only)."""
    from k3lab.model import runs

    try:
        return runs.results(run_dir).tests
    except InputError:  # missing or unreadable: the stage's checks did not run to the end
        return []


def _name(nodeid: str) -> str:
    """'test_npu_health[p0]' of 'conformance/test_npu.py::test_npu_health[p0]@group' (the JUnit case name)."""
    return nodeid.rpartition("::")[2].partition("@")[0]


def failures(run_dir: Path) -> list[tuple[str, str]]:
    """(test id, its message's first line) per failed or errored check of the stage."""
    return [(_name(r.nodeid), (r.message.strip().removeprefix("AssertionError: ").splitlines() or [""])[0][:400])
            for r in _rows(run_dir) if r.outcome in ("failed", "error")]


def held_back(run_dir: Path) -> list[str]:
    """'test id: reason' per check the stage skipped because others had failed (the cross-node pings)."""
    return [f"{_name(r.nodeid)}: {r.message[r.message.index('hardware stage: '):][:300]}"
            for r in _rows(run_dir) if r.outcome == "skipped" and "hardware stage: " in r.message]


def failed_checks(run_dir: Path) -> list[tuple[str, str]]:
    """(check key, message) per failed check of the stage, by the check id its result row carries."""
    from k3lab.model import checks, runs

    results = run_dir / runs.RESULTS
    try:
        return sorted(checks.failed_checks(results).items()) if results.is_file() else []
    except InputError:  # unreadable results: no rows, as _rows reads them
        return []


def _plan(run_dir: Path):
    from k3lab.model import runs

    try:
        return runs.plan(run_dir)
    except InputError:  # the stage still runs; its messages then name nodes without their hosts
        return None


def _hosts(plan) -> dict[str, str]:
    """node -> its host, from the run's plan (a suite message may name nodes only, e.g. a device pair)."""
    from k3lab.launch.endpoints import describe

    return {n.name: describe(n.endpoint) for n in plan.nodes} if plan else {}


def _named(msg: str, where: dict[str, str]) -> str:
    """' [hosts: p3 (10.0.0.4), ...]' for the nodes a message names without their host."""
    import re

    named = [n for n in where if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", msg) and f"{n} ({where[n]})" not in msg]
    return f" [hosts: {', '.join(f'{n} ({where[n]})' for n in named)}]" if named else ""


def gate(run_dir: Path, timings: dict[str, float]) -> None:
    t = time.monotonic()
    junit = run_dir / JUNIT
    plan = _plan(run_dir)
    bound = bound_s([n.device_count for n in plan.nodes] if plan else [])
    from k3lab.model import runs

    (run_dir / runs.RESULTS).unlink(missing_ok=True)  # a verdict only from this stage's own rows, never older ones
    try:
        res = subprocess.run(suite.hardware_command(run_dir, junit), capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired:
        raise HardwareStageFailed(f"hardware stage: no verdict within {bound}s; nothing was launched", []) from None
    timings["hardware_stage_s"] = time.monotonic() - t
    outputs.write_run_file(run_dir / "hardware-stage.txt", res.stdout + res.stderr)
    if res.returncode == 0:
        print(f"[k3lab {time.strftime('%H:%M:%S')}] hardware stage: NPU and HCCN checks passed in "
              f"{timings['hardware_stage_s']:.1f}s", flush=True)
        return
    found = failures(run_dir)
    if not found:
        tail = (res.stdout + res.stderr).strip()[-800:]
        raise HardwareStageFailed(f"hardware stage: the checks did not run (pytest exit {res.returncode}); "
                                  f"nothing was launched:\n{tail}", [])
    where = _hosts(plan)
    lines = "\n".join([f"  {name}: {msg}{_named(msg, where)}" for name, msg in found] +
                      [f"  ({note})" for note in held_back(run_dir)])
    raise HardwareStageFailed(f"hardware stage failed ({len(found)} check(s)); nothing was launched:\n{lines}", found,
                              failed_checks(run_dir))
