"""Every generated file goes through the one guarded, atomic writer (issue #35 item 1): a full disk is exit 3
naming the file with the previous file intact, no symlink is written through, a forced release keeps the
previous one until the new one is complete, and bad ``--out`` values are exit 2 with one line."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from k3lab import errors, outputs
from k3lab.cli.main import main
from k3lab.model import policy
from k3lab.tools import release

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "release" / "run-k3_a3_mixed"


def _disk_full(monkeypatch):
    def write(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)


def test_disk_full_is_exit_3_naming_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    path.write_text("old\n")
    _disk_full(monkeypatch)
    with pytest.raises(errors.EnvError) as exc:
        outputs.write_file(path, "new\n")
    assert exc.value.exit_code == errors.ENVIRONMENT and str(path) in str(exc.value)
    assert "No space left" in str(exc.value)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["report.json"]  # no temporary file left


def test_disk_full_during_a_report_is_exit_3_and_the_old_reports_stay(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["report", str(run)]) == errors.OK
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    _disk_full(monkeypatch)
    assert main(["report", str(run)]) == errors.ENVIRONMENT
    err = capsys.readouterr().err
    assert "No space left" in err and str(run) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_disk_full_during_a_release_leaves_the_previous_release_whole(tmp_path, monkeypatch, capsys):
    out = tmp_path / "rel"
    assert main(["release", "--static-only", "-s", "a3_pd_1m", "--out", str(out)]) in (0, 1, 3)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    _disk_full(monkeypatch)
    assert main(["release", "--static-only", "-s", "a3_pd_1m", "--out", str(out), "--force"]) == errors.ENVIRONMENT
    err = capsys.readouterr().err
    assert "No space left" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel"]  # no staging directory left behind


def test_release_refuses_a_non_empty_directory_without_force(tmp_path, capsys):
    out = tmp_path / "rel"
    out.mkdir()
    (out / "release.json").write_text("previous\n")
    assert main(["release", "--static-only", "-s", "a3_pd_1m", "--out", str(out)]) == errors.USAGE
    assert "not empty" in capsys.readouterr().err
    assert (out / "release.json").read_text() == "previous\n"


def test_release_refuses_a_symlinked_directory(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert main(["release", "--static-only", "-s", "a3_pd_1m", "--out", str(tmp_path / "link")]) == errors.USAGE
    assert "is a symlink" in capsys.readouterr().err and not any(real.iterdir())


def test_forced_release_never_writes_through_its_old_symlinks(tmp_path):
    out, victim = tmp_path / "rel", tmp_path / "victim"
    out.mkdir()
    victim.write_text("precious\n")
    for name in ("release.json", "release.html", "junit.xml"):
        (out / name).symlink_to(victim)
    release.run_release(["a3_pd_1m"], policy.load(), out, live=False, force=True)
    assert victim.read_text() == "precious\n"
    assert not any((out / n).is_symlink() for n in ("release.json", "release.html", "junit.xml"))
    assert json.loads((out / "release.json").read_text())["kind"] == "k3lab-release"


def test_a_failed_forced_release_keeps_the_previous_one(tmp_path, monkeypatch):
    out = tmp_path / "rel"
    out.mkdir()
    (out / "release.json").write_text("previous\n")
    from k3lab.reports import releasereport

    def broken(*a, **k):
        raise RuntimeError("interrupted half-way")

    monkeypatch.setattr(releasereport, "write_all", broken)
    with pytest.raises(RuntimeError):
        release.run_release(["a3_pd_1m"], policy.load(), out, live=False, force=True)
    assert (out / "release.json").read_text() == "previous\n" and sorted(os.listdir(tmp_path)) == ["rel"]


def test_static_release_into_an_existing_file_is_exit_2(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["release", "--static-only", "--out", str(tmp_path / "f")]) == errors.USAGE
    err = capsys.readouterr().err
    assert "exists and is not a directory" in err and "Traceback" not in err


def test_bench_into_an_existing_directory_is_exit_2(tmp_path, capsys):
    assert main(["bench", "--no-live", "--out", str(tmp_path)]) == errors.USAGE
    err = capsys.readouterr().err
    assert "is a directory" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_report_never_writes_through_symlinks(tmp_path):
    run, victim = tmp_path / "run", tmp_path / "victim"
    shutil.copytree(RUN, run)
    victim.write_text("precious\n")
    for name in ("summary.md", "report.html", "gate.json"):
        (run / name).symlink_to(victim)
    assert main(["report", str(run)]) == errors.OK
    assert victim.read_text() == "precious\n"
    assert not any((run / n).is_symlink() for n in ("summary.md", "report.html", "gate.json"))


def test_faults_json_never_writes_through_symlinks(tmp_path, capsys):
    victim, out = tmp_path / "victim", tmp_path / "faults.json"
    victim.write_text("precious\n")
    out.symlink_to(victim)
    out.with_suffix(".md").symlink_to(victim)
    main(["faults", "--static-only", "--id", "S-DEVICES", "--out", str(out)])
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and isinstance(json.loads(out.read_text()), list)


def test_output_under_a_pseudo_filesystem_is_refused():
    with pytest.raises(errors.InputError, match="refusing to write under /proc"):
        outputs.check_file("/proc/self/k3lab.json", force=True)


# Every way of writing a file the kit's code uses; a new one outside outputs.py must go through it or be
# listed below with why it is not a generated file an operator reads (docs/development.md, "Writers").
_WRITES = re.compile(r"\.write_text\(|\.write_bytes\(|\bopen\([^)]*['\"][wax]b?\+?['\"]|\.open\(['\"][wax]|json\.dump\("
                     r"|shutil\.copy|os\.replace\(|\.rename\(|\.replace\(\w+\)\s*$|os\.open\(|os\.fdopen\(|mkstemp\(")
ALLOWED = {
    "k3lab/outputs.py": (7, "the one writer"),
    "k3lab/render/artefacts.py": (2, "O_EXCL|O_NOFOLLOW files into render's fresh staging directory (outputs.swap_in)"),
    "k3lab/errors.py": (2, "the crash log: mkstemp, a new private file in the log directory"),
    "k3lab/cli/main.py": (1, "reopens stdout on /dev/null after a closed pipe"),
    "k3lab/model/safeyaml.py": (1, "the bounded reader's O_NONBLOCK open (read-only)"),
    "k3lab/diagnosis/logs.py": (1, "triage's read-only O_NOFOLLOW open of a log"),
    "k3lab/launch/labemu.py": (20, "the lab emulator's own host trees under its state directory, not a run or an output"),
    "k3lab/launch/simimage/vllm_ascend.py": (4, "the sim image's download cache (temp file + replace, under a lock)"),
    "k3lab/launch/simimage/image.py": (1, "a tar archive in memory"),
    "k3lab/launch/backends.py": (1, "a tar archive in memory"),
    "k3lab/launch/endpoints.py": (1, "the bench's round-trip counter under K3LAB_ROUND_TRIPS"),
    "k3lab/conform/nodetools.py": (1, "the node-tools cache's lock file (the cache itself: write_run_file)"),
    "k3lab/tools/bench.py": (3, "a synthetic run in the benchmark's own mkdtemp"),
    "k3lab/tools/release.py": (1, "a cycle's live log, streamed by the subprocess into the staged release"),
}


def test_no_unguarded_writer():
    root = Path(__file__).resolve().parents[2]
    found: dict[str, list[str]] = {}
    for f in sorted((root / "k3lab").rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        hits = [f"{rel}:{i}: {line.strip()}" for i, line in enumerate(f.read_text().splitlines(), 1)
                if _WRITES.search(line) and not line.strip().startswith("#")]
        if hits:
            found[rel] = hits
    extra = {rel: hits for rel, hits in found.items() if len(hits) > ALLOWED.get(rel, (0, ""))[0]}
    assert not extra, ("files written outside k3lab.outputs (use outputs.write_file / write_run_file, or list "
                       f"the module in ALLOWED with why): {extra}")


def _outside(tmp_path: Path) -> Path:
    """A run directory whose evidence/ is a symlink to a folder of someone else's secrets."""
    run, other = tmp_path / "run", tmp_path / "other"
    shutil.copytree(RUN, run)
    (other / "node0").mkdir(parents=True)
    (other / "node0" / "secret.log").write_text("ERROR HCCL timeout SECRET-OUTSIDE\n")
    (run / "evidence").symlink_to(other)
    return run


