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

RUN = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"
TOOL = "conformance/test_service.py::test_tool_call"


def test_static_only_release_passes_and_writes_every_report(tmp_path, capsys):
    assert main(["release", "--static-only", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "release.json").read_text())
    assert doc["overall"] == "PASS" and len(doc["scenarios"]) == 12
    assert all((tmp_path / f).is_file() for f in ("release.md", "release.html", "junit.xml"))
    assert "release PASS (static only: render, preflight and golden; no deployment was checked): 12 scenarios" \
        in capsys.readouterr().out


@pytest.fixture
def live(monkeypatch, tmp_path):
    """Live cycles replaced by copies of a recorded run; ``edits`` change one scenario's results."""
    edits: dict[str, dict] = {}

    def cycle(self, sid, inventory, inject):
        dst = self.out / "runs" / sid / "run"
        shutil.copytree(RUN, dst)
        plan = json.loads((dst / "plan.json").read_text())  # the recorded run stands in for sid's
        (dst / "plan.json").write_text(json.dumps({**plan, "scenario": sid}))
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


@pytest.fixture
def arp_limit(monkeypatch, tmp_path):
    """The host's ARP table limit (gc_thresh3) as a file the test writes."""
    from k3lab.launch.simimage import neighbours

    path = tmp_path / "gc_thresh3"
    monkeypatch.setattr(neighbours, "GC_THRESH3", path)
    return path


def _slots_seen(monkeypatch):
    seen = {}
    original = release.Live.cycle

    def cycle(self, sid, inventory, inject):
        seen.update(jobs=self.jobs, extra=self.extra)
        return original(self, sid, inventory, inject)

    monkeypatch.setattr(release.Live, "cycle", cycle)
    return seen


def test_default_slots_shrink_to_what_the_arp_table_holds(live, arp_limit, monkeypatch, tmp_path):
    arp_limit.write_text("400\n")  # below the need of k3_a3_pd + a3_pd_pooled + a5_pd_pooled at once (486)
    seen = _slots_seen(monkeypatch)
    sids = ["k3_a3_pd", "a3_pd_pooled", "a5_pd_pooled"]
    doc = release.run_release(sids, policy.load(), tmp_path / "r", live=True)
    assert doc["jobs"] == seen["jobs"] == 2 and seen["extra"] == ["-n", "0"]
    [warning] = doc["host"]["warnings"]
    assert warning.startswith("3 cycles at a time reduced to 2:") and "gc_thresh3=16384" in warning
    assert "Host warning: 3 cycles at a time reduced to 2" in (tmp_path / "r" / "release.md").read_text()
    arp_limit.write_text("16384\n")
    doc = release.run_release(sids, policy.load(), tmp_path / "s", live=True)
    assert doc["jobs"] == 3 and doc["host"]["warnings"] == []


def test_explicit_jobs_and_pytest_workers_are_kept(live, arp_limit, monkeypatch, tmp_path):
    arp_limit.write_text("400\n")
    seen = _slots_seen(monkeypatch)
    doc = release.run_release(["k3_a3_pd", "a3_pd_pooled", "a5_pd_pooled"], policy.load(), tmp_path / "r", jobs=3,
                              live=True, pytest_extra=["-n", "2"])
    assert doc["jobs"] == seen["jobs"] == 3 and seen["extra"] == ["-n", "2"]
    assert doc["host"]["warnings"][0].startswith("the simulated networks need up to 486 learnt ARP entries")


def test_every_slot_gets_private_networks_of_its_own():
    import ipaddress

    envs = [release._slot_env(s) for s in range(1, 33)]
    for env in envs:
        assert all(ipaddress.ip_network(v).is_private for v in env.values())
    assert len({tuple(e.values()) for e in envs}) == 32


@pytest.mark.parametrize("jobs", ["0", "-1", "33"])
def test_jobs_out_of_range_is_a_usage_error(jobs, tmp_path, capsys):
    assert main(["release", "--static-only", "--jobs", jobs, "--out", str(tmp_path)]) == 2
    assert "--jobs takes 1 to 32" in capsys.readouterr().err


def test_a_live_release_names_its_runs_where_they_end_up_and_keeps_them_if_it_fails(live, tmp_path, monkeypatch):
    out = tmp_path / "r"
    doc = release.run_release(["k3_a3_mixed"], policy.load(), out, live=True)
    run_dir = doc["scenarios"][0]["run_dir"]
    assert run_dir.startswith(str(out.absolute()) + "/") and Path(run_dir).is_dir()  # not the staging directory's
    from k3lab.reports import releasereport

    def broken(*a, **k):
        raise RuntimeError("crashed after the cycles")

    monkeypatch.setattr(releasereport, "write_all", broken)
    with pytest.raises(RuntimeError):
        release.run_release(["k3_a3_mixed"], policy.load(), out, live=True, force=True)
    assert Path(run_dir).is_dir()  # the previous release is whole
    [kept] = [p for p in tmp_path.iterdir() if p.name.startswith(".r.k3lab-")]
    assert (kept / "runs" / "k3_a3_mixed" / "run" / "plan.json").is_file()  # hours of evidence are not deleted
