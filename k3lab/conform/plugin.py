"""pytest plugin for the conformance suite: metadata, evidence, benchmark options, results file.

Registered through the ``pytest11`` entry point ``k3lab.conform.plugin`` (``pyproject.toml``).

* Conformance metadata, declared next to the test as in Kubernetes' ``ConformanceIt`` comments,
  with the registered marker ``pytest.mark.conformance(area=..., id=..., must=..., remedy=...)``: on a
  module (``pytestmark``) it applies to every test there; on a test it overrides the module's key by
  key. Every check of the suite states its stable id (the registry, :mod:`k3lab.model.checks`, lists
  them; ``k3lab checks``); without one it would be ``<area>.<function>``, area from the module name
  (``test_npu.py`` -> ``npu``). Each lands in JUnit as ``conformance.area`` / ``.id`` / ``.must`` /
  ``.node`` properties.
* A check that does not apply skips through :func:`skip` with a reason id of
  :data:`k3lab.model.checks.NA_REASONS`: the property ``conformance.na`` and the result row's
  ``na_reason`` carry it, and a gate policy lists the ids that mean "not applicable".
* Evidence from :mod:`k3lab.conform.evidence` (and a default ``kind`` for plain assertion failures)
  is copied into the test's properties.
* ``--perf`` / ``--accuracy`` / ``--long-requests`` / ``--aisbench-perf`` / ``--kvv`` enable
  ``conformance/perf.py`` / ``accuracy.py`` / ``longreq.py`` / ``aisperf.py`` / ``kvv.py`` (otherwise
  collected and skipped, so the report shows they did not run).
* At session end the controller writes ``RUN_DIR/conformance-results.json``. Results are gathered
  from ``pytest_runtest_logreport`` only, which under xdist fires on the controller with every
  worker's reports, so metadata must travel in ``user_properties`` (the controller never collects).
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
from pathlib import Path
from typing import Any, NoReturn, TypedDict, cast

import pytest

from k3lab import outputs, paths, settings
from k3lab.conform import evidence
from k3lab.model import checks

HERE = paths.CONFORMANCE  # the suite's folder (resolved by k3lab.paths)
# module file -> (marker, option): opt-in lab modules, collected and skipped unless their option is given
OPT_IN = {"perf.py": ("perf", "--perf"), "accuracy.py": ("accuracy", "--accuracy"),
          "longreq.py": ("long_requests", "--long-requests"), "aisperf.py": ("aisbench_perf", "--aisbench-perf"),
          "kvv.py": ("kvv", "--kvv")}
RESULTS = "conformance-results.json"
_PARAM_NODE = ("node", "api", "engine")  # conftest parametrizes these per node
NA = "conformance.na"  # the user property that carries a skip's reason id


MARKER = ("conformance(area=None, id=None, must=None, remedy=None): conformance metadata of a check "
          "(JUnit properties; k3lab checks lists them)")


def skip(reason: str, message: str) -> NoReturn:
    """Skip the running check because ``reason`` (an id of k3lab.model.checks.NA_REASONS); ``message`` says
    it for people. The id, not the text, is what a gate policy matches: reword the message freely. A
    plain pytest skip underneath, so its report and text stay pytest's; the id rides on the exception."""
    __tracebackhide__ = True  # the skip's location is the check's line, not this one
    exc = pytest.skip.Exception(message)
    exc.na_reason = checks.na_reason(reason).id  # type: ignore[attr-defined]
    raise exc


def declared(*owners: Any) -> dict[str, str]:
    """The ``conformance`` marks of ``owners`` (farthest first, e.g. module then function), merged with
    the nearer one winning key by key: what the plugin reads from an item, readable without pytest
    collecting anything (the policy's tests list the suite's check ids this way)."""
    meta: dict[str, str] = {}
    for owner in owners:
        marks = getattr(owner, "pytestmark", [])
        for decl in marks if isinstance(marks, list) else [marks]:
            mark = cast(pytest.Mark, getattr(decl, "mark", decl))  # a module's pytestmark may be a MarkDecorator
            if mark.name == "conformance":
                meta.update(mark.kwargs)
    return meta


# ------------------------------------------------------------------------------------ options