def test_report_never_follows_an_evidence_symlink_out_of_the_run(tmp_path):
    run = _outside(tmp_path)
    assert main(["report", str(run)]) in (errors.OK, errors.CHECKS_FAILED, errors.ENVIRONMENT)
    summary = (run / "summary.md").read_text()
    assert "secret.log" not in summary and "secret.log" not in (run / "report.html").read_text()
    assert "evidence (a symlink to" in summary  # named, not silently dropped


def test_triage_never_follows_an_evidence_symlink_out_of_the_run(tmp_path, capsys):
    from k3lab.diagnosis import logs

    run = _outside(tmp_path)
    layout = logs.collect(run)
    assert not any("secret" in f.rel for f in layout.files)
    assert any("evidence (a symlink to" in s for s in layout.skipped)


def test_a_run_artefact_linked_out_of_the_run_is_not_read(tmp_path):
    from k3lab.model import runs

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (tmp_path / "elsewhere.json").write_bytes((run / "run-state.json").read_bytes())
    (run / "run-state.json").unlink()
    (run / "run-state.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(errors.InputError, match="outside the run directory"):
        runs.run_state(run)


def test_the_evidence_walk_is_bounded(tmp_path):
    from k3lab.model import runs

    deep = tmp_path / "evidence"
    for i in range(3):
        (deep / "n0").mkdir(parents=True, exist_ok=True)
        (deep / "n0" / f"{i}.log").write_text("x")
    (deep / "a" / "b" / "c").mkdir(parents=True)
    files, skipped = runs.walk(tmp_path, "evidence", max_files=2, max_depth=2)
    assert len(files) == 2 and any("the rest not listed" in s for s in skipped)


def test_the_diagnosis_never_quotes_a_gate_failure_linked_out_of_the_run(tmp_path):
    from k3lab.diagnosis import engine

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (tmp_path / "secret.json").write_text(json.dumps({"stage": "SECRET-OUTSIDE"}))
    (run / "gate-failure.json").symlink_to(tmp_path / "secret.json")
    assert engine._gate(run) is None


def test_disk_full_during_a_render_is_exit_3_and_keeps_the_previous_render(tmp_path, monkeypatch, capsys):
    from k3lab.render import artefacts

    out = tmp_path / "r"
    assert main(["render", "a3_pd_1m", "--out", str(out)]) == errors.OK
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))

    def full(path, text, mode):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artefacts, "_write_file", full)
    capsys.readouterr()
    assert main(["render", "a3_pd_1m", "--out", str(out), "--force"]) == errors.ENVIRONMENT
    assert "No space left" in capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert sorted(os.listdir(tmp_path)) == ["r"]


