"""One registry of the kit's checks: a stable id, stage, area, MUST statement, remedy and severity each.

Stages, in the order a run meets them:

* ``static``: ``PF-*``, judged on the rendered plan (``k3lab preflight``, :mod:`k3lab.preflight.checks`);
* ``lab``: ``LPF-*``, the lab preflight against each node's endpoint (:mod:`k3lab.preflight.labchecks`);
* ``host``: ``HST-*``, the host stage on each node's host (:mod:`k3lab.preflight.hostchecks`);
* ``hardware``: the suite's NPU/HCCN checks (``conformance/test_npu.py``), run as a gate after the
  containers exist and before any engine starts, and again in the suite;
* ``conformance``: the rest of the live suite (``conformance/``).

The suite declares its checks next to the test, as Kubernetes' ``ConformanceIt`` does, with
``pytest.mark.conformance(area=..., id=..., must=..., remedy=...)``; :func:`suite_checks` reads those
marks from the files' syntax tree, so listing the checks imports neither pytest nor the suite. The
id is stable: results, baselines, policies and fault rows name a check by it.

A check that does not apply to a scenario skips with a typed reason (:data:`NA_REASONS`), recorded in
its result as ``na_reason``; a gate policy lists the reason ids that mean "not applicable" (never a
pattern over the skip's text).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from k3lab import paths

if TYPE_CHECKING:
    from k3lab.model.runs import ResultRow

Stage = Literal["static", "lab", "host", "hardware", "conformance"]
STAGES: tuple[str, ...] = ("static", "lab", "host", "hardware", "conformance")
Severity = Literal["error", "warning"]
HARDWARE_MODULE = "test_npu.py"  # the suite file the hardware stage runs (k3lab.launch.suite.HARDWARE)
MARK = "conformance"


@dataclass(frozen=True, kw_only=True)
class CheckInfo:
    """What every check declares, whatever runs it."""

    id: str
    stage: Stage
    area: str
    must: str
    remedy: str
    severity: Severity = "error"
    source: str = field(default="", compare=False)  # where it is declared: module, or suite file::function

    def row(self) -> dict[str, str]:
        return {"id": self.id, "stage": self.stage, "area": self.area, "severity": self.severity,
                "must": self.must, "remedy": self.remedy, "source": self.source}


# ------------------------------------------------------------------------- not-applicable reasons


@dataclass(frozen=True)
class NaReason:
    """Why a check skipped. ``applies``: False when the skip means "could not check" (the default policy
    never lists it, so the check is INCOMPLETE). ``legacy``: the skip message's pattern before reasons had
    ids, so results recorded then still get theirs (read-only compatibility; remove with schema 2)."""

    id: str
    means: str
    applies: bool = True
    legacy: str = ""


NA_REASONS: dict[str, NaReason] = {r.id: r for r in (
    NaReason("no-staged-artefacts", "the node has no staged artefacts to compare", legacy=r"^no staged artefacts$"),
    NaReason("lab-inventory", "a lab inventory renders its own values: golden/ holds the default inventory's",
             legacy=r"^a lab inventory renders its own values"),
    NaReason("single-node", "one node: no cross-node path to check", legacy=r"^single node$"),
    NaReason("not-a3", "the check reads an A3-only interface", legacy=r"^spod-info exists on A3 only$"),
    NaReason("no-proxy", "the scenario runs no PD proxy", legacy=r"^no proxy in this scenario$"),
    NaReason("parsers-off", "rendered with parsers=off: raw model output by design", legacy=r"^rendered with parsers=off"),
    NaReason("not-internal-lb", "X-data-parallel-rank routing exists on the internal-LB mixed services only",
             legacy=r"^X-data-parallel-rank applies to the internal-LB mixed services$"),
    NaReason("not-pd", "no Prefill/Decode engines: no KV transfer",
             legacy=r"^no Prefill/Decode engines: KV transfer does not apply$"),
    NaReason("no-pool", "the scenario has no MemCache pool", legacy=r"^no MemCache pool( in this scenario$|: )"),
    NaReason("no-ports", "no listening port is planned on this node", legacy=r"^no listening ports planned on this node$"),
    NaReason("no-startup-ports", "no start-up-only port is planned on this node",
             legacy=r"^no start-up-only port planned on this node$"),
    NaReason("no-headless", "the scenario has no headless nodes", legacy=r"^no headless nodes in this scenario$"),
    NaReason("no-metaservice", "the scenario runs no MetaService", legacy=r"^no MetaService in this scenario$"),
    NaReason("no-api-key", "no API key configured (K3LAB_API_KEY): the APIs are open, as the guides warn",
             legacy=r"^no API key configured"),
    NaReason("no-guide-figure", "the guides give no figure for this dataset, model and platform",
             legacy=r"^the guides give no .* figure for"),
    NaReason("language-model-only", "a multimodal dataset on a language-model-only deployment",
             legacy=r"^multimodal dataset on a language-model-only deployment$"),
    NaReason("toolcall-restart", "ToolCall/KVVV runs on the guide's §7.5 restart (k3_a3_mixed_toolcall)",
             legacy=r"^ToolCall/KVVV runs on the §7.5 restart"),
    # skips that leave the check unproven: the default policy lists none of them
    NaReason("pool-unproven", "pool reuse cannot be shown (no dev mode; no capacity metrics or too small a pool)",
             applies=False, legacy=r"^no dev mode,? and the"),
    NaReason("no-baseline", "no perf baseline for this run", applies=False, legacy=r"^no fixtures/baselines/"),
    NaReason("held-back", "hardware stage: not run once another check failed", applies=False,
             legacy=r"^hardware stage: not run"),
    NaReason("not-requested", "an opt-in module not requested (--perf, --accuracy, ...)", applies=False,
             legacy=r"checks not requested \(pass --"),
)}


def na_reason(reason: str) -> NaReason:
    """The reason ``reason`` names; a ValueError naming the known ids otherwise (a typo in the suite)."""
    try:
        return NA_REASONS[reason]
    except KeyError:
        raise ValueError(f"unknown not-applicable reason {reason!r}; known: {', '.join(NA_REASONS)}") from None


def legacy_na(message: str) -> str | None:
    """The reason id of a skip recorded before reasons had ids, from its message (None: no known reason)."""
    for r in NA_REASONS.values():
        if r.legacy and re.search(r.legacy, message):
            return r.id
    return None


# ------------------------------------------------------------------------------ the suite's checks


class DeclarationError(ValueError):
    """A conformance mark the registry cannot read (its values must be literals)."""


def _mark_kwargs(node: ast.expr, where: str) -> dict[str, str] | None:
    """The keywords of ``pytest.mark.conformance(...)`` (None: another expression)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == MARK):
        return None
    out = {}
    for kw in node.keywords:
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            raise DeclarationError(f"{where}:{node.lineno}: conformance({kw.arg}=...) must be a literal string") from None
        out[str(kw.arg)] = str(value)
    return out