def pytest_addoption(parser):
    parser.getgroup("k3lab").addoption("--run-dir", default=None,
                                       help="run directory of a deployment that is up (conformance)")
    parser.getgroup("k3lab").addoption(
        "--hardware-stage", action="store_true", default=False,
        help="run as the lab's hardware stage, a gate before any engine starts: stop at the first failures "
             "(the cross-node pings, minutes on hardware, run last and only while every other check passed)")
    group = parser.getgroup("k3lab-bench", "k3lab performance and accuracy")
    group.addoption("--perf", action="store_true", default=False, help="run conformance/perf.py (vllm bench serve)")
    group.addoption("--accuracy", action="store_true", default=False, help="run conformance/accuracy.py (AISBench)")
    group.addoption("--long-requests", action="store_true", default=False,
                    help="run conformance/longreq.py (K3.1 §5.2.2: long requests through the entrypoint)")
    group.addoption("--long-request-tokens", type=int, default=None, metavar="N",
                    help="prompt tokens per long request (default: max_model_len minus the output tokens)")
    group.addoption("--long-request-output", type=int, default=None, metavar="N",
                    help="output tokens per long request (default 16)")
    group.addoption("--long-request-concurrency", type=int, default=1, metavar="N",
                    help="long requests sent at once (default 1)")
    group.addoption("--aisbench-perf", action="store_true", default=False,
                    help="run conformance/aisperf.py (K3 guide §8.4: AISBench through aisbench_test.py)")
    group.addoption("--aisbench-tools", default=None, metavar="DIR",
                    help="checkout of aisbench_auto_tools_prefix (aisbench_test.py) on the load-generator host")
    group.addoption("--aisbench-perf-baseline", default=None, metavar="FILE",
                    help="per-workload AISBench perf baseline JSON (default fixtures/baselines/<scenario>-aisbench.json)")
    group.addoption("--kvv", action="store_true", default=False,
                    help="run conformance/kvv.py (K3 guide §7: the Kimi K3 evaluation toolkit's accuracy runs)")
    group.addoption("--kvv-toolkit", default=None, metavar="DIR",
                    help="<KIMI_K3_EVALUATION_TOOLKIT>: the toolkit's directory on the load-generator host")
    group.addoption("--kvv-python", default="python", metavar="PYTHON",
                    help="interpreter of the toolkit's environment (Python >= 3.12 with inspect_ai; default python)")
    group.addoption("--kvv-baseline", default=None, metavar="FILE",
                    help='JSON {task: score} the kvv scores are gated against (e.g. {"ocrbench": 0.89})')
    group.addoption("--bench-down-grace", type=float, default=300.0, metavar="SECONDS",
                    help="stop a benchmark run on the kit host once an API has failed /health this long (default 300)")
    group.addoption("--bench-node", default=None, metavar="NODE",
                    help="run the load generator inside NODE's container (docker exec) instead of on the kit host")
    group.addoption("--bench-tokenizer", default=None, metavar="PATH",
                    help="tokenizer directory for vllm bench serve (default: the plan's model path)")
    group.addoption("--perf-baseline", default=None, metavar="FILE",
                    help="baseline JSON (default fixtures/baselines/<scenario>.json)")
    group.addoption("--perf-threshold", type=float, default=None,
                    help="throughput >= threshold*baseline, latency <= baseline/threshold "
                         "(default: the baseline file's threshold, else 0.97)")
    group.addoption("--acc-tolerance", type=float, default=1.0,
                    help="accuracy must lie within +/- this many points of the guide's figure (default 1.0)")
    group.addoption("--aisbench-task", action="append", default=[], metavar="DATASET=TASK",
                    help="AISBench dataset task per dataset, e.g. mmmu_pro=mmmu_pro_options10_cot_gen")


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", "perf: performance check, runs only with --perf")
    config.addinivalue_line("markers", "accuracy: accuracy check, runs only with --accuracy")
    config.addinivalue_line("markers", "long_requests: long-request check, runs only with --long-requests")
    config.addinivalue_line("markers", "aisbench_perf: AISBench performance check, runs only with --aisbench-perf")
    config.addinivalue_line("markers", "kvv: K3 evaluation toolkit accuracy check, runs only with --kvv")
    if not hasattr(config, "workerinput"):  # xdist workers report; only the controller writes
        config.pluginmanager.register(_Recorder(config), "k3lab-conformance-recorder")


def pytest_collect_file(file_path, parent):
    """perf.py / accuracy.py do not match python_files; collect them unless named on the command line."""
    if file_path.parent.resolve() == HERE and file_path.name in OPT_IN and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


# ----------------------------------------------------------------------------------- metadata


def metadata(item) -> dict[str, str]:
    meta: dict[str, str] = {}
    for mark in reversed(list(item.iter_markers("conformance"))):  # nearest last: function over module
        meta.update(mark.kwargs)
    stem = Path(str(getattr(item, "path", "") or "other")).stem
    area = str(meta.get("area") or (stem[5:] if stem.startswith("test_") else stem))
    name = getattr(item, "originalname", None) or item.name
    out = {"conformance.area": area, "conformance.id": str(meta.get("id") or f"{area}.{name}"),
           "conformance.must": str(meta.get("must", ""))}
    node = _node_of(item)
    if node:
        out["conformance.node"] = node
    return out


