"""Every file the kit reads is bounded (issue #26 item 4): a FIFO, /dev/zero, a 3 GiB sparse file, a
48 MB attribute or a deeply nested document in a run directory or a policy is exit 2 naming the file
and the reason, fast, never MemoryError (exit 4) or a hang; a catastrophic policy pattern never hangs
compare. Docker-free."""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from k3lab import errors
from k3lab.cli.main import main
from k3lab.model import policy, safeyaml

RUN = Path(__file__).resolve().parents[3] / "fixtures" / "release" / "run-k3_a3_mixed"
FILES = ["plan.json", "conformance-results.json", "versions.json", "run-state.json"]


@pytest.fixture
def deadline():
    """Fail, instead of hanging the suite, when a read blocks."""
    def expired(*_):
        raise TimeoutError("the read blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _hostile(path: Path, kind: str) -> str:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
        return "FIFO"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return "larger than the limit"
    if kind == "sparse-3g":
        with open(path, "wb") as fh:
            fh.truncate(3 << 30)
        return "bytes; the limit is"
    if kind == "attribute-48m":
        path.write_text('{"scenario": "' + "x" * (48 << 20) + '"}')
        return "bytes; the limit is"
    path.write_text("[" * 200 + "]" * 200)  # deep
    return "nested"


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-3g", "attribute-48m", "deep"])
@pytest.mark.parametrize("name", FILES)
def test_a_hostile_run_file_is_exit_2_naming_it(tmp_path, capsys, deadline, kind, name):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    reason = _hostile(run / name, kind)
    if kind == "dev-zero":  # a link out of the run directory is not read at all (#35)
        reason = "outside the run directory"
    t = time.monotonic()
    assert main(["compare", str(RUN), str(run)]) == errors.USAGE
    err = capsys.readouterr().err
    assert name in err and reason in err and "Traceback" not in err, err
    assert time.monotonic() - t < 10


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-3g"])
def test_a_hostile_junit_is_never_read_and_a_hostile_release_file_is_exit_2(tmp_path, capsys, deadline, kind):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "conformance-results.json").unlink()
    _hostile(run / "junit.xml", kind)  # output only (#31): a run without results has none, the file is not opened
    assert main(["compare", str(RUN), str(run), "--format", "json"]) == 1  # B has no results: worse than A
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "junit.xml is output only, not read" in out.out, out
    rel = tmp_path / "rel"
    rel.mkdir()
    reason = _hostile(rel / "release.json", kind)
    reason = "outside the run directory" if kind == "dev-zero" else reason
    assert main(["compare", str(rel), str(RUN)]) == errors.USAGE
    err = capsys.readouterr().err
    assert "release.json" in err and reason in err, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "sparse-3g"])
def test_a_hostile_policy_file_is_exit_2(tmp_path, capsys, deadline, kind):
    reason = _hostile(tmp_path / "policy.yaml", kind)
    assert main(["compare", str(RUN), str(RUN), "--policy", str(tmp_path / "policy.yaml")]) == errors.USAGE
    err = capsys.readouterr().err
    assert "policy.yaml" in err and reason in err, err


def test_json_depth_is_capped_without_recursion(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(errors.InputError, match="nested"):
        safeyaml.read_json(path, "deep")
    path.write_text(json.dumps({"a": [{"b": 1}]}))
    assert safeyaml.read_json(path, "ok") == {"a": [{"b": 1}]} and safeyaml.json_depth({"a": [{"b": 1}]}) == 3


@pytest.mark.parametrize("pattern", [r"(x+x+)+y", r"(a|aa)+$", r"^(\w+\s?)*$"])
def test_a_catastrophic_not_applicable_pattern_never_hangs(pattern, deadline):
    pol = policy.parse(json.dumps({"schema": 1, "defaults": {"not_applicable": [{"check": "*", "reason": pattern}]}}))
    eff = pol.for_scenario("k3_a3_mixed")
    t = time.monotonic()
    assert eff.not_applicable_reason("npu.x", "x" * 5000 + "!") is None
    assert eff.not_applicable_reason("npu.x", ("a" * 60 + "!") * 100) is None
    assert time.monotonic() - t < 5
