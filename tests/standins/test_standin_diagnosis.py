"""The stand-ins fail like the real components: what they print for each fault they can produce is
diagnosed as its catalogued cause (k3lab.diagnosis), and a healthy engine's output as nothing."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from k3lab.diagnosis.engine import diagnose
from tests.standins import _standin
from tests.standins._vllm import VLLM, chat, env, free_port, model_dir, request, wait_exit, wait_ready
from tests.standins.test_standin_vllm_kv import _kv, _serve
from tests.standins.test_standin_vllm_topology import BASE, _completion

procs = _standin.procs


def _top(tmp_path: Path, node: str, *texts: str) -> tuple[str | None, str | None]:
    d = tmp_path / "evidence-like" / node
    d.mkdir(parents=True)
    (d / "engine.log").write_text("".join(texts))
    found = diagnose(d.parent)
    return (found.top.cause.id, found.top.node) if found.top else (None, None)


def _run(tmp_path: Path, argv: list[str], **extra) -> subprocess.CompletedProcess:
    return subprocess.run(VLLM + argv, env=env(tmp_path, **extra), capture_output=True, text=True, timeout=20)


def test_kv_port_taken(tmp_path, procs):
    kv = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", kv + 1))
        holder.listen()
        p = procs(VLLM + _serve(model_dir(tmp_path), free_port(), _kv("kv_producer", kv)), env(tmp_path))
        assert wait_exit(p) == 1
    assert _top(tmp_path, "p1", p.out, p.err) == ("mooncake-kv-port-in-use", "p1")


def test_api_port_taken(tmp_path):
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(holder.getsockname()[1])])
    assert _top(tmp_path, "d0", r.stdout, r.stderr) == ("port-in-use", "d0")


def test_missing_model_files(tmp_path):
    r = _run(tmp_path, ["serve", str(tmp_path / "absent"), "--port", str(free_port())])
    assert _top(tmp_path, "node0", r.stdout, r.stderr) == ("model-files-missing", "node0")


def test_unknown_parser(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(free_port()), "--enable-auto-tool-choice",
                        "--tool-call-parser", "kimi_k9"])
    assert r.returncode == 1
    assert _top(tmp_path, "d2", r.stdout, r.stderr) == ("unknown-parser", "d2")


def test_out_of_memory(tmp_path, procs):
    port = free_port()
    p = procs(VLLM + ["serve", str(model_dir(tmp_path)), "--port", str(port), *BASE],
              env(tmp_path, faults={"engine": {"oom_prompt_tokens": 1000}}))
    wait_ready(p, port)
    assert _completion(port, 1001)[0] != 200
    assert wait_exit(p) == 1
    # in time order, as docker logs interleaves the streams: uvicorn's start-up lines (stderr) came before the
    # request that ran out of memory (stdout); a service that came up is failed only by what follows
    assert _top(tmp_path, "d3", p.err, p.out) == ("npu-oom", "d3")


def test_unhealthy_device_at_start(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(free_port()), "-tp", "16"],
             faults={"devices": {"7": {"health": "Alarm"}}})
    assert r.returncode == 1
    assert _top(tmp_path, "node2", r.stdout, r.stderr) == ("npu-device-abnormal", "node2")


def test_visible_device_the_node_lacks(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(free_port())],
             ASCEND_RT_VISIBLE_DEVICES="16")
    assert r.returncode == 1
    assert "set ASCEND_RT_VISIBLE_DEVICES:16 error, input data rang[0-16)" in r.stderr  # gpustack #3352's wording
    assert _top(tmp_path, "d1", r.stdout, r.stderr) == ("visible-devices", "d1")


def test_healthy_engine_output_matches_nothing(tmp_path, procs):
    port = free_port()
    p = procs(VLLM + ["serve", str(model_dir(tmp_path)), "--port", str(port), *BASE], env(tmp_path))
    wait_ready(p, port)
    for _ in range(3):
        assert request(port, "/v1/chat/completions", chat())[0] == 200
    assert request(port, "/v1/chat/completions", chat("x " * 9000))[0] == 400  # a refused request is no failure
    p.kill()
    assert _top(tmp_path, "p0", p.out, p.err) == (None, None)


# --- MemCache MetaService ----------------------------------------------------------------------

def test_metaservice_lock_held(tmp_path):
    import fcntl

    from tests.standins._standin import run
    from tests.standins.test_standin_memcache import META, meta_conf, ports
    from tests.standins.test_standin_memcache import env as mmc_env

    with open(tmp_path / "mmc_meta_service.lock", "w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = run(META, mmc_env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, ports()))))
    assert _top(tmp_path, "meta", done.stdout, done.stderr) == ("memcache-meta-locked", "meta")


def test_metaservice_bad_config(tmp_path):
    from tests.standins._standin import run
    from tests.standins.test_standin_memcache import META, meta_conf, ports
    from tests.standins.test_standin_memcache import env as mmc_env

    conf = meta_conf(tmp_path, ports(), "ock.mmc.evict_threshold_low = often")
    done = run(META, mmc_env(tmp_path, MMC_META_CONFIG_PATH=str(conf)))
    assert _top(tmp_path, "meta", done.stdout, done.stderr) == ("memcache-config-invalid", "meta")


def test_healthy_metaservice_logs_match_nothing(tmp_path, procs):
    from tests.standins.test_standin_memcache import META, launched, meta_conf, ports
    from tests.standins.test_standin_memcache import env as mmc_env

    _standin.write_node(tmp_path, platform="A3")
    proc = procs(META, mmc_env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, ports()))))
    launched(tmp_path, proc)
    proc.kill()
    logs = "".join(p.read_text() for p in sorted((tmp_path / "mmc-logs").rglob("*.log")))
    assert logs and _top(tmp_path, "meta", proc.out, proc.err, logs) == (None, None)


# --- /dev/shm full, HCCL links that never come up --------------------------------------------

def test_shm_exhausted(tmp_path):
    r = _run(tmp_path, ["serve", str(model_dir(tmp_path)), "--port", str(free_port()), *BASE],
             faults={"engine": {"shm_exhausted": True}})
    assert r.returncode == 1 and "No space left on device (28)" in r.stderr
    assert _top(tmp_path, "node1", r.stdout, r.stderr) == ("shm-too-small", "node1")


def _triage(tmp_path: Path, logs: dict[str, str]):
    root = tmp_path / "collected"
    for node, text in logs.items():
        (root / node).mkdir(parents=True)
        (root / node / "engine.log").write_text(text)
    return diagnose(root)


def test_hccl_link_timeout_names_the_node_that_gave_up_first(tmp_path, procs):
    from tests.standins.test_standin_vllm_topology import _dp

    model = model_dir(tmp_path)
    rpc, port = free_port(), free_port()
    head = procs(VLLM + _dp(model, 0, rpc, port), env(tmp_path, "node0"))
    ok = procs(VLLM + _dp(model, 1, rpc, port), env(tmp_path, "node1"))
    ok.wait_output("Loading weights took")
    bad = procs(VLLM + _dp(model, 2, rpc, port), env(tmp_path, "node2", faults={"engine": {"hccl_link_timeout_s": 0.5}}))
    assert [wait_exit(p) for p in (bad, head, ok)] == [1, 1, 1]
    for p in (bad, head, ok):  # every rank times out in HCCL's link setup, the faulty one first
        assert "Get_Socket_Timeout(EI0006): Getting socket times out." in p.err, p.err
    found = _triage(tmp_path, {"node0": head.out + head.err, "node1": ok.out + ok.err, "node2": bad.out + bad.err})
    assert (found.top.cause.id, found.top.node) == ("hccl-link-timeout", "node2")
    assert set(found.top.nodes) == {"node0", "node1", "node2"} and found.top.nodes[0] == "node2"
