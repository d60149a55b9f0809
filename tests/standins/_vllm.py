"""Helpers for the ``vllm serve`` stand-in tests: model dirs, engine processes, HTTP, metrics."""
from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.standins._standin import SIM_PATH, SITE, base_env, free_port, port_open, wait_until, write_node

VLLM = [sys.executable, "-m", "k3sim.vllm"]
for _p in reversed(SIM_PATH):  # in-process tests import k3sim.vllm directly
    if _p not in sys.path:
        sys.path.insert(0, _p)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"


def model_dir(tmp_path: Path, name: str = "Kimi-K3-w4a8", heads: int = 64, layers: int = 93,
              max_pos: int = 1048576) -> Path:
    """A checkpoint dir with the config.json numbers the engine reads."""
    path = tmp_path / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "text_config": {"num_attention_heads": heads, "num_hidden_layers": layers,
                        "max_position_embeddings": max_pos}}))
    return path


def env(tmp_path: Path, node: str = "node", faults: dict | None = None, **extra: str) -> dict[str, str]:
    """An engine environment with its own node file (so faults can target one node)."""
    nd = tmp_path / node
    nd.mkdir(parents=True, exist_ok=True)
    write_node(nd, platform="A3", device_count=16, faults=faults or {})
    e = base_env(nd, VLLM_HOST_IP="127.0.0.1", K3SIM_LOAD_SECONDS="0.2", PYTHONHASHSEED="0",
                 VLLM_LOG_STATS_INTERVAL="0.3", K3SIM_TOKEN_DELAY_S="0")
    for var in ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
                "ASCEND_RT_VISIBLE_DEVICES", "VLLM_PP_LAYER_PARTITION", "VLLM_API_KEY"):
        e.pop(var, None)
    e.update(extra)
    return e


def set_faults(e: dict[str, str], faults: dict) -> None:
    path = Path(e["K3SIM_NODE_FILE"])
    data = json.loads(path.read_text())
    data["faults"] = faults
    path.write_text(json.dumps(data))


def wait_ready(proc, port: int, timeout: float = 6.0) -> None:
    wait_until(lambda: port_open(port) or proc.popen.poll() is not None, timeout)
    assert port_open(port), f"engine did not come up:\n{proc.out}\n---\n{proc.err}"


def wait_exit(proc, timeout: float = 6.0) -> int:
    wait_until(lambda: proc.popen.poll() is not None, timeout)
    return proc.popen.returncode


def request(port: int, path: str, body: Any = None, headers: dict[str, str] | None = None,
            method: str | None = None, timeout: float = 10) -> tuple[int, Any, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            raw, status, hdrs = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, hdrs = exc.read(), exc.code, dict(exc.headers)
    text = raw.decode()
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


def sse(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    found = False
    for line in text.splitlines():
        m = re.match(r"^([\w:]+)(\{([^}]*)\})? ([0-9.eE+-]+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
            found = True
    assert found, f"{name}{labels} not in /metrics"
    return total


def chat(text: str = "Explain data parallelism in one sentence.", **extra: Any) -> dict[str, Any]:
    return {"model": "kimi-k3", "messages": [{"role": "user", "content": text}], "max_tokens": 128, **extra}


__all__ = ["SITE", "VLLM", "FIXTURES", "chat", "env", "free_port", "metric", "model_dir", "request", "set_faults",
           "sse", "wait_exit", "wait_ready"]


class Engines:
    """Module-scoped engine processes (started once, killed at module teardown)."""

    def __init__(self, root: Path) -> None:
        from tests.standins._standin import Proc

        self.root = root
        self._proc = Proc
        self.procs: list = []

    def start(self, argv: list[str], e: dict[str, str], port: int | None = None, wait: bool = True):
        proc = self._proc(VLLM + argv, e, self.root / f"proc{len(self.procs)}")
        self.procs.append(proc)
        if wait and port:
            wait_ready(proc, port)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
