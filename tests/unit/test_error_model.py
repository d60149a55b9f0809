"""The library reports failures as K3labError subclasses; only the CLI turns them into exit codes."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from k3lab import errors
from k3lab.cli import main as cli
from k3lab.launch import lifecycle
from k3lab.model.plan import Gate
from k3lab.preflight import checks as preflight

ROOT = Path(__file__).resolve().parents[2]


def _raises_system_exit(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                lines.append(node.lineno)
    return lines


def test_no_system_exit_below_the_cli():
    found = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "k3lab" / "launch").glob("*.py"))
             if p.name != "cli.py" and (lines := _raises_system_exit(p))}
    assert found == {}


def test_failed_preflight_is_checks_failed_with_exit_1(monkeypatch, capsys):
    error = preflight.Finding("PF-TEST", "error", "planted error")
    monkeypatch.setattr(preflight, "run", lambda *a, **k: [error])
    with pytest.raises(errors.ChecksFailed, match="preflight failed with 1 error"):
        lifecycle.up("a3_pd_1m", None, {}, "sim")  # raised before any Docker call
    monkeypatch.setattr(cli, "_run", lambda argv: lifecycle.up("a3_pd_1m", None, {}, "sim"))
    assert cli.main(["cycle", "a3_pd_1m"]) == errors.CHECKS_FAILED
    err = capsys.readouterr().err
    assert "ERROR PF-TEST" in err and "k3lab: preflight failed with 1 error(s); nothing was started" in err


def test_interrupted_run_exits_130():
    assert errors.RunInterrupted("interrupted").exit_code == errors.INTERRUPTED == 130


def test_gate_failed_carries_stage_node_process_and_log_tail(monkeypatch):
    from types import SimpleNamespace as NS

    proc = NS(id="vllm-0", node="node0")
    run = NS(plan=NS(processes=lambda: [proc]))
    gate = Gate.make(kind="tcp", node="n0", target="10.0.0.1:8000", process="vllm-0")
    monkeypatch.setattr(lifecycle, "gate_ok", lambda run, g: False)
    monkeypatch.setattr(lifecycle, "log_tail", lambda run, p: "engine said no")
    with pytest.raises(lifecycle.GateFailed) as caught:
        lifecycle.wait_stage(run, NS(name="engines", gates=[gate]), 0, lambda *a: None, [])
    exc = caught.value
    assert (exc.stage, exc.node, exc.process, exc.log_tail) == ("engines", "node0", "vllm-0", "engine said no")
    assert str(exc).startswith("stage engines: timed out") and str(exc).endswith("engine said no")
    assert exc.exit_code == errors.CHECKS_FAILED



def test_check_helpers_hide_their_frame(tmp_path):
    """A failed check's traceback ends at the check's own line, not inside k3lab.conform.evidence."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_helper.py").write_text(
        "from k3lab.conform import evidence\n\n"
        "def test_ports():\n"
        "    evidence.check(False, 'port 8000 listens', 'listening', 'closed', 'node0')\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_helper.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert "evidence.check(False, 'port 8000 listens'" in res.stdout
    assert "def check(" not in res.stdout and "raise err" not in res.stdout
