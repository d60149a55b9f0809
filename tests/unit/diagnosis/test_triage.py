"""``k3lab triage DIR``: a run directory or a hand-collected log folder; exit 0 none, 1 a diagnosis, 2 bad input."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from k3lab.cli.main import main

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "failure_logs"


def _hand(tmp_path: Path) -> Path:
    for node, src in (("node-a", "hccl-link-timeout/1.log"), ("node-b", "npu-oom/1.log")):
        (tmp_path / node).mkdir(parents=True)
        shutil.copy(LOGS / src, tmp_path / node / "engine.log")
    return tmp_path


def test_hand_collected_folder_names_cause_node_remedy(tmp_path, capsys):
    assert main(["triage", str(_hand(tmp_path))]) == 1
    out = capsys.readouterr().out
    assert out.startswith("cause: npu-oom on node-b: NPU out of memory")
    assert "evidence: node-b/engine.log:1: RuntimeError: NPU out of memory" in out
    assert "remedy: Lower --gpu-memory-utilization" in out and "source: https://" in out
    assert "also (2): hccl-link-timeout on node-a" in out


def test_json_output(tmp_path, capsys):
    assert main(["triage", "--json", str(_hand(tmp_path))]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "logs" and doc["findings"][0]["id"] == "npu-oom" and doc["findings"][0]["node"] == "node-b"
    assert doc["verdict"] == "cause" and doc["findings"][0]["confidence"] == "high"
    assert doc["findings"][1]["id"] == "hccl-link-timeout" and doc["findings"][1]["confidence"] == "medium"
    assert {"node": "node-b", "file": "node-b/engine.log", "bytes": (LOGS / "npu-oom/1.log").stat().st_size} in doc["looked"]


def test_nothing_found_says_where_it_looked(tmp_path, capsys):
    shutil.copytree(LOGS / "healthy", tmp_path / "n0")
    assert main(["triage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no known cause matched in 4 file(s)" not in out  # sources.yaml is not a log
    assert "no known cause matched in 3 file(s) on 1 node folder(s)" in out and "n0/1.log" in out
    assert "first error" not in out and "skipped: n0/sources.yaml (not a log: .yaml)" in out
    assert main(["triage", "--json", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "clean"


@pytest.mark.parametrize("arg, msg", [("missing", "no such directory"), ("file", "not a directory")])
def test_bad_input_exit_2_without_traceback(tmp_path, capsys, arg, msg):
    (tmp_path / "file").write_text("x")
    assert main(["triage", str(tmp_path / arg)]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


@pytest.mark.parametrize("make, msg", [
    (lambda d: (d / "n0").mkdir(), "no readable log (no file in it)"),  # a mistyped or empty folder
    (lambda d: (d / "n0").mkdir() or (d / "n0" / "config.yaml").write_text("a: 1"),
     "skipped 1 file(s): n0/config.yaml (not a log: .yaml)"),
    (lambda d: (d / "core.1").write_bytes(bytes(range(32)) * 200), "core.1 (not a log: binary)"),
    (lambda d: (d / "engine.log.gz").write_bytes(b"not gzip at all"), "engine.log.gz (unreadable: "),
])
def test_no_readable_log_is_bad_input(tmp_path, capsys, make, msg):
    make(tmp_path)
    assert main(["triage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_gzip_log_is_read_and_skipped_files_are_listed(tmp_path, capsys):
    (tmp_path / "n0").mkdir()
    (tmp_path / "n0" / "engine.log.1.gz").write_bytes(gzip.compress((LOGS / "npu-oom/1.log").read_bytes()))
    (tmp_path / "n0" / "env.yaml").write_text("a: 1")
    (tmp_path / "n0" / "core.7").write_bytes(bytes(range(32)) * 200)
    assert main(["triage", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("cause: npu-oom on n0") and "n0/engine.log.1.gz:1: RuntimeError: NPU out of memory" in out
    assert "skipped: n0/core.7 (not a log: binary), n0/env.yaml (not a log: .yaml)" in out
    assert main(["triage", "--json", str(tmp_path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["skipped"] == ["n0/core.7 (not a log: binary)", "n0/env.yaml (not a log: .yaml)"]


def test_error_no_cause_explains_gives_the_first_error_and_exit_1(tmp_path, capsys):
    (tmp_path / "n0").mkdir()
    shutil.copy(LOGS / "healthy" / "2.log", tmp_path / "n0" / "a.log")
    # a made-up test line, not a real log: an error no cause of the catalogue explains
    (tmp_path / "n0" / "b.log").write_text("ERROR 11-27 10:01:02 [core.py:708] ValueError: something new\n")
    assert main(["triage", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "no known cause matched" in out
    assert "first error, cause unknown: n0/b.log:1: ERROR 11-27 10:01:02 [core.py:708] ValueError: something new" in out
    assert main(["triage", "--json", str(tmp_path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "first-error" and doc["findings"] == [] and doc["first_errors"][0]["file"] == "n0/b.log"


def test_a_failure_logged_at_info_level_is_still_the_first_error(tmp_path, capsys):
    # vllm-ascend#5468's real plog excerpt: every line is [INFO], the failure is a watchdog timeout among them
    (tmp_path / "n0").mkdir()
    shutil.copy(LOGS.parent / "triage_corpus" / "dev" / "driver-cann-mismatch--vllm-ascend-5468.log",
                tmp_path / "n0" / "plog.log")
    assert main(["triage", str(tmp_path)]) == 1
    assert "first error, cause unknown: n0/plog.log:3: " in capsys.readouterr().out
    # a healthy start-up logged at INFO level stays clean
    shutil.copy(LOGS / "healthy" / "2.log", tmp_path / "n0" / "plog.log")
    assert main(["triage", str(tmp_path)]) == 0


def test_failed_bring_up_ends_with_cause_node_and_remedy(tmp_path, capsys, monkeypatch):
    from k3lab.cli import commands
    from k3lab.launch.lifecycle import GateFailed

    run = tmp_path / "runs" / "r1"
    (run / "evidence" / "d3").mkdir(parents=True)
    (run / "run-state.json").write_text(json.dumps({"run": "r1", "status": "failed", "scenario": "a3_pd"}))
    (run / "plan.json").write_text(json.dumps({"scenario": "a3_pd", "nodes": [{"name": "p0"}, {"name": "d3"}]}))
    shutil.copy(LOGS / "npu-oom" / "2.log", run / "evidence" / "d3" / "engine.log")

    def failing_up(*a, **kw):
        exc = GateFailed("stage workers: w_d3 on d3 exited before port d3:8000 opens", "workers", "d3", "w_d3")
        exc.record(run)
        raise exc

    monkeypatch.setattr(commands, "up", failing_up)
    assert main(["up", "a3_pd"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    err = err[next(i for i, line in enumerate(err) if line.startswith("k3lab: stage workers")):]  # after the log lines
    assert err[0].startswith("k3lab: stage workers: w_d3 on d3 exited")
    assert err[1] == "diagnosis of r1: gate workers failed on d3"
    assert err[2] == "cause: npu-oom on d3: NPU out of memory (HBM) [torch_npu]"
    assert any(line.startswith("  remedy: Lower --gpu-memory-utilization") for line in err[3:])
    assert (run / "summary.md").is_file() and "npu-oom" in (run / "summary.md").read_text()


DEV = LOGS.parent / "triage_corpus" / "dev"


def _joined(tmp_path: Path, *parts: tuple[str, slice]) -> Path:
    """One node's log made of real dev excerpts' lines, in the order given (each excerpt's own lines unchanged)."""
    (tmp_path / "n0").mkdir(parents=True)
    lines = [line for name, cut in parts for line in (DEV / name).read_text().splitlines()[cut]]
    (tmp_path / "n0" / "engine.log").write_text("\n".join(lines) + "\n")
    return tmp_path


ALL = slice(None)


def test_error_lines_before_the_service_came_up_are_a_note_not_a_failure(tmp_path, capsys):
    # vllm-ascend#2396's worker errors, then vllm#30749's "Starting vLLM API server 0 on": a start that went wrong
    # and was retried; the service came up and nothing fatal follows, so exit 0 with the error kept as a note
    root = _joined(tmp_path, ("unknown--vllm-ascend-2396.log", ALL), ("healthy--vllm-30749.log", ALL))
    assert main(["triage", str(root)]) == 0
    out = capsys.readouterr().out
    assert "first error" not in out
    assert "note: n0/engine.log:1: error line before the service came up, nothing fatal after it: " in out
    assert "rtGetDevMsg execute failed" in out


def test_a_failure_after_the_service_came_up_is_still_a_failure(tmp_path, capsys):
    # vllm#30749's start-up, then vllm-ascend#5509's "Worker proc VllmWorker-0 died unexpectedly"
    root = _joined(tmp_path, ("healthy--vllm-30749.log", ALL), ("aicore-timeout--vllm-ascend-5509.log", slice(10, 11)))
    assert main(["triage", "--json", str(root)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] in ("cause", "first-error")
    assert "died unexpectedly" in json.dumps(doc["findings"] + doc["first_errors"])


def test_an_unexplained_error_after_the_service_came_up_and_then_a_fatal_sign_is_the_first_error(tmp_path, capsys):
    # the same start-up then vllm-ascend#2396's errors and vllm-ascend#5509's dead worker: what went wrong after the
    # service was up is shown, the readiness line does not hide it
    root = _joined(tmp_path, ("healthy--vllm-30749.log", ALL), ("unknown--vllm-ascend-2396.log", ALL),
                   ("aicore-timeout--vllm-ascend-5509.log", slice(10, 11)))
    assert main(["triage", str(root)]) == 1
    assert "rtGetDevMsg execute failed" in capsys.readouterr().out


def test_a_readiness_line_does_not_hide_a_cause(tmp_path, capsys):
    # a catalogue cause with its own signature wins whatever came up: npu-oom's fixture after vllm#30749's start-up
    (tmp_path / "n0").mkdir()
    text = (DEV / "healthy--vllm-30749.log").read_text() + (LOGS / "npu-oom" / "1.log").read_text()
    (tmp_path / "n0" / "engine.log").write_text(text)
    assert main(["triage", str(tmp_path)]) == 1
    assert capsys.readouterr().out.startswith("cause: npu-oom")


def test_a_cause_printed_before_the_service_came_up_for_good_is_no_failure(tmp_path, capsys):
    # vllm#7514: a bind that failed ("[Errno 98] Address already in use", vllm#9763's line) and a retry that came up
    # (vllm#30749's "Starting vLLM API server 0 on"), nothing fatal after it: the service is up, exit 0
    root = _joined(tmp_path, ("port-in-use--vllm-9763.log", ALL), ("healthy--vllm-30749.log", ALL))
    assert main(["triage", str(root)]) == 0
    assert not capsys.readouterr().out.startswith("cause:")


def test_uvicorn_shutting_down_after_startup_complete_is_fatal(tmp_path, capsys):
    # uvicorn logs "Application startup complete." before it binds the port, then shuts the application down:
    # openui#226's bind failure is the cause, fast-stable-diffusion#1481's (errno 99, no catalogue cause) a first error
    assert main(["triage", str(_joined(tmp_path / "a", ("api-port-in-use--openui-226.log", ALL)))]) == 1
    assert capsys.readouterr().out.startswith("cause: api-port-in-use")
    assert main(["triage", str(_joined(tmp_path / "b", ("unknown--fast-stable-diffusion-1481.log", ALL)))]) == 1
    assert "cannot assign requested address" in capsys.readouterr().out


def test_an_error_message_the_log_says_can_be_ignored_is_no_error(tmp_path, capsys):
    # sglang#4058: "The following error message 'operation scheduled before its operands' can be ignored."
    assert main(["triage", str(_joined(tmp_path, ("healthy--sglang-4058.log", ALL)))]) == 0
    assert "first error" not in capsys.readouterr().out


def test_a_cause_only_warned_about_ranks_below_one_an_error_states(tmp_path, capsys):
    # llmaz#238's Ray warning (01-14: the object store falls back from a 64 MB /dev/shm and the run goes on), then
    # vllm#5094's Gloo failure logged at ERROR (05-29): the error is the cause, the earlier warning follows it
    root = _joined(tmp_path, ("healthy--llmaz-238.log", ALL), ("gloo-loopback--vllm-5094.log", ALL))
    assert main(["triage", "--all", str(root)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("cause: gloo-loopback") and "shm-too-small" in out
    assert main(["triage", "--json", str(root)]) == 1
    shm = next(f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "shm-too-small")
    assert shm["confidence"] == "medium"  # a warning only points


@pytest.mark.parametrize("name", ["healthy--vllm-backport-14.log", "healthy--vllm-25771.log", "healthy--ray-33525.log",
                                  "healthy--ray-3223.log", "healthy--llmaz-238.log"])
def test_a_cause_only_warned_about_on_a_log_that_did_not_fail_is_no_cause(tmp_path, capsys, name):
    # healthy start-ups print Gloo's loopback fallback and Ray's /tmp fallback for a small /dev/shm as warnings; with
    # nothing failing after them (even when the excerpt stops before a readiness line) they are a note, exit 0
    assert main(["triage", "--json", str(_joined(tmp_path, (name, ALL)))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "clean" and any("only a warning points to" in n for n in doc["notes"])


def test_a_warned_cause_followed_by_a_timeout_is_still_the_cause(tmp_path, capsys):
    # vllm-backport#14's Gloo loopback warnings, then lightcompress#365's rendezvous timing out: the failure is there,
    # and the warning is the only cause the logs give (the timeout is a symptom)
    root = _joined(tmp_path, ("healthy--vllm-backport-14.log", ALL), ("dist-init-timeout--lightcompress-365.log", ALL))
    assert main(["triage", "--json", str(root)]) == 1
    top = json.loads(capsys.readouterr().out)["findings"][0]
    assert top["id"] == "gloo-loopback" and top["confidence"] == "medium"


def test_a_warned_cause_does_not_explain_an_exception_that_states_another_reason(tmp_path, capsys):
    # ray#33525's /dev/shm warning, then vllm-ascend#633's "NotImplementedError: There is no available ascend
    # quantizer.": the exception says why it failed, the warning does not explain it; no cause, the first error shown
    root = _joined(tmp_path, ("healthy--ray-33525.log", ALL), ("unknown--vllm-ascend-633.log", ALL))
    assert main(["triage", "--json", str(root)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "first-error" and "no available ascend quantizer" in doc["first_errors"][0]["text"]
    assert any("shm-too-small, and the failure is not one it explains" in n for n in doc["notes"])
