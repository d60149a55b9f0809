"""Every option of the suite's plugin, as the kit runs the suite: alone and under xdist (``-n 2``).

The suite always runs with xdist (k3lab.launch.suite), where options are parsed by the controller
and must reach each worker, and only the controller writes the results file: each option is given a
non-default value, read back on the workers, and the metadata must survive the trip.
"""
from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

# option -> the value given (None: a flag); every option the plugin adds
OPTIONS = {
    "--perf": None, "--accuracy": None, "--long-requests": None, "--aisbench-perf": None, "--kvv": None,
    "--hardware-stage": None,
    "--long-request-tokens": "1000", "--long-request-output": "4", "--long-request-concurrency": "2",
    "--aisbench-tools": "/opt/ais", "--aisbench-perf-baseline": "/b/ais.json", "--kvv-toolkit": "/opt/kvv",
    "--kvv-python": "/opt/kvv/bin/python", "--kvv-baseline": "/b/kvv.json", "--bench-down-grace": "7.5",
    "--bench-node": "p0", "--bench-tokenizer": "/tok", "--perf-baseline": "/b/perf.json",
    "--perf-threshold": "0.9", "--acc-tolerance": "2.5", "--aisbench-task": "mmmu_pro=mmmu_pro_gen",
}

CHECKS = '''
import json
import pytest

DESTS = {dests!r}


@pytest.mark.conformance(area="demo", id="demo.options", must="Options MUST reach every worker.")
@pytest.mark.parametrize("node", ["p0", "p1", "d0", "d1"])
def test_options(pytestconfig, record_property, node):
    record_property("options", json.dumps({{d: pytestconfig.getoption(d) for d in DESTS}}, sort_keys=True))


def test_fails():
    assert False, "planted"
'''


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def test_every_plugin_option_is_listed_here():
    from k3lab.conform import plugin

    class _Group:
        def __init__(self) -> None:
            self.names: list[str] = []

        def addoption(self, name, **kwargs):
            self.names.append(name)

    class _Parser:
        def __init__(self) -> None:
            self.group = _Group()

        def getgroup(self, *args, **kwargs):
            return self.group

    parser = _Parser()
    plugin.pytest_addoption(parser)
    assert set(parser.group.names) == set(OPTIONS) | {"--run-dir"}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_options_reach_every_worker_and_results_are_written_once(pytester, monkeypatch, workers):
    monkeypatch.delenv("K3LAB_RUN_DIR", raising=False)
    pytester.makepyfile(test_opts=CHECKS.format(dests=sorted(_dest(o) for o in OPTIONS)))
    run_dir = pytester.mkdir("run")
    argv = [f"--run-dir={run_dir}", "-p", "k3lab.conform.plugin", "-p", "no:cacheprovider", *workers]
    for option, value in OPTIONS.items():
        argv += [option] if value is None else [option, value]
    result = pytester.runpytest_subprocess(*argv)
    result.assert_outcomes(passed=4, failed=1)
    doc = json.loads((run_dir / "conformance-results.json").read_text())
    rows = {r["nodeid"].split("::", 1)[1]: r for r in doc["tests"]}
    assert len(rows) == 5 and doc["counts"] == {"passed": 4, "failed": 1}
    expected = {_dest(o): (True if v is None else v) for o, v in OPTIONS.items()}
    for node in ("p0", "p1", "d0", "d1"):
        row = rows[f"test_options[{node}]"]
        assert (row["id"], row["must"], row["param"]) == ("demo.options", "Options MUST reach every worker.", node)
        got = json.loads(row["properties"]["options"])
        numeric = {k: float(v) for k, v in expected.items() if k in ("perf_threshold", "acc_tolerance",
                                                                     "bench_down_grace")}
        ints = {k: int(v) for k, v in expected.items() if k.startswith("long_request_") and k != "long_requests"}
        assert got == {**expected, **numeric, **ints, "aisbench_task": ["mmmu_pro=mmmu_pro_gen"]}
    assert rows["test_fails"]["outcome"] == "failed" and "planted" in rows["test_fails"]["message"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_results_record_what_was_collected_so_the_gate_sees_what_did_not_run(pytester, monkeypatch, workers):
    monkeypatch.delenv("K3LAB_RUN_DIR", raising=False)
    pytester.makepyfile(test_opts=CHECKS.format(dests=[]))
    run_dir = pytester.mkdir("run")
    result = pytester.runpytest_subprocess(f"--run-dir={run_dir}", "-p", "k3lab.conform.plugin",
                                           "-p", "no:cacheprovider", *workers)
    result.assert_outcomes(passed=4, failed=1)
    doc = json.loads((run_dir / "conformance-results.json").read_text())
    assert sorted(n.split("::", 1)[1] for n in doc["collected"]) == sorted(
        [f"test_options[{n}]" for n in ("p0", "p1", "d0", "d1")] + ["test_fails"])
    if not workers:  # -k deselects on the controller only when it collects (xdist: on the workers)
        pytester.runpytest_subprocess(f"--run-dir={run_dir}", "-p", "k3lab.conform.plugin",
                                      "-p", "no:cacheprovider", "-k", "p0")
        doc = json.loads((run_dir / "conformance-results.json").read_text())
        assert doc["deselected"] == 4 and len(doc["collected"]) == 1
