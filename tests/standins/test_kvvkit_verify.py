"""The kvv rehearsal stand-in ``fixtures/kvvkit/verify_params_k3.py`` (issue #12, K3 §7.2) against the
``vllm serve`` stand-in: it takes the kit's exact command line and its output reads as the kit's
parser expects, passing on a healthy engine and failing, by name, on an engine that is gone."""
from __future__ import annotations

import subprocess
import sys

from k3lab import paths
from k3lab.conform import kvvparse
from tests.standins import _standin
from tests.standins._vllm import VLLM, env, free_port, model_dir, wait_ready

procs = _standin.procs
KIT = paths.FIXTURES / "kvvkit"


def _verify(port: int, tmp_path) -> kvvparse.Verification:
    argv = kvvparse.verify_argv(sys.executable, "kimi-k3", f"http://127.0.0.1:{port}/v1")
    done = subprocess.run(argv, cwd=KIT, capture_output=True, text=True, timeout=120,
                          env=_standin.base_env(tmp_path, KIMI_API_KEY="EMPTY"))
    return kvvparse.parse_verify(done.returncode, done.stdout)


def test_rehearsal_verify_passes_on_a_healthy_engine(tmp_path, procs):
    port = free_port()
    p = procs(VLLM + ["serve", str(model_dir(tmp_path)), "--served-model-name", "kimi-k3", "--port", str(port)],
              env(tmp_path))
    wait_ready(p, port)
    result = _verify(port, tmp_path)
    assert result.ok, result.describe()
    assert result.describe() == "exit 0; non-think: 2/2 passed; think: 2/2 passed"


def test_rehearsal_verify_fails_without_a_service(tmp_path):
    result = _verify(free_port(), tmp_path)
    assert not result.ok
    assert "non-think: request without params" in result.describe()
