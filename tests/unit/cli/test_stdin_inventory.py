"""``-i -`` reads the inventory from standard input, under the file reader's size cap (#33 item 3)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from k3lab import errors
from k3lab.model import safeyaml
from k3lab.tools import release


def k3lab(*argv: str, stdin: bytes | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "k3lab.cli.main", *argv], input=stdin, capture_output=True,
                          timeout=120, cwd=cwd, env={**os.environ, "DOCKER_HOST": "unix:///nonexistent"})


@pytest.fixture(scope="module")
def lab_yaml(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("inv") / "lab.yaml"
    assert k3lab("init", "k3_a3_mixed", "--out", str(out)).returncode == 0
    return out.read_bytes()


def test_preflight_reads_the_inventory_from_stdin(lab_yaml, tmp_path):
    piped = k3lab("preflight", "k3_a3_mixed", "-i", "-", "--format", "json", stdin=lab_yaml)
    (tmp_path / "lab.yaml").write_bytes(lab_yaml)
    from_file = k3lab("preflight", "k3_a3_mixed", "-i", str(tmp_path / "lab.yaml"), "--format", "json")
    assert piped.returncode == from_file.returncode == errors.OK, piped.stderr
    assert json.loads(piped.stdout) == json.loads(from_file.stdout)


def test_a_render_from_stdin_records_stdin(lab_yaml, tmp_path):
    res = k3lab("render", "k3_a3_mixed", "-i", "-", "--out", str(tmp_path / "r"), stdin=lab_yaml)
    assert res.returncode == errors.OK, res.stderr
    assert json.loads((tmp_path / "r" / "plan.json").read_text())["inventory"] == "<stdin>"
    assert "k3lab preflight k3_a3_mixed -i - < lab.yaml" in (tmp_path / "r" / "RUNBOOK.md").read_text()


@pytest.mark.parametrize("stdin, words", [
    (b"", "standard input is empty"),
    (b"  \n\n", "standard input is empty"),
    (b"#" * (safeyaml.MAX_BYTES + 1), f"limit of {safeyaml.MAX_BYTES} bytes"),
    (b"nodes: [\n", "<stdin>:"),  # YAML errors name <stdin> and the line
])
def test_bad_stdin_is_exit_2(stdin, words):
    res = k3lab("preflight", "k3_a3_mixed", "-i", "-", stdin=stdin)
    err = res.stderr.decode()
    assert res.returncode == errors.USAGE and words in err, err
    assert "Traceback" not in err


def test_a_fifo_is_still_refused_and_points_at_stdin(tmp_path):
    fifo = tmp_path / "inv"
    os.mkfifo(fifo)
    res = k3lab("preflight", "k3_a3_mixed", "-i", str(fifo))
    assert res.returncode == errors.USAGE and b"-i - < lab.yaml" in res.stderr, res.stderr


def test_stdin_is_read_once_per_process(lab_yaml, monkeypatch):
    """preflight loads its inventory twice; the second load must see the same text, not an empty stream."""
    import io

    from k3lab.model import select

    safeyaml._stdin_bytes.cache_clear()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lab_yaml)))
    try:
        first, name = select.load_inventory("k3_a3_mixed", "-")
        second, _ = select.load_inventory("k3_a3_mixed", "-")
    finally:
        safeyaml._stdin_bytes.cache_clear()
    assert first == second and name == "<stdin>"


def test_a_terminal_is_refused(monkeypatch):
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Tty())
    with pytest.raises(errors.InputError, match="standard input is a terminal"):
        safeyaml.read_stdin("inventory")


def test_release_refuses_stdin():
    with pytest.raises(errors.UsageError, match="a release reads each inventory in its cycles"):
        release._inventories(["k3_a3_mixed=-"])


def test_a_pipe_that_never_ends_is_refused_by_its_deadline(monkeypatch):
    """`tail -f lab.yaml | k3lab preflight -i -`: the writer never closes the pipe; the read has a deadline."""
    r, w = os.pipe()
    os.write(w, b"nodes: []\n")
    safeyaml._stdin_bytes.cache_clear()
    monkeypatch.setattr(sys, "stdin", open(r, closefd=True))  # noqa: SIM115 - closed by monkeypatch's undo below
    try:
        with pytest.raises(errors.InputError, match=r"did not end within 0\.2 s"):
            safeyaml._stdin_bytes(safeyaml.MAX_BYTES, 0.2)
    finally:
        safeyaml._stdin_bytes.cache_clear()
        sys.stdin.close()
        os.close(w)