def _module_marks(tree: ast.Module, where: str) -> dict[str, str]:
    meta: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            values = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
            for v in values:
                meta.update(_mark_kwargs(v, where) or {})
    return meta


def module_checks(path: Path) -> list[CheckInfo]:
    """The checks one suite file declares, in file order: every ``test_*`` function, its mark over the
    module's (as k3lab.conform.plugin merges them); area defaults to the file's name, id to
    ``<area>.<function>``."""
    where = f"conformance/{path.name}"
    tree = ast.parse(path.read_text(), str(path))
    base = _module_marks(tree, where)
    stem = path.stem
    out = []
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
            continue
        meta = dict(base)
        for deco in fn.decorator_list:
            meta.update(_mark_kwargs(deco, where) or {})
        area = meta.get("area") or (stem[5:] if stem.startswith("test_") else stem)
        out.append(CheckInfo(id=meta.get("id") or f"{area}.{fn.name}",
                             stage="hardware" if path.name == HARDWARE_MODULE else "conformance",
                             area=area, must=meta.get("must", ""), remedy=meta.get("remedy", ""),
                             source=f"{where}::{fn.name}"))
    return out


def suite_checks(folder: Path | None = None) -> list[CheckInfo]:
    """Every check of the live suite: the ``test_*.py`` files, then the opt-in modules, each in file order."""
    folder = folder or paths.CONFORMANCE
    files = sorted(p for p in folder.glob("*.py") if p.name != "conftest.py")
    files.sort(key=lambda p: not p.name.startswith("test_"))  # stable: test files first, then opt-in modules
    return [c for p in files for c in module_checks(p)]


def duplicates(checks: list[CheckInfo]) -> list[str]:
    """Ids declared more than once."""
    from collections import Counter

    return sorted(cid for cid, n in Counter(c.id for c in checks).items() if n > 1)


# ------------------------------------------------------------------------------------- results


def base_id(key: str) -> str:
    """The check id of a result key: ``hccl.test_hccn_links_up[p1]`` -> ``hccl.test_hccn_links_up``."""
    return key.split("[", 1)[0]


_PARAM = re.compile(r"\[(.*)\](@[^\[\]@]*)?$")  # test[param], maybe with xdist loadgroup's @group after it


def param_of(nodeid: str) -> str | None:
    """The parameter of a node id (``...::test_x[d1]`` or, under ``--dist loadgroup``, ``...[d1]@d1``)."""
    m = _PARAM.search(nodeid.rsplit("::", 1)[-1])
    return m.group(1) if m else None


def result_key(row: ResultRow) -> str:
    """A result row's key in fault rows and stage messages: its check id, with its parameter when it has one
    (``npu.test_npu_smi_devices_healthy[d1]``); a row with no id (a collection error) keeps its node id."""
    cid = row.id or row.properties.get("conformance.id")
    if not cid:
        return row.nodeid or "<collection>"
    param = row.param or param_of(row.nodeid)
    return f"{cid}[{param}]" if param else cid


def failed_checks(results: Path) -> dict[str, str]:
    """Failed or errored check key -> its failure text (the message and the evidence properties), from a
    ``conformance-results.json`` read through its model (k3lab.model.runs: bounded, validated; an
    unreadable file is an InputError naming it); the check id comes from the row, never from a JUnit name."""
    from k3lab.model import runs  # pydantic stays out of the check listing's start-up

    out = {}
    for row in runs.read(runs.Results, results).tests:
        if row.outcome in ("failed", "error"):
            extra = [v for k, v in row.properties.items() if not k.startswith("conformance.")]
            out[result_key(row)] = "\n".join([row.message, *extra])
    return out