def _node_of(item) -> str | None:
    params = getattr(getattr(item, "callspec", None), "params", {})
    for key in _PARAM_NODE:
        value = params.get(key)
        if value is None:
            continue
        owner = getattr(value, "node", None)  # ApiEndpoint / Process name their node
        return owner if isinstance(owner, str) else getattr(value, "name", None)
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        have = {k for k, _ in item.user_properties}
        item.user_properties.extend((k, v) for k, v in metadata(item).items() if k not in have)
        for marker, option in OPT_IN.values():
            if item.get_closest_marker(marker) and not config.getoption(option):
                item.add_marker(pytest.mark.skip(reason=f"{marker} checks not requested (pass {option})"))
                item.user_properties.append((NA, "not-requested"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Before pytest builds the report from user_properties: add the failure's evidence."""
    excinfo = call.excinfo
    if excinfo is not None and getattr(excinfo.value, "na_reason", None):
        item.user_properties.append((NA, excinfo.value.na_reason))
        return None
    if excinfo is None or excinfo.errisinstance((pytest.skip.Exception, pytest.xfail.Exception)):
        return None
    if any(k == "kind" for k, _ in item.user_properties):
        return None  # a previous phase already classified it
    item.user_properties.extend(evidence.properties(excinfo.value, getattr(item, "module", None)))
    return None


# ------------------------------------------------------------------------------------ results


def _short(report) -> str:
    lr = report.longrepr
    if lr is None:
        return ""
    if isinstance(lr, tuple):  # skip: (path, line, reason)
        return str(lr[2]).removeprefix("Skipped: ")
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        return evidence.strip_prefix(crash.message)
    lines = str(lr).strip().splitlines()
    return lines[-1] if lines else ""


class _Folded(TypedDict):
    """A check's setup, call and teardown reports folded together, while the session runs."""

    nodeid: str
    outcome: str
    duration: float
    properties: dict[str, str]  # its user properties (conformance.*, evidence)
    message: str  # the first failure's (or skip's) short message


class ResultJson(TypedDict):
    """A row of conformance-results.json as written (read back as k3lab.model.runs.ResultRow)."""

    nodeid: str
    area: str
    id: str | None
    must: str
    node: str | None
    param: str | None
    outcome: str
    na_reason: str | None  # a skip's reason id (k3lab.model.checks.NA_REASONS)
    duration: float
    properties: dict[str, str]
    message: str


class ResultsJson(TypedDict):
    """conformance-results.json as written (read back as k3lab.model.runs.Results)."""

    schema: int
    exitstatus: int
    started: str
    finished: str
    versions: dict[str, str]
    counts: dict[str, int]  # outcome -> rows
    collected: list[str] | None
    deselected: int
    tests: list[ResultJson]


class _Recorder:
    """Folds the setup/call/teardown reports of each test into one result row."""

    def __init__(self, config):
        self.config = config
        self.tests: dict[str, _Folded] = {}
        self.started = _dt.datetime.now(_dt.timezone.utc)
        # what should have run: the gate counts a collected check without a result as incomplete
        self.collected: list[str] | None = None
        self.deselected = 0

    def pytest_collection_finish(self, session):
        if session.items:  # under xdist the controller collects nothing: the workers tell it below
            self.collected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected = list(ids)  # every worker collects the same checks

    def pytest_deselected(self, items):
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report):
        row = self.tests.setdefault(report.nodeid, _Folded(nodeid=report.nodeid, outcome="passed", duration=0.0,
                                                           properties={}, message=""))
        row["duration"] += getattr(report, "duration", 0.0) or 0.0
        row["properties"].update({str(k): str(v) for k, v in report.user_properties})
        outcome = _outcome(report)
        if outcome and (row["outcome"] == "passed" or report.when == "call"):
            row["outcome"] = outcome
            row["message"] = row["message"] or _short(report)
        elif report.failed and report.when == "teardown":
            row["message"] = row["message"] or _short(report)

    def pytest_collectreport(self, report):
        if report.failed:  # an import error must not leave an empty, green-looking run
            self.tests[report.nodeid or "<collection>"] = _Folded(
                nodeid=report.nodeid or "<collection>", outcome="error", duration=0.0,
                properties={"kind": "kit"}, message=_short(report))

    def pytest_sessionfinish(self, session, exitstatus):
        run_dir = self.config.getoption("--run-dir", default=None) or settings.current().run_dir
        if not run_dir or not Path(run_dir).is_dir():
            return
        rows = [_finish(r) for r in self.tests.values()]
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        doc = ResultsJson(schema=1, exitstatus=int(exitstatus), started=self.started.isoformat(timespec="seconds"),
                          finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                          versions=_versions(), counts=counts, collected=self.collected,
                          deselected=self.deselected, tests=rows)
        path = Path(run_dir) / RESULTS
        outputs.write_run_file(path, json.dumps(doc, indent=2) + "\n")  # atomic: never a half-written file for the report


def _outcome(report) -> str | None:
    """None: this phase does not change a passing outcome."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "failed"
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    if report.failed:
        return "error"
    return None


def _finish(row: _Folded) -> ResultJson:
    props = row["properties"]
    param = checks.param_of(row["nodeid"])  # also under --dist loadgroup, whose node ids end in @<group>
    return ResultJson(nodeid=row["nodeid"], area=props.get("conformance.area", "other"),
                      id=props.get("conformance.id"), must=props.get("conformance.must", ""),
                      node=props.get("conformance.node"), param=param, outcome=row["outcome"],
                      na_reason=props.get(NA) if row["outcome"] in ("skipped", "xfailed") else None,
                      duration=round(row["duration"], 3), properties=props, message=row["message"])


def _versions() -> dict[str, str]:
    try:
        from k3lab import __version__ as k3lab
    except ImportError:  # plugin used outside the kit's tree
        k3lab = "unknown"
    return {"k3lab": k3lab, "python": platform.python_version(), "pytest": pytest.__version__}
