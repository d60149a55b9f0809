"""The failure catalogue against real, sourced log excerpts; the diagnosis of run and log directories.

tests/fixtures/failure_logs/<cause>/*.log are verbatim excerpts of public threads (sources.yaml names each
one); every cause must be the top diagnosis of each of its excerpts, every signature must match one of
them, and real healthy lines must match nothing. tests/fixtures/failure_logs_heldout/ are excerpts of
other threads the signatures were not written from: the top diagnosis must be right for >= 70% of them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from k3lab.diagnosis import catalogue
from k3lab.diagnosis.engine import diagnose, line_time
from k3lab.errors import InputError

FIX = Path(__file__).resolve().parents[2] / "fixtures"
LOGS = FIX / "failure_logs"
HELDOUT = FIX / "failure_logs_heldout"
CAT = catalogue.load()
EXCERPTS = sorted(p for p in LOGS.glob("*/*.log") if p.parent.name != "healthy")
# the development part of the real corpus (tests/unit/diagnosis/test_triage_corpus.py), <cause>--<thread>.log
CORPUS_DEV = {p: p.name.split("--")[0] for p in sorted((FIX / "triage_corpus" / "dev").glob("*.log"))}


def _cause_of(p: Path) -> str:
    return CORPUS_DEV.get(p, p.parent.name)


def _one(tmp_path: Path, *files: Path, node: str = "n0") -> Path:
    d = tmp_path / "logs" / node
    d.mkdir(parents=True)
    for f in files:
        shutil.copy(f, d / f.name)
    return tmp_path / "logs"


def test_catalogue_holds_twenty_causes_each_with_sources():
    assert len(CAT.causes) >= 20
    for c in CAT.causes:
        assert c.sources and c.remedy and c.explanation, c.id


def test_every_cause_has_real_sourced_excerpts():
    sources = yaml.safe_load((LOGS / "sources.yaml").read_text())
    corpus = yaml.safe_load((FIX / "triage_corpus" / "corpus.yaml").read_text())
    for c in CAT.causes:
        mine = [p for p in EXCERPTS if p.parent.name == c.id] + [p for p, cid in CORPUS_DEV.items() if cid == c.id]
        assert mine, f"{c.id}: no excerpt under tests/fixtures/failure_logs/{c.id}/ nor triage_corpus/dev/"
        for p in mine:
            source = corpus.get(f"dev/{p.name}") if p in CORPUS_DEV else sources.get(f"{c.id}/{p.name}")
            assert (source or {}).get("url"), f"{p}: no source in sources.yaml / corpus.yaml"
    assert {p.parent.name for p in EXCERPTS} <= set(CAT.ids), "excerpts of a cause the catalogue lacks"


@pytest.mark.parametrize("path", EXCERPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_excerpt_is_diagnosed_as_its_cause(tmp_path, path):
    d = diagnose(_one(tmp_path, path))
    assert d.top is not None, f"{path}: nothing matched"
    assert d.top.cause.id == path.parent.name, [f.cause.id for f in d.findings]
    ev = d.top.evidence[0]
    assert ev.node == "n0" and ev.file == f"n0/{path.name}" and ev.line >= 1 and ev.text


def test_every_signature_matches_a_real_excerpt():
    from tests.unit.diagnosis.test_diagnosis_wordings import BUILT  # lines built from upstream source, labelled there

    real = [*EXCERPTS, *CORPUS_DEV]
    text = {c.id: b"".join(p.read_bytes() for p in real if _cause_of(p) == c.id)
            + "\n".join(line for cid, line, _ in BUILT if cid == c.id).encode() for c in CAT.causes}
    # ...and the vLLM-stack lines built in tests/fixtures/upstream_lines/ (each entry names its source)
    for built in sorted((FIX / "upstream_lines").glob("*.yaml")):
        for entry in yaml.safe_load(built.read_text()):
            text[entry["cause"]] += entry["log"].encode()
    for c in CAT.causes:
        for sig in c.signatures:
            assert sig.regex.search(text[c.id]), f"{c.id}: signature {sig.pattern!r} matches none of its excerpts"


def test_real_healthy_lines_match_nothing(tmp_path):
    d = diagnose(_one(tmp_path, *sorted((LOGS / "healthy").glob("*.log"))))
    assert d.findings == [] and len(d.looked) == 3


def test_held_out_excerpts_top_diagnosis_accuracy(tmp_path):
    index = yaml.safe_load((HELDOUT / "heldout.yaml").read_text())
    right = []
    for name, meta in sorted(index.items()):
        d = diagnose(_one(tmp_path / name, HELDOUT / name))
        right.append(bool(d.top) and d.top.cause.id == meta["cause"])
    assert len(index) >= 20
    assert sum(right) / len(right) >= 0.7, f"{sum(right)}/{len(right)}"


def test_a_traceback_cut_inside_its_frames_names_its_last_frame(tmp_path):
    # the dev excerpt of vllm#2418 stops inside the traceback: no exception line, still a failure
    d = diagnose(_one(tmp_path, FIX / "triage_corpus" / "dev" / "kv-cache-insufficient--vllm-2418.log"))
    assert [e.text.strip() for e in d.first_errors] == [
        "Traceback (most recent call last):", 'File "load_llm.py", line 8, in <module>']


def test_the_first_failure_wins_over_what_followed(tmp_path):
    # vllm-ascend #1815: RDMA init fails, then the listen on the HCCL port fails 7 us later
    d = diagnose(_one(tmp_path, LOGS / "npu-network-port-down" / "1.log"))
    assert [f.cause.id for f in d.findings][:2] == ["npu-network-port-down", "hccl-port-in-use"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_root_cause_node_is_the_first_to_fail_not_the_ones_that_timed_out(tmp_path):
    # d1 runs out of memory; p0 and d0 time out on their HCCL links to it later
    oom = (LOGS / "npu-oom" / "1.log").read_text()
    _write(tmp_path / "d1" / "engine.log", f"(EngineCore_DP1 pid=9) ERROR 12-04 10:00:05 [core.py:719] {oom}")
    for node, t in (("p0", "10:02:07"), ("d0", "10:02:06")):
        _write(tmp_path / node / "plog.log", f"[ERROR] HCCL(1,python):2026-12-04-{t}.000.001 [hccl_socket_manager.cc:796] "
               "[1][Wait][LinkEstablish]wait socket establish timeout, role[0] rank[0] timeout[120 s]\n")
    d = diagnose(tmp_path)
    assert d.top.cause.id == "npu-oom" and d.top.node == "d1"
    link = next(f for f in d.findings if f.cause.id == "hccl-link-timeout")
    assert link.nodes == ["d0", "p0"]  # earliest first


def test_symptoms_only_name_the_earliest_node(tmp_path):
    for node, t in (("p0", "21:40:01"), ("d3", "21:39:58")):
        _write(tmp_path / node / "plog.log", f"[ERROR] HCCL(1,):2026-05-21-{t}.705.534 [hccl_socket_manager.cc:796] "
               "[1][Wait][LinkEstablish]wait socket establish timeout, role[0] rank[0] timeout[120 s]\n")
    d = diagnose(tmp_path)
    assert d.top.cause.id == "hccl-link-timeout" and d.top.nodes == ["d3", "p0"]


@pytest.mark.parametrize("line, expect", [
    ("[ERROR] HCCL(1,):2026-05-21-21:39:58.705.534 [x]", ((4 * 31 + 20) * 86400 + 21 * 3600 + 39 * 60 + 58.705)),
    ("(EngineCore_DP0 pid=5) ERROR 01-06 06:43:02 [mooncake_connector.py:419] x", 5 * 86400 + 6 * 3600 + 43 * 60 + 2),
    ("E1210 03:24:54.778028 2548307 ascend_direct_transport.cpp:820] x", (11 * 31 + 9) * 86400 + 3 * 3600 + 24 * 60 + 54.778028),
    ("E20260106 06:43:02.966156  5793 x", 5 * 86400 + 6 * 3600 + 43 * 60 + 2.966156),
    ("[rank6]:[W806 22:23:09.971726955 socket.cpp:487] x", (7 * 31 + 5) * 86400 + 22 * 3600 + 23 * 60 + 9.971726955),
    ("2025-11-27 15:35:48.075697 info 528 [MMC x]", (10 * 31 + 26) * 86400 + 15 * 3600 + 35 * 60 + 48.075697),
    ("no time here", None),
])
def test_line_time_formats(line, expect):
    got = line_time(line.encode())
    assert (got is None) if expect is None else got == pytest.approx(expect, abs=1e-3)


def test_run_directory_exit_codes_checks_and_where_it_looked(tmp_path):
    run = tmp_path / "run"
    _write(run / "plan.json", json.dumps({"nodes": [{"name": "p0"}, {"name": "d0"}]}))
    _write(run / "run-state.json", json.dumps({"run": "r", "status": "failed"}))
    _write(run / "evidence" / "p0" / "engine.log", "(APIServer pid=1) INFO 12-04 10:00:00 [api_server.py:1] ok\n")
    _write(run / "evidence" / "p0" / "shell-env.txt", "NPU out of memory\n")  # not a log: never read
    _write(run / "evidence" / "d0" / "inspect.json", json.dumps(
        {"State": {"Status": "exited", "ExitCode": 135, "FinishedAt": "2026-12-04T10:00:09Z"}}))
    _write(run / "evidence" / "bench" / "x.log", "fine\n")
    d = diagnose(run)
    assert d.kind == "run" and d.nodes == ["p0", "d0"]
    assert d.top.cause.id == "shm-too-small" and d.top.node == "d0"
    assert d.top.evidence[0].text == "container exited with code 135"
    assert ("p0", "evidence/p0/engine.log", 59) in d.looked
    assert not any(f.endswith("shell-env.txt") for _, f, _ in d.looked)
    assert ("-", "evidence/bench/x.log", 5) in d.looked


def test_failing_check_points_at_its_cause(tmp_path):
    run = tmp_path / "run"
    _write(run / "run-state.json", json.dumps({"run": "r"}))
    rows = [{"nodeid": "conformance/test_hw.py::test_hccn_tls_consistent", "outcome": "failed", "node": "d1",
             "message": "tls switch differs"}]
    _write(run / "conformance-results.json", json.dumps({"schema": 1, "tests": rows}))
    d = diagnose(run)
    assert d.top.cause.id == "hccl-tls-mismatch" and d.top.node == "d1"


def test_signature_outside_the_runs_version_range_is_skipped(tmp_path):
    logs = _one(tmp_path, LOGS / "kv-cache-insufficient" / "1.log")  # the V0 engine's wording
    assert diagnose(logs, versions={"vllm": "0.10.2"}).top.cause.id == "kv-cache-insufficient"
    assert diagnose(logs, versions={"vllm": "0.23.0"}).top is None
    assert diagnose(logs, versions={"vllm": "not-a-version"}).top.cause.id == "kv-cache-insufficient"


def test_large_log_read_by_its_tail(tmp_path, monkeypatch):
    from k3lab.diagnosis import logs

    monkeypatch.setattr(logs, "MAX_FILE_BYTES", 1 << 16)
    body = b"INFO fine\n" * 20000 + (LOGS / "npu-oom" / "1.log").read_bytes()
    (tmp_path / "n0").mkdir()
    (tmp_path / "n0" / "engine.log").write_bytes(b"RuntimeError: NPU out of memory. early\n" + body)
    layout = logs.collect(tmp_path, max_bytes=1 << 16)
    assert layout.files[0].truncated and len(layout.files[0].data) <= 1 << 16
    assert "read its last" in layout.notes[0]


def test_special_files_and_symlinks_are_not_read(tmp_path):
    import os

    (tmp_path / "n0").mkdir()
    os.mkfifo(tmp_path / "n0" / "pipe.log")
    (tmp_path / "n0" / "link.log").symlink_to(LOGS / "npu-oom" / "1.log")
    d = diagnose(tmp_path)
    assert d.findings == [] and d.looked == []


@pytest.mark.parametrize("make, msg", [
    (lambda p: p / "missing", "no such directory"),
    (lambda p: (p / "f.log").write_text("x") and p / "f.log", "not a directory"),
])
def test_bad_input_is_an_input_error(tmp_path, make, msg):
    with pytest.raises(InputError, match=msg):
        diagnose(make(tmp_path))


def test_broken_catalogue_names_file_and_field(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("version: 1\ncauses:\n  - id: x\n    component: c\n    title: t\n    tier: cause\n    weight: 5\n"
                   "    signatures: [{pattern: '(unclosed'}]\n    explanation: e\n    remedy: r\n    sources: [s]\n")
    with pytest.raises(InputError, match=r"c\.yaml: field causes\.0\.signatures\.0\.pattern"):
        catalogue.load(bad)


def test_bench_run_is_a_17_node_failure_rooted_on_d3(tmp_path):
    from k3lab.tools import bench

    root = bench._diagnosis_run(tmp_path, total_mb=2)
    d = diagnose(root)
    assert len(d.nodes) == 17 and d.top.cause.id == "npu-oom" and d.top.node == "d3"
    assert [f.cause.id for f in d.findings] == ["npu-oom", "hccl-link-timeout"]


def test_shared_needles_cover_every_signature():
    covered = sorted(i for _, idx in CAT.needles for i in idx)
    assert covered == list(range(len(CAT.signatures)))
    for needle, idx in CAT.needles:
        for i in idx:
            assert needle in CAT.signatures[i][1].pattern.encode().replace(b"\\", b""), (needle, i)


def test_fault_rows_state_catalogued_diagnoses_and_fail_without_them(tmp_path):
    from k3lab.tools import faults

    stated = {f.id: f.diagnosis for f in faults.CATALOG.values() if f.diagnosis}
    assert {"L-KV-PORT-TAKEN", "L-LONG-OOM", "L-LONG-OOM-OFF", "L-KV-PULL-D2"} <= set(stated)
    for fid, want in stated.items():
        assert faults.CATALOG[fid].kind == "live" and want.split("@")[0] in CAT.ids, fid
    f = faults.CATALOG["L-LONG-OOM-OFF"]
    (tmp_path / "evidence" / "d0").mkdir(parents=True)
    (tmp_path / "run-state.json").write_text("{}")
    assert faults.diagnosed(f, tmp_path) == {"diagnosis:(none)"}
    shutil.copy(LOGS / "npu-oom" / "1.log", tmp_path / "evidence" / "d0" / "engine.log")
    seen = set(f.expect) | faults.diagnosed(f, tmp_path)
    assert seen == set(f.expect) | {"diagnosis:npu-oom@d0"}
    assert faults._row(f, seen)["verdict"] == "ok"
    assert faults._row(f, set(f.expect) | {"diagnosis:(none)"})["verdict"] == "MISMATCH"
