"""Acceptance reports from a fake run directory, and the conformance pytest plugin (via pytester)."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from k3lab import settings
from k3lab.model import siminventory
from k3lab.render import artefacts as render
from k3lab.reports import report

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = "<img src=x onerror=alert(1)>"
QUIET = ("-p", "no:cacheprovider", "-p", "no:benchmark")  # inner runs: no cache dir, no benchmark-under-xdist noise
SECRET = "sk-k3lab-SECRET&<42>"


def _row(nodeid, area, node, outcome, props=None, message=""):
    return {"nodeid": nodeid, "area": area, "node": node, "param": node, "outcome": outcome, "duration": 0.5,
            "properties": props or {}, "message": message}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    plan = json.loads(render.plan_json(render.build("a3_pd_1m", siminventory.default("a3_pd_1m")).plan))
    plan["nodes"][3]["name"] = HOSTILE  # p3 renamed by a hostile inventory
    plan["inventory"] = f"lab-{HOSTILE}"
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "run-state.json").write_text(json.dumps({"run": "a3_pd_1m-20260112", "status": "down"}))
    names = [n["name"] for n in plan["nodes"]]
    tests = []
    for name in names:
        tests.append(_row(f"conformance/test_containers.py::test_container_running[{name}]", "containers", name,
                          "passed"))
        failing = name in ("p1", HOSTILE)
        props = {"kind": "environment", "what": "NPU health", "expected": "OK on all 8 chips",
                 "actual": f"chip 3 Alarm (token {SECRET})", "where": f"{name}: npu-smi info",
                 "cause": "a chip raised an alarm", "remedy": "reset the NPU with npu-smi set -t reset"}
        tests.append(_row(f"conformance/test_npu.py::test_npu_smi_devices_healthy[{name}]", "npu", name,
                          "failed" if failing else "passed", props if failing else {},
                          "NPU health: expected OK" if failing else ""))
    tests.append(_row("conformance/test_service.py::test_models[d0:8000]", "service", "d0", "error",
                      {"kind": "product"}, "ConnectionError: refused"))
    tests.append(_row("conformance/test_npu.py::test_hccn_tls_consistent", "npu", None, "passed"))
    tests.append(_row("conformance/perf.py::test_bench_within_baseline", "perf", None, "skipped", {},
                      "perf checks not requested (pass --perf)"))
    (tmp_path / "conformance-results.json").write_text(json.dumps({"exitstatus": 1, "tests": tests}))
    for node, files in {"p1": ["inspect.json", "engine.log"], "d0": ["inspect.json"]}.items():
        (tmp_path / "evidence" / node).mkdir(parents=True)
        for f in files:
            (tmp_path / "evidence" / node / f).write_text("{}")
    (tmp_path / "evidence" / "metrics-p0-8000.prom").write_text("# HELP\n")
    return tmp_path


class Tree(HTMLParser):
    """Records start tags with attributes and checks that every non-void element is closed in order."""
    VOID = {"meta", "br", "path", "rect", "img", "link", "input", "hr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def parse(text: str) -> Tree:
    tree = Tree()
    tree.feed(text)
    tree.close()
    return tree


# ------------------------------------------------------------------------------------------ summary


def test_summary_verdict_failures_deviations_links(run_dir):
    paths = report.write_reports(run_dir)
    text = paths["summary"].read_text()
    assert text.startswith("# k3lab acceptance: a3_pd_1m: FAIL")
    assert "**FAIL**" in text and "1 errors" in text and "2 failed" in text and "1 skipped" in text
    assert "quay.io/ascend/vllm-ascend:kimi-k3.1-pro-a3" in text and "K3.1 Pro §5.2 (A3)" in text
    assert "- remedy: reset the NPU with npu-smi set -t reset" in text
    assert "- kind: **environment**" in text
    assert "- actual: ConnectionError: refused" in text  # a plain error: what was seen is its message
    assert "| npu | p1 ✗ | 0 | 1 | 0 |" in text
    for dev in json.loads((run_dir / "plan.json").read_text())["deviations"]:
        assert f"- {dev['id']} (" in text
    assert "[engine.log](evidence/p1/engine.log)" in text
    assert "[metrics-p0-8000.prom](evidence/metrics-p0-8000.prom)" in text
    assert HOSTILE not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert paths.keys() == {"summary", "html"}  # no junit.xml in this run dir


def test_verdicts(run_dir):
    results = json.loads((run_dir / "conformance-results.json").read_text())
    for t in results["tests"]:
        t["outcome"] = "passed" if t["outcome"] in ("failed", "error") else t["outcome"]
    results["exitstatus"] = 0
    (run_dir / "conformance-results.json").write_text(json.dumps(results))
    assert report.load(run_dir).verdict == "PASS"
    results["exitstatus"] = 2  # interrupted
    (run_dir / "conformance-results.json").write_text(json.dumps(results))
    assert report.load(run_dir).verdict == "INCOMPLETE"
    (run_dir / "conformance-results.json").write_text(json.dumps({"exitstatus": 5, "tests": []}))
    assert report.load(run_dir).verdict == "INCOMPLETE"


def test_a_run_without_results_has_none_and_its_junit_is_not_read(run_dir):
    """junit.xml is output only (#31): a run folder without conformance-results.json has no results, whatever
    junit.xml says; the gate's verdict is INCOMPLETE and the junit.xml is kept as it is."""
    (run_dir / "conformance-results.json").unlink()
    (run_dir / "junit.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="k3lab.conform.test_npu" name="test_npu_smi_devices_healthy[p0]" time="1.0">'
        '<properties><property name="conformance.area" value="npu"/></properties></testcase>'
        '</testsuite></testsuites>')
    run = report.load(run_dir)
    assert run.tests == [] and run.source == report.NO_RESULTS + report.JUNIT_NOT_READ
    assert run.verdict == "INCOMPLETE"
    paths = report.write_reports(run_dir)
    assert "junit.xml is output only, not read" in paths["summary"].read_text()
    assert paths["junit"].read_text().startswith("<?xml")  # kept as is


# --------------------------------------------------------------------------------------------- HTML


def test_html_well_formed_picture_and_matrix(run_dir):
    text = report.write_reports(run_dir)["html"].read_text()
    tree = parse(text)
    assert not tree.errors and not tree.stack, tree.errors or tree.stack
    tags = [t for t, _ in tree.tags]
    assert tags.count("svg") == 1
    assert "script" not in tags and "img" not in tags and "link" not in tags
    assert not any(a.get("src") or a.get("onerror") for _, a in tree.tags)
    plan = json.loads((run_dir / "plan.json").read_text())
    nodes = {a["data-node"]: a["class"] for t, a in tree.tags if t == "g" and "data-node" in a}
    assert set(nodes) == {n["name"] for n in plan["nodes"]}  # one element per node, hostile name as data
    assert "fail" in nodes["p1"].split() and "fail" in nodes[HOSTILE].split() and "fail" not in nodes["p0"].split()
    cells = [a["class"].split()[1] for t, a in tree.tags if t == "td" and "cell" in a.get("class", "")]
    assert {"pass", "fail", "skip", "none"} <= set(cells)
    # readable at any size: the matrix scrolls inside its own box, area headers run vertically
    assert ("div", {"class": "matrix-wrap"}) in tree.tags and ("th", {"class": "area"}) in tree.tags
    assert f"<th>{HOSTILE}</th>" not in text  # the hostile node name is a row header, escaped
    links = {a["href"] for t, a in tree.tags if t == "a"}
    assert "evidence/p1/engine.log" in links and all(not h.startswith(("http", "javascript")) for h in links)
    assert "KV transfer" in text and "Proxy" in text


def test_html_self_contained(run_dir):
    text = report.write_reports(run_dir)["html"].read_text()
    assert "<style>" in text and "http://www.w3.org/2000/svg" in text
    tree = parse(text)
    external = [a for t, a in tree.tags if t in ("link", "script", "img", "iframe")]
    assert not external


# ------------------------------------------------------------------------------------- redaction


def test_api_key_redacted_everywhere(run_dir):
    with settings.patched(api_key=SECRET):  # the key as $K3LAB_API_KEY gives it, once the settings are read
        paths = report.write_reports(run_dir)
    for path in (paths["summary"], paths["html"]):
        text = path.read_text()
        assert SECRET not in text
        assert "sk-k3lab-SECRET&amp;&lt;42&gt;" not in text  # nor its escaped form
        assert "&lt;redacted&gt;" in text


def test_cli(run_dir, capsys):
    from k3lab.cli import main as cli

    assert cli.main(["report", str(run_dir)]) == 3  # INCOMPLETE (no versions.json): exit by the verdict
    assert (run_dir / "summary.md").is_file() and (run_dir / "report.html").is_file()
    out = capsys.readouterr().out
    assert (run_dir / "gate.json").is_file() and "summary:" in out and "\nINCOMPLETE a3_pd_1m: 2 reason(s)" in out
    assert cli.main(["report"]) == 2 and cli.main(["report", str(run_dir / "nope")]) == 2


# --------------------------------------------------------------------------- plugin (pytester)

DEMO = '''
import pytest
from k3lab.conform.evidence import check, fail

pytestmark = pytest.mark.conformance(area="demo", must="Every node MUST answer 42")


class Node:
    def __init__(self, name):
        self.name = name


@pytest.mark.parametrize("node", [Node("p0"), Node("p1")], ids=["p0", "p1"])
def test_answer(node):
    answer = 42 if node.name == "p0" else 41
    check(answer == 42, "answer", 42, answer, f"{node.name}:/answer", "off by one", "add one", kind="environment")


def test_plain_assert():
    assert 1 == 2, "plain"


@pytest.mark.conformance(id="demo.custom", must="It MUST pass")
def test_custom_id():
    pass


def test_broken_check():
    undefined_name  # noqa: F821


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass


@pytest.mark.perf
def test_perf_opt_in():
    pass
'''

ENV_MODULE = '''
KIND = "environment"


def test_link():
    assert False, "link down"
'''


@pytest.fixture
def demo(pytester, monkeypatch):
    monkeypatch.setenv("K3LAB_RUN_DIR", str(pytester.path))
    monkeypatch.delenv("K3LAB_API_KEY", raising=False)
    pytester.makeconftest('pytest_plugins = ["k3lab.conform.plugin"]\n')
    pytester.makepyfile(test_demo=DEMO, test_env=ENV_MODULE)
    return pytester


def _junit(path: Path) -> dict[str, dict[str, str]]:
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        cases[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    return cases


def test_plugin_metadata_evidence_and_results(demo):
    result = demo.runpytest("--junitxml=junit.xml", *QUIET)
    result.assert_outcomes(passed=2, failed=4, skipped=2)
    junit = _junit(demo.path / "junit.xml")
    p1 = junit["test_answer[p1]"]
    assert p1["conformance.area"] == "demo" and p1["conformance.node"] == "p1"
    assert p1["conformance.id"] == "demo.test_answer" and p1["conformance.must"] == "Every node MUST answer 42"
    assert (p1["expected"], p1["actual"], p1["where"], p1["remedy"], p1["kind"]) == (
        "42", "41", "p1:/answer", "add one", "environment")
    assert junit["test_plain_assert"]["kind"] == "product"
    assert junit["test_link"]["kind"] == "environment" and junit["test_link"]["conformance.area"] == "env"
    assert junit["test_broken_check"]["kind"] == "kit"
    assert junit["test_custom_id"]["conformance.id"] == "demo.custom"
    assert "kind" not in junit["test_answer[p0]"]

    doc = json.loads((demo.path / "conformance-results.json").read_text())
    rows = {r["nodeid"].split("::")[1]: r for r in doc["tests"]}
    assert doc["exitstatus"] == 1 and doc["counts"] == {"passed": 2, "failed": 4, "skipped": 2}
    assert doc["versions"]["python"] and doc["versions"]["pytest"]
    row = rows["test_answer[p1]"]
    assert (row["area"], row["node"], row["param"], row["outcome"]) == ("demo", "p1", "p1", "failed")
    assert row["message"].startswith("answer: expected 42, got 41 at p1:/answer.")
    assert "Remedy: add one." in row["message"]
    assert row["properties"]["remedy"] == "add one" and row["duration"] >= 0
    assert rows["test_perf_opt_in"]["outcome"] == "skipped"
    assert rows["test_perf_opt_in"]["message"] == "perf checks not requested (pass --perf)"
    assert rows["test_answer[p0]"]["outcome"] == "passed" and rows["test_answer[p0]"]["node"] == "p0"


def test_plugin_opt_in_option(demo):
    demo.runpytest("--perf", "-k", "perf_opt_in", *QUIET).assert_outcomes(passed=1)


def test_plugin_results_feed_the_report(demo):
    demo.runpytest(*QUIET)
    run = report.load(demo.path)
    assert run.source == "conformance-results.json" and run.verdict == "FAIL"
    assert {t["area"] for t in run.tests} == {"demo", "env"}


def test_plugin_collects_the_opt_in_modules(pytester):
    """perf.py / accuracy.py / longreq.py / aisperf.py / kvv.py do not match python_files: the plugin collects them, skipped by default."""
    result = pytester.runpytest(str(ROOT / "conformance"), "-p", "k3lab.conform.plugin", *QUIET,
                                f"--ignore-glob={ROOT / 'conformance' / 'test_*.py'}", "-q", "-rs")
    result.assert_outcomes(skipped=13)  # every test of the five modules (some parametrized), none run
    out = result.stdout.str()
    # each check's own conformance(id=...) mark gives its skip a line number (pytest folds only unmarked ones)
    assert re.search(r"perf\.py(:\d+)?: perf checks not requested \(pass --perf\)", out)
    assert "accuracy checks not requested (pass --accuracy)" in out
    assert re.search(r"longreq\.py(:\d+)?: long_requests checks not requested \(pass --long-requests\)", out)
    assert "aisbench_perf checks not requested (pass --aisbench-perf)" in out
    assert "kvv checks not requested (pass --kvv)" in out


def test_evidence_message_kind_and_redaction(monkeypatch):
    from k3lab.conform import evidence

    monkeypatch.setenv("K3LAB_API_KEY", "sk-in-a-header")
    with pytest.raises(AssertionError) as info:
        evidence.check(False, "status", 200, "401 with Bearer sk-in-a-header", "proxy /v1/models",
                       "the key is wrong", "export the lab's key as K3LAB_API_KEY", kind="environment")
    msg = str(info.value)
    assert "\n" not in msg and "sk-in-a-header" not in msg and "<redacted>" in msg
    assert msg.startswith("status: expected 200, got 401") and msg.endswith("[environment]")
    assert dict(evidence.properties(info.value, None))["actual"] == "401 with Bearer <redacted>"
    evidence.check(True, "x", 1, 2, "nowhere")  # no-op
    with pytest.raises(ValueError, match="kind must be one of"):
        evidence.fail("x", 1, 2, "here", kind="network")


# ------------------------------------------------------------------------------- diagnosis section

OOM = ("(EngineCore_DP0 pid=7) ERROR 01-12 10:00:05 [core.py:719] RuntimeError: NPU out of memory. Tried to allocate "
       f"2.00 GiB (NPU 0; 60.96 GiB total capacity) {HOSTILE}\n")


def test_failed_run_reports_carry_the_diagnosis(run_dir):
    (run_dir / "evidence" / "p1" / "engine.log").write_text(OOM)
    (run_dir / "junit.xml").write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1">'
                                       '<testcase classname="conformance.test_npu" name="test_x"/></testsuite></testsuites>')
    for _ in range(2):  # written again (a second report run) the suite is replaced, not repeated
        report.write_reports(run_dir)
    summary = (run_dir / "summary.md").read_text()
    assert "## Diagnosis" in summary and "**npu-oom** on **p1**: NPU out of memory" in summary
    assert "evidence/p1/engine.log:1" in summary and HOSTILE not in summary
    page = (run_dir / "report.html").read_text()
    assert "<h2>Diagnosis</h2>" in page and "npu-oom" in page and HOSTILE not in page
    suites = [s for s in ET.parse(run_dir / "junit.xml").getroot() if s.get("name") == "k3lab.diagnosis"]
    assert len(suites) == 1
    case = suites[0].find("testcase")
    assert case.get("name") == "npu-oom@p1" and "Lower --gpu-memory-utilization" in case.find("failure").get("message")
    pytest_cases = [c.get("name") for s in ET.parse(run_dir / "junit.xml").getroot() if s.get("name") == "pytest"
                    for c in s.iter("testcase")]
    assert pytest_cases == ["test_x"]  # the suite's own cases are kept


def test_failed_run_without_a_known_cause_says_where_it_looked(run_dir):
    report.write_reports(run_dir)
    summary = (run_dir / "summary.md").read_text()
    assert "## Diagnosis" in summary and "No known cause matched in 1 file(s): evidence/p1/engine.log." in summary


def test_passing_run_has_no_diagnosis(run_dir):
    doc = json.loads((run_dir / "conformance-results.json").read_text())
    doc["tests"] = [t for t in doc["tests"] if t["outcome"] in ("passed", "skipped")]
    doc["exitstatus"] = 0
    (run_dir / "conformance-results.json").write_text(json.dumps(doc))
    (run_dir / "evidence" / "p1" / "engine.log").write_text(OOM)
    report.write_reports(run_dir)
    assert "Diagnosis" not in (run_dir / "summary.md").read_text()


def test_a_plan_with_a_field_of_the_wrong_type_is_named_and_left_out(tmp_path):
    """#31: plan.json 'nodes' a string was an AttributeError (exit 4) in the report; it is read through the one
    plan reader now, named with its field, and the report says what it left out."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed", run)
    plan = json.loads((run / "plan.json").read_text())
    plan["nodes"] = "node0"
    (run / "plan.json").write_text(json.dumps(plan))
    loaded = report.load(run)
    assert loaded.plan == {} and any("plan.json: field nodes" in p for p in loaded.problems)
    assert "left out, unreadable" in report.summary_md(loaded)