def test_triage_is_bounded_in_names_per_folder_and_time(tmp_path, monkeypatch):
    from k3lab.diagnosis import logs

    (tmp_path / "n0").mkdir()
    for i in range(30):
        (tmp_path / "n0" / f"{i:02}.log").write_text("x\n")
    monkeypatch.setattr(logs, "MAX_ENTRIES", 10)
    assert len(logs.collect(tmp_path).files) == 10  # a folder is listed only up to the cap
    monkeypatch.setattr(logs, "MAX_SECONDS", -1.0)
    layout = logs.collect(tmp_path)
    assert not layout.files and any("the rest were not read" in n for n in layout.notes)


def test_baseline_never_reads_bench_evidence_through_a_symlink(tmp_path):
    from k3lab.model import runs

    run, other = tmp_path / "run", tmp_path / "other"
    (other / "bench").mkdir(parents=True)
    (other / "bench" / "perf-result.json").write_text("{}")
    run.mkdir()
    (run / "evidence").symlink_to(other)
    with pytest.raises(errors.InputError, match="evidence: is a symlink"):
        runs.within(run, "evidence/bench/perf-result.json")
    assert runs.within(other, "bench/perf-result.json").is_file()


def test_a_run_file_is_never_written_through_a_symlinked_folder_or_file(tmp_path):
    run, other = tmp_path / "run", tmp_path / "other"
    (other / "node0").mkdir(parents=True)
    run.mkdir()
    (run / "evidence").symlink_to(other)
    with pytest.raises(errors.InputError, match="evidence: is a symlink"):
        outputs.write_run_file(run / "evidence" / "node0" / "shell-env.txt", "x", root=run)
    with pytest.raises(errors.InputError, match="is a symlink"):
        outputs.write_run_file(run / "evidence" / "x.txt", "x")
    assert not any((other / "node0").iterdir()) and not (other / "x.txt").exists()
    (tmp_path / "victim").write_text("precious\n")
    (run / "run-state.json").symlink_to(tmp_path / "victim")
    outputs.write_run_file(run / "run-state.json", "{}")
    assert (tmp_path / "victim").read_text() == "precious\n" and not (run / "run-state.json").is_symlink()
