"""The default gate policy against the conformance suite as it is now: no stale check ids, areas or
skip reasons (check names and skip messages change, #10), and every MUST check blocks."""
from __future__ import annotations

import ast
import fnmatch
import inspect
import re
from pathlib import Path

import pytest

from k3lab.conformance.plugin import declared
from k3lab.model import catalog, policy
from tests import suite

CONF = Path(__file__).resolve().parents[2] / "conformance"
OPT_IN = {"perf", "accuracy", "long-requests", "aisbench-perf", "kvv-accuracy"}  # opt-in modules' areas (plugin.OPT_IN): warn by default, a lab policy blocks


def _checks() -> dict[str, tuple[str, str]]:
    """conformance id -> (area, must), the way k3lab.conformance.plugin.metadata derives them."""
    out = {}
    for path in sorted(CONF.glob("*.py")):
        mod = suite.load(path.stem)
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if not name.startswith("test_") or fn.__module__ != mod.__name__:
                continue
            meta = declared(mod, fn)
            area = meta.get("area") or (path.stem[5:] if path.stem.startswith("test_") else path.stem)
            out[meta.get("id") or f"{area}.{name}"] = (area, meta.get("must", ""))
    return out


def _skip_messages() -> list[str]:
    """Every pytest.skip message in conformance/, f-string fields replaced by 'X'."""
    return [m for _, m in _skips()]


def _skips() -> list[tuple[str, str]]:
    """(module stem, message) of every pytest.skip in conformance/, f-string fields replaced by 'X'."""
    msgs = []
    for path in sorted(CONF.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "skip"
                    and node.args):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    msgs.append((path.stem, arg.value))
                elif isinstance(arg, ast.JoinedStr):
                    msgs.append((path.stem, "".join(v.value if isinstance(v, ast.Constant) else "X"
                                                    for v in arg.values)))
    return msgs


CHECKS = _checks()
DEFAULT = policy.load()
SECTIONS = [("defaults", DEFAULT.defaults)] + [(f"scenarios.{s}", p) for s, p in DEFAULT.scenarios.items()]


def test_the_suite_is_found():
    assert len(CHECKS) > 30 and "npu.test_npu_smi_devices_healthy" in CHECKS


@pytest.mark.parametrize("where, section", SECTIONS, ids=[w for w, _ in SECTIONS])
def test_no_stale_references(where, section):
    areas = {a for a, _ in CHECKS.values()}
    stale = [f"{where}.areas.{a}" for a in section.areas if a not in areas]
    stale += [f"{where}.checks[{g!r}]" for g in section.checks if not fnmatch.filter(CHECKS, g)]
    skips = _skip_messages()
    for k, na in enumerate(section.not_applicable):
        if not fnmatch.filter(CHECKS, na.check):
            stale.append(f"{where}.not_applicable[{k}].check {na.check!r}: no such check")
        if not any(re.search(na.reason, m) for m in skips):
            stale.append(f"{where}.not_applicable[{k}].reason {na.reason!r}: no check skips with such a message")
    assert not stale, "the default policy refers to checks or messages that no longer exist: " + "; ".join(stale)


@pytest.mark.parametrize("sid", catalog.SCENARIOS)
def test_every_must_check_blocks(sid):
    eff = DEFAULT.for_scenario(sid)
    loose = [cid for cid, (area, must) in CHECKS.items()
             if "MUST" in must and area not in OPT_IN and eff.level(cid, area, must)[0] != "block"]
    assert not loose, f"{sid}: MUST checks that do not block: {loose}"
    for cid, (area, must) in CHECKS.items():
        if area in OPT_IN:
            assert eff.level(cid, area, must)[0] == "warn", cid


def test_every_check_states_its_must():
    assert not [cid for cid, (_, must) in CHECKS.items() if "MUST" not in must]


# Skips the default policy deliberately leaves blocking (so the verdict is INCOMPLETE), or in a
# non-blocking area. Any other skip message must be a listed not-applicable reason, or a healthy
# run turns INCOMPLETE for a check that simply does not apply.
NOT_NOT_APPLICABLE = {
    "no dev mode and the MetaService serves no capacity metrics": "pool reuse unproven (MemCache 1.0.x): INCOMPLETE",
    "no dev mode, and the pool cannot hold the fill": "pool reuse unproven (pool too small): INCOMPLETE",
    "no fixtures/baselines/": "perf area, opt-in: warns",
    "hardware stage: not run": "only in the hardware stage, once another check failed: the stage fails anyway",
}


def test_every_skip_is_classified():
    eff = DEFAULT.for_scenario("a3_pd")
    loose = []
    for stem, msg in _skips():
        if any(msg.startswith(k) for k in NOT_NOT_APPLICABLE):
            continue
        if not any(eff.not_applicable_reason(c, msg) for c in CHECKS):
            loose.append(f"{stem}: {msg!r}")
    assert not loose, ("skip messages that are neither a not-applicable reason of the default policy nor "
                       "listed in NOT_NOT_APPLICABLE: " + "; ".join(loose))
