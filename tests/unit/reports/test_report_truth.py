"""Reports tell the whole truth: skipped checks with their reasons, one verdict for one run everywhere."""
from __future__ import annotations

import json

from k3lab.cli import main as cli
from k3lab.model import policy
from k3lab.reports import gate, report, runreports
from k3lab.tools import release
from tests.unit.reports.test_report import run_dir  # noqa: F401 - the fixture: a run with failures, errors and a skip


def test_the_same_run_shows_the_same_verdict_in_its_report_in_compare_and_in_release(run_dir, capsys):  # noqa: F811
    paths = runreports.rebuild(run_dir)
    judged = json.loads(paths["gate"].read_text())["verdict"]
    assert judged == "INCOMPLETE"  # environment failures: the lab is broken, the candidate not judged
    summary = paths["summary"].read_text()
    assert summary.startswith(f"# k3lab acceptance: a3_pd_1m: {judged}") and f"| Verdict | **{judged}**" in summary
    assert "## Why not PASS" in summary
    assert f'class="verdict {judged}"' in paths["html"].read_text()
    assert cli.main(["compare", str(run_dir), str(run_dir), "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)["scenarios"][0]
    assert row["verdict_a"] == row["verdict_b"] == judged
    assert release._verdict(policy.load(), "a3_pd_1m", [], {"run_dir": str(run_dir)}, True).verdict == judged
    assert gate.evaluate_run(policy.load().for_scenario("a3_pd_1m"), run_dir).verdict == judged


def test_skipped_checks_are_listed_with_their_reasons(run_dir):  # noqa: F811
    runreports.rebuild(run_dir)
    summary = (run_dir / "summary.md").read_text()
    assert "## Skipped and not applicable" in summary
    assert "| conformance/perf.py::test\\_bench\\_within\\_baseline |" in summary or \
        "test_bench_within_baseline" in summary
    assert "perf checks not requested (pass --perf)" in summary
    rows = report.skipped(report.load(run_dir))
    assert [r["reason"] for r in rows] == ["perf checks not requested (pass --perf)"]
    assert "Skipped and not applicable" in (run_dir / "report.html").read_text()


def test_a_static_only_release_says_so_and_its_junit_has_times(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    assert cli.main(["release", "--static-only", "-s", "a3_pd", "--out", str(tmp_path / "r")]) == 0
    assert "release PASS (static only" in capsys.readouterr().out
    md = (tmp_path / "r" / "release.md").read_text()
    assert md.startswith("# k3lab release: PASS (static only)") and "no deployment was brought up" in md
    assert "## Versions read from the nodes" not in md and "## Warnings" not in md
    html = (tmp_path / "r" / "release.html").read_text()
    assert "(static only)" in html and "Versions read from the nodes" not in html and "Warnings" not in html
    assert json.loads((tmp_path / "r" / "release.json").read_text())["scope"] == "static-only"
    root = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    cases = root.findall(".//testcase")
    assert cases and all(float(c.get("time")) >= 0 for c in cases) and root.get("time") is not None
    assert all(s.get("time") and s.get("timestamp") for s in root.findall("testsuite"))
