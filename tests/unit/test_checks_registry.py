"""One check registry (#31): every static, lab, host, hardware and conformance check declares a unique,
stable id, an area, a MUST statement and a remedy; ``k3lab checks`` lists them with the fault rows that
prove them; golden/checks.json keeps the catalogue, as Kubernetes' conformance.yaml does."""
from __future__ import annotations

import ast
import inspect
import json

import jsonschema
import pytest

from k3lab import formats, paths
from k3lab.conform import plugin
from k3lab.model import checks
from k3lab.preflight import registry
from k3lab.tools import checklist
from tests import suite

GOLDEN = paths.GOLDEN / "checks.json"
UPDATE = "k3lab checks --format json > golden/checks.json"
EVERY = registry.every_check()

pytest_plugins = ["pytester"]


def test_ids_are_unique_and_every_check_declares_its_metadata():
    ids = [c.id for c in EVERY]
    assert len(ids) == len(set(ids)) and checks.duplicates(EVERY) == []
    assert {c.stage for c in EVERY} == set(checks.STAGES)
    empty = [f"{c.id}: {k}" for c in EVERY for k in ("id", "area", "must", "remedy") if not getattr(c, k).strip()]
    assert empty == []
    prefix = {"static": "PF-", "lab": "LPF-", "host": "HST-"}
    assert [c.id for c in EVERY if c.stage in prefix and not c.id.startswith(prefix[c.stage])] == []


def test_a_duplicate_id_is_refused(monkeypatch):
    from k3lab.preflight import labchecks

    monkeypatch.setattr(labchecks, "LIVE_CHECKS", [*labchecks.LIVE_CHECKS, labchecks.LIVE_CHECKS[0]])
    with pytest.raises(ValueError, match="declared more than once: LPF-ENDPOINT"):
        registry.every_check()


