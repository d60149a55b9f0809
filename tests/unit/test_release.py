"""k3lab release without Docker: the static stage, and the verdicts of a release whose live cycles
are stood in by a recorded sim run (fixtures/release) so the gate and report paths run offline."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k3lab.cli.main import main
from k3lab.model import policy
from k3lab.tools import release

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "release" / "run-k3_a3_mixed"
TOOL = "conformance/test_service.py::test_tool_call"


def test_static_only_release_passes_and_writes_every_report(tmp_path, capsys):
    assert main(["release", "--static-only", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "release.json").read_text())
    assert doc["overall"] == "PASS" and len(doc["scenarios"]) == 12
    assert all((tmp_path / f).is_file() for f in ("release.md", "release.html", "junit.xml"))
    assert "release PASS: 12 scenarios" in capsys.readouterr().out


@pytest.fixture
def live(monkeypatch, tmp_path):
    """Live cycles replaced by copies of a recorded run; ``edits`` change one scenario's results."""
    edits: dict[str, dict] = {}

    def cycle(self, sid, inventory, inject):
        dst = self.out / "runs" / sid / "run"
        shutil.copytree(RUN, dst)
        if sid in edits:
            path = dst / "conformance-results.json"
            doc = json.loads(path.read_text())
            for t in doc["tests"]:
                t.update(edits[sid].get(t["nodeid"], {}))
            path.write_text(json.dumps(doc))
        return {"scenario": sid, "exit": 0, "wall_s": 1.0, "run_dir": str(dst), "note": ""}

    monkeypatch.setattr(release.Live, "cycle", cycle)
    monkeypatch.setattr(release, "_build_images", lambda scenarios: None)
    return edits


def test_a_failed_check_in_one_scenario_fails_the_release_naming_both(live, tmp_path):
    live["k3_a3_mixed_toolcall"] = {TOOL: {"outcome": "failed", "message": "called get_weather for a rack question"}}
    sids = ["k3_a3_mixed", "k3_a3_mixed_toolcall"]
    doc = release.run_release(sids, policy.load(), tmp_path, live=True)
    verdicts = {v["scenario"]: v["verdict"] for v in doc["scenarios"]}
    assert doc["overall"] == "FAIL" and verdicts == {"k3_a3_mixed": "PASS", "k3_a3_mixed_toolcall": "FAIL"}
    [v] = [v for v in doc["scenarios"] if v["verdict"] == "FAIL"]
    assert v["reasons"] == [f"k3_a3_mixed_toolcall: {TOOL}: called get_weather for a rack question"]
    assert "k3_a3_mixed_toolcall" in (tmp_path / "release.md").read_text()


def test_a_skipped_blocking_check_makes_the_release_incomplete(live, tmp_path):
    live["k3_a3_mixed"] = {TOOL: {"outcome": "skipped", "message": "engine busy"}}
    doc = release.run_release(["k3_a3_mixed"], policy.load(), tmp_path, live=True)
    assert doc["overall"] == "INCOMPLETE"
    assert "skipped, not a listed not-applicable reason: engine busy" in doc["scenarios"][0]["reasons"][0]
