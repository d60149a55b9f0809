"""The default gate policy against the conformance suite as it is now: no stale check ids, areas or
skip reason ids (#10, #31), and every MUST check blocks."""
from __future__ import annotations

import ast
import fnmatch
import inspect
from pathlib import Path

import pytest

from k3lab.conform.plugin import declared
from k3lab.model import catalog, checks, policy
from tests import suite

CONF = Path(__file__).resolve().parents[3] / "conformance"
OPT_IN = {"perf", "accuracy", "long-requests", "aisbench-perf", "kvv-accuracy"}  # opt-in modules' areas (plugin.OPT_IN): warn by default, a lab policy blocks


def _checks() -> dict[str, tuple[str, str]]:
    """conformance id -> (area, must), the way k3lab.conform.plugin.metadata derives them."""
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


def _skips() -> list[tuple[str, str, str]]:
    """(module stem, reason id, message) of every typed skip, ``skip(REASON, MESSAGE)``, in conformance/;
    f-string fields replaced by 'X'."""
    out = []
    for path in sorted(CONF.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "skip"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)):
                arg = node.args[1]
                msg = arg.value if isinstance(arg, ast.Constant) else "".join(
                    v.value if isinstance(v, ast.Constant) else "X" for v in getattr(arg, "values", []))
                out.append((path.stem, str(node.args[0].value), str(msg)))
    return out


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
    used = {rid for _, rid, _ in _skips()}
    for k, na in enumerate(section.not_applicable):
        if not fnmatch.filter(CHECKS, na.check):
            stale.append(f"{where}.not_applicable[{k}].check {na.check!r}: no such check")
        if na.id is None:
            stale.append(f"{where}.not_applicable[{k}]: a regex over skip text (deprecated); name a reason id")
        elif na.id not in used:
            stale.append(f"{where}.not_applicable[{k}].id {na.id!r}: no check skips with that reason")
    assert not stale, "the default policy refers to checks or reasons that no longer exist: " + "; ".join(stale)


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


def test_every_skip_is_classified():
    """A reason that means "does not apply" is listed by the default policy; one that means "could not
    check" (k3lab.model.checks: applies=False, e.g. pool reuse unproven, INCOMPLETE by design) is not."""
    eff = DEFAULT.for_scenario("a3_pd")
    wrong = []
    for stem, rid, msg in _skips():
        listed = any(eff.not_applicable_reason(c, msg, rid) for c in CHECKS)
        if listed != checks.na_reason(rid).applies:
            wrong.append(f"{stem}: {rid} ({msg!r}) is {'' if listed else 'not '}listed as not applicable")
    assert not wrong, "skips the default policy classifies against their reason's meaning: " + "; ".join(wrong)


def test_every_skip_is_typed():
    """The suite never skips with bare text: every skip names its reason id (k3lab.conform.plugin.skip)."""
    bare = [f"{p.name}:{n.lineno}" for p in sorted(CONF.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "skip"]
    assert not bare, f"untyped pytest.skip in the suite: {bare}"
    unused = set(checks.NA_REASONS) - {rid for _, rid, _ in _skips()} - {"not-requested"}  # the plugin's own
    assert not unused, f"reason ids no check uses: {sorted(unused)}"


def test_old_results_keep_their_reasons():
    """Results recorded before reasons had ids: each skip message still maps to its reason id (legacy_na)."""
    assert [(rid, checks.legacy_na(msg)) for _, rid, msg in _skips() if checks.legacy_na(msg) != rid] == []