def test_every_suite_check_states_its_id_explicitly():
    """No check relies on the <area>.<function> default: its id is written next to it."""
    implicit = []
    for path in sorted(paths.CONFORMANCE.glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
                marks = [checks._mark_kwargs(d, path.name) or {} for d in fn.decorator_list]
                if not any("id" in m for m in marks):
                    implicit.append(f"{path.name}::{fn.name}")
    assert implicit == []


def test_the_registry_reads_the_suite_as_the_plugin_does():
    """The marks read from the syntax tree are the marks pytest gives the checks (imported, merged)."""
    seen = {}
    for path in sorted(paths.CONFORMANCE.glob("*.py")):
        if path.name == "conftest.py":
            continue
        mod = suite.load(path.stem)
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if name.startswith("test_") and fn.__module__ == mod.__name__:
                meta = plugin.declared(mod, fn)
                seen[meta["id"]] = (meta["area"], meta["must"], meta["remedy"])
    assert seen == {c.id: (c.area, c.must, c.remedy) for c in checks.suite_checks()}
    assert sum(c.stage in ("hardware", "conformance") for c in EVERY) == len(seen) == 45


def test_the_hardware_stage_is_the_suites_npu_file():
    from k3lab.launch import suite as runner

    assert checks.HARDWARE_MODULE == runner.HARDWARE
    assert {c.source.split("::")[0] for c in EVERY if c.stage == "hardware"} == {f"conformance/{runner.HARDWARE}"}


def test_a_mark_that_is_not_a_literal_is_an_error(tmp_path):
    (tmp_path / "test_x.py").write_text('import pytest\nID = "x.y"\n\n@pytest.mark.conformance(id=ID)\ndef test_y():\n    pass\n')
    with pytest.raises(checks.DeclarationError, match=r"test_x.py:4: conformance\(id=...\) must be a literal"):
        checks.suite_checks(tmp_path)


def test_the_catalogue_is_the_golden_file():
    """Adding, removing or renaming a check (or a fault row proving one) changes the catalogue: review the
    diff and update the golden file with the command the failure names."""
    current = checklist.catalogue()
    assert GOLDEN.is_file(), f"no {GOLDEN}: write it with {UPDATE}"
    golden = json.loads(GOLDEN.read_text())
    was, now = {c["id"]: c for c in golden["checks"]}, {c["id"]: c for c in current["checks"]}
    diff = ([f"added {i}" for i in now.keys() - was.keys()] + [f"removed {i}" for i in was.keys() - now.keys()]
            + [f"changed {i}" for i in now.keys() & was.keys() if now[i] != was[i]])
    what = "; ".join(sorted(diff)) or "order, fault rows or not-applicable reasons"
    assert golden == current, f"the check catalogue differs from {GOLDEN.name} ({what}): if intended, run `{UPDATE}` and commit it"


def test_checks_command_lists_every_check_with_its_proof(capsys):
    from k3lab.cli.main import main

    assert main(["checks", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    schema = formats.schema("checks")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    rows = {c["id"]: c for c in doc["checks"]}
    assert len(rows) == len(EVERY)
    assert rows["PF-DP-RANKS"]["faults"] == ["S-DP-RANK-DUP"]
    assert "H-NPU-ALARM" in rows["npu.test_npu_smi_devices_healthy"]["faults"]
    assert "L-DEVICE-ALARM" in rows["npu.test_npu_smi_devices_healthy"]["faults"]
    assert rows["HST-DOCKER"]["faults"] == []  # listed as unproven, not hidden
    assert {r["id"] for r in doc["na_reasons"]} == set(checks.NA_REASONS)
    assert main(["checks"]) == 0
    text = capsys.readouterr().out
    assert all(c.id in text for c in EVERY) and "(no fault row)" in text
    assert f"{len(EVERY)} checks (" in text and "not-applicable reason ids" in text


def test_every_na_reason_and_legacy_pattern():
    assert checks.na_reason("no-proxy").applies and not checks.na_reason("pool-unproven").applies
    with pytest.raises(ValueError, match="unknown not-applicable reason 'no-proxies'"):
        checks.na_reason("no-proxies")
    assert checks.legacy_na("no MemCache pool: without one, ...") == "no-pool"
    assert checks.legacy_na("only one pooled producer exposes an API") is None


NA_SUITE = '''
import pytest
from k3lab.conform.plugin import skip


@pytest.fixture
def pool():
    skip("no-pool", "no MemCache pool in this scenario")


@pytest.mark.conformance(area="demo", id="demo.proxy", must="x MUST y", remedy="r")
@pytest.mark.parametrize("node", ["p0", "d0"], ids=["p0", "d0"])
def test_proxy(node):
    skip("no-proxy", "reworded: the scenario has no proxy")


@pytest.mark.conformance(area="demo", id="demo.pool", must="x MUST y", remedy="r")
def test_pool(pool):
    pass


@pytest.mark.conformance(area="demo", id="demo.plain", must="x MUST y", remedy="r")
def test_plain():
    pytest.skip("npu-smi timed out")
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_a_typed_skip_lands_in_the_results_as_na_reason(pytester, monkeypatch, workers):
    monkeypatch.delenv("K3LAB_RUN_DIR", raising=False)
    pytester.makepyfile(test_na=NA_SUITE)
    run_dir = pytester.mkdir("run")
    result = pytester.runpytest_subprocess(f"--run-dir={run_dir}", "-p", "k3lab.conform.plugin",
                                           "-p", "no:cacheprovider", "-rs", *workers)
    result.assert_outcomes(skipped=4)
    if not workers:
        result.stdout.fnmatch_lines(["*test_na.py:*: reworded: the scenario has no proxy"])  # the check's line
    doc = json.loads((run_dir / "conformance-results.json").read_text())
    rows = {r["nodeid"].split("::", 1)[1]: r for r in doc["tests"]}
    assert {k: (r["na_reason"], r["param"]) for k, r in rows.items()} == {
        "test_proxy[p0]": ("no-proxy", "p0"), "test_proxy[d0]": ("no-proxy", "d0"),
        "test_pool": ("no-pool", None), "test_plain": (None, None)}
    assert rows["test_pool"]["properties"]["conformance.na"] == "no-pool"
    assert rows["test_proxy[p0]"]["message"] == "reworded: the scenario has no proxy"


def test_an_unknown_reason_id_is_an_error_in_the_suite_not_a_silent_skip():
    with pytest.raises(ValueError, match="unknown not-applicable reason"):
        plugin.skip("no-such-reason", "x")
    with pytest.raises(pytest.skip.Exception) as info:
        plugin.skip("single-node", "single node")
    assert info.value.na_reason == "single-node" and str(info.value.msg) == "single node"
