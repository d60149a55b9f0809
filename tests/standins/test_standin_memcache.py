"""MemCache stand-in: MetaService lifecycle and REST API, provider registration, the object API,
and every documented failure of the service and of ``DistributedObjectStore.init``.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import sys
import urllib.request
from types import SimpleNamespace

import pytest

from tests.standins._standin import SIM_PATH, SITE, base_env, free_port, procs, py, run, wait_until, write_node  # noqa: F401

META = py("import sys; from memcache_hybrid import MetaService; sys.exit(MetaService.main())")
CLIENT = """
import json, sys, time
from memcache_hybrid import DistributedObjectStore
s = DistributedObjectStore()
r = s.init(int(sys.argv[1]), init_bm=sys.argv[2] == "1")
print("RESULT", r, flush=True)
def out(value):
    print("OUT", json.dumps(value), flush=True)
if r == 0:
{body}
"""
PROVIDER_BODY = "    time.sleep(60)"


def env(tmp_path, **extra):
    return base_env(tmp_path, K3SIM_MMC_LOCK_FILE=str(tmp_path / "mmc_meta_service.lock"), **extra)


def meta_conf(tmp_path, ports, *extra_lines):
    path = tmp_path / "mmc-meta.conf"
    base = [f"ock.mmc.meta_service_url = tcp://127.0.0.1:{ports.meta}",
            f"ock.mmc.meta_service.config_store_url = tcp://127.0.0.1:{ports.store}",
            f"ock.mmc.meta_service.metrics_url = http://127.0.0.1:{ports.http}",
            "ock.mmc.log_level = info",
            f"ock.mmc.log_path = {tmp_path / 'mmc-logs'}"]
    overridden = {line.split(" = ")[0] for line in extra_lines}  # a repeated key is an error of its own
    path.write_text("\n".join([*(b for b in base if b.split(" = ")[0] not in overridden), *extra_lines]) + "\n")
    return path


def local_conf(tmp_path, ports, name="mmc-local.conf", dram="1GB", protocol="device_sdma", world_size=256,
               extra=(), skip=()):
    lines = {"ock.mmc.meta_service_url": f"tcp://127.0.0.1:{ports.meta}",
             "ock.mmc.local_service.config_store_url": f"tcp://127.0.0.1:{ports.store}",
             "ock.mmc.log_level": "info",
             "ock.mmc.local_service.world_size": str(world_size),
             "ock.mmc.local_service.protocol": protocol,
             "ock.mmc.local_service.dram.size": dram,
             "ock.mmc.local_service.max.dram.size": "1024GB"}
    path = tmp_path / name
    skip = {*skip, *(line.split(" = ")[0] for line in extra)}  # a repeated key is an error of its own
    path.write_text("".join(f"{k} = {v}\n" for k, v in lines.items() if k not in skip) + "".join(extra))
    return path


def ports():
    chosen: list[int] = []
    while len(chosen) < 3:  # the kernel may hand out a just-closed port again
        port = free_port()
        if port not in chosen:
            chosen.append(port)
    return SimpleNamespace(meta=chosen[0], store=chosen[1], http=chosen[2])


def http_get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
        return response.headers.get("Content-Type"), response.read().decode()


def metrics(port):
    _, text = http_get(port, "/metrics")
    return {name: int(value) for name, value in re.findall(r"^(\S+) (\d+)$", text, re.M)}


@pytest.fixture
def meta(tmp_path, procs):
    p = ports()
    write_node(tmp_path, platform="A3")
    proc = procs(META, env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, p))))
    launched(tmp_path, proc)
    return SimpleNamespace(proc=proc, ports=p, tmp=tmp_path)


def launched(tmp_path, proc):
    """Like the real service, the stand-in says so only in its audit log."""
    audit = tmp_path / "mmc-logs/logs/mmc-meta-audit.log"
    wait_until(lambda: (audit.exists() and "Meta Service launched successfully" in audit.read_text())
               or proc.popen.poll() is not None)
    assert proc.popen.poll() is None, f"MetaService exited:\n{proc.out}\n{proc.err}"


def client(meta, conf, body="    pass", device=0, init_bm=True, **extra_env):
    code = CLIENT.format(body=body)
    done = run([sys.executable, "-c", code, str(device), "1" if init_bm else "0"],
               env(meta.tmp, MMC_LOCAL_CONFIG_PATH=str(conf), **extra_env))
    result = int(re.search(r"^RESULT (-?\d+)$", done.stdout, re.M).group(1))
    outputs = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("OUT ")]
    return result, outputs, done.stdout


def provider(meta, procs, conf, device=0, **extra_env):
    proc = procs([sys.executable, "-c", CLIENT.format(body=PROVIDER_BODY), str(device), "1"],
                 env(meta.tmp, MMC_LOCAL_CONFIG_PATH=str(conf), **extra_env))
    proc.wait_output("RESULT ")
    return proc


# --- MetaService ------------------------------------------------------------------------------

def test_metaservice_starts_and_serves_health_and_empty_metrics(meta):
    assert re.search(r"Meta service log level 1, log path: .*/mmc-logs/logs/mmc-meta.log, .*log output target: 1",
                     meta.proc.out)
    assert re.search(r"^\S+ \S+ INFO \[\d+-\d+\]\[MMC mmc_configuration.cpp:159 LoadFromFile\] Loaded \d+ config items:$",
                     meta.proc.out, re.M)
    log = (meta.tmp / "mmc-logs/logs/mmc-meta.log").read_text()
    assert f"trace [MMC mmc_meta_service_process.cpp:676 StartHttpServer] Starting HTTP server on 127.0.0.1:{meta.ports.http}" in log
    assert f"HTTP server started on 127.0.0.1:{meta.ports.http}" in log
    assert "HTTP server" not in meta.proc.out  # after the logger starts, only the files get lines
    assert "Meta Service launched successfully" in (meta.tmp / "mmc-logs/logs/mmc-meta-audit.log").read_text()
    kind, body = http_get(meta.ports.http, "/health")
    assert kind.startswith("application/json")
    assert json.loads(body) == {"status": "ok", "role": "unknown", "ha_state": "unknown", "service_ready": True,
                                "leader_address": "unknown", "view_version": 0}
    kind, text = http_get(meta.ports.http, "/metrics")
    assert kind == "text/plain; version=0.0.4"
    assert "# HELP memcache_total_capacity_bytes Total capacity by medium in bytes\n" \
           "# TYPE memcache_total_capacity_bytes gauge\n" \
           'memcache_total_capacity_bytes{medium="hbm"} 0\nmemcache_total_capacity_bytes{medium="dram"} 0\n' in text
    assert "memcache_segment_capacity_bytes{" not in text
    for op in ("alloc", "get", "exist_key", "mount", "unmount"):
        assert f"# TYPE memcache_{op}_requests_total counter\nmemcache_{op}_requests_total 0\n" in text
    assert http_get(meta.ports.http, "/get_all_segments")[1] == ""


def test_stops_on_sigterm_and_sigint(meta, tmp_path, procs):
    assert meta.proc.stop(signal.SIGTERM, timeout=3) == 0
    assert "Received exit signal[15]" in meta.proc.out
    (tmp_path / "mmc-logs/logs/mmc-meta-audit.log").write_text("")
    proc = procs(META, env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, ports()))))
    launched(tmp_path, proc)
    assert proc.stop(signal.SIGINT, timeout=3) == 0 and "Received exit signal[2]" in proc.out


def test_injected_crash_ends_the_service_promptly(meta):
    write_node(meta.tmp, platform="A3", faults={"metaservice": {"exit": True}})
    assert meta.proc.popen.wait(2) != 0
    assert "Received exit signal" not in meta.proc.out


def test_second_instance_is_refused_by_the_lock(tmp_path):
    lock = tmp_path / "mmc_meta_service.lock"
    with open(lock, "w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = run(META, env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, ports()))))
    assert done.returncode == 255  # main() returned -1
    assert done.stderr.splitlines() == ["Fail to start mmc_meta_service, process lock file is locked.",
                                        "Error, meta service is already running."]


def test_unset_config_path_warns_and_uses_defaults(tmp_path, procs):
    proc = procs(META, env(tmp_path))
    proc.wait_output("[WARNING] MMC_META_CONFIG_PATH is not set. All configuration items use default values.")


@pytest.mark.parametrize("lines, stderr_lines", [
    (["ock.mmc.local_service.world_size = 4"],
     ["Invalid key <ock.mmc.local_service.world_size>.", "Failed to load config from file",
      "Error, failed to load config."]),
    (["ock.mmc.evict_threshold_low = often"],
     ["<ock.mmc.evict_threshold_low> was empty or in wrong type, it should be a int number.",
      "Failed to load config from file", "Error, failed to load config."]),
    (["ock.mmc.tls.enable = true"], ["Invalid tls config.", "Error, invalid config.", "Error, failed to load config."]),
    (["ock.mmc.meta.ha.enable = true"], ["Error, failed to start meta service leader election."]),
])
def test_bad_meta_config_is_refused(tmp_path, lines, stderr_lines):
    done = run(META, env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, ports(), *lines))))
    assert done.returncode == 255
    assert done.stderr.splitlines() == stderr_lines


def test_out_of_range_values_are_listed(tmp_path):
    conf = meta_conf(tmp_path, ports(), "ock.mmc.evict_threshold_high = 120", "ock.mmc.log_level = loud")
    done = run(META, env(tmp_path, MMC_META_CONFIG_PATH=str(conf)))
    assert done.stderr.splitlines() == [f"Wrong configuration in file <{conf}>, because of following mistakes:",
                                        "Error, failed to load config."]
    assert "Invalid value for <ock.mmc.log_level>, it should be one of debug||info||warn||error" in done.stdout
    assert "Invalid value for <ock.mmc.evict_threshold_high>, it should be between 1-100" in done.stdout


@pytest.mark.parametrize("key, value, message", [
    ("ock.mmc.meta_service_url", "tcp://127.0.0.1:80", "Error, failed to start MmcMetaService."),
    ("ock.mmc.meta_service_url", "tcp://metahost:5000", "Error, failed to start MmcMetaService."),
    ("ock.mmc.meta_service.config_store_url", "127.0.0.1:6000", "Error, failed to start MmcMetaService."),
    ("ock.mmc.meta_service.metrics_url", "tcp://127.0.0.1:8099", "Error, failed to start the HTTP Service."),
])
def test_bad_urls_fail_to_start(tmp_path, key, value, message):
    conf = meta_conf(tmp_path, ports())
    conf.write_text(re.sub(rf"^{re.escape(key)} = .*$", f"{key} = {value}", conf.read_text(), flags=re.M))
    done = run(META, env(tmp_path, MMC_META_CONFIG_PATH=str(conf)))
    assert done.returncode == 255 and done.stderr.splitlines() == [message]


@pytest.mark.parametrize("busy", ["meta", "http"])
def test_busy_ports_fail_to_start(tmp_path, busy):
    p = ports()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", getattr(p, busy)))
        squatter.listen()
        done = run(META, env(tmp_path, MMC_META_CONFIG_PATH=str(meta_conf(tmp_path, p))))
    expected = "Error, failed to start MmcMetaService." if busy == "meta" else "Error, failed to start the HTTP Service."
    assert done.returncode == 255 and done.stderr.splitlines() == [expected]


# --- providers and registration ------------------------------------------------------------------

def test_providers_register_segments_in_join_order_and_vanish_on_exit(meta, procs):
    first = provider(meta, procs, local_conf(meta.tmp, meta.ports))
    assert "init bm success, rank:0, worldSize:256, hbm{0}, dram{1073741824}" in first.out
    second = provider(meta, procs, local_conf(meta.tmp, meta.ports, "b.conf", dram="200MB", protocol="host_rdma"))
    assert "init bm success, rank:1, worldSize:256, hbm{0}, dram{209715200}" in second.out
    values = metrics(meta.ports.http)
    assert values['memcache_segment_capacity_bytes{segment="rank-0-dram"}'] == 1073741824
    assert values['memcache_segment_capacity_bytes{segment="rank-1-dram"}'] == 209715200
    assert values['memcache_total_capacity_bytes{medium="dram"}'] == 1073741824 + 209715200
    assert http_get(meta.ports.http, "/get_all_segments")[1] == "rank-0-dram\nrank-1-dram\n"
    first.kill()
    wait_until(lambda: http_get(meta.ports.http, "/get_all_segments")[1] == "rank-1-dram\n", timeout=3)
    assert metrics(meta.ports.http)["memcache_unmount_successes_total"] == 1


def test_sizes_align_up_per_protocol(meta, procs):
    proc = provider(meta, procs, local_conf(meta.tmp, meta.ports, dram="2.5GB"))
    assert "dram{3221225472}" in proc.out  # device_sdma: 1GB alignment
    proc = provider(meta, procs, local_conf(meta.tmp, meta.ports, "b.conf", dram="3MB", protocol="host_tcp"))
    assert "dram{4194304}" in proc.out  # host_*: 2MB alignment


def test_short_provider_fault_registers_less(meta, procs):
    write_node(meta.tmp, platform="A3", faults={"provider": {"dram_size": "512MB"}})
    proc = provider(meta, procs, local_conf(meta.tmp, meta.ports))
    assert "dram{536870912}" in proc.out
    assert metrics(meta.ports.http)['memcache_segment_capacity_bytes{segment="rank-0-dram"}'] == 536870912


def test_world_size_limit(meta, procs):
    provider(meta, procs, local_conf(meta.tmp, meta.ports, world_size=1))
    result, _, out = client(meta, local_conf(meta.tmp, meta.ports, "b.conf", world_size=1))
    assert result == -1 and "failed to create or start local service" in out


# --- the object API ------------------------------------------------------------------------------

API_BODY = """
    out([s.put("k1", b"hello"), s.put("k1", b"again"), s.get("k1").decode(), s.get("nope").decode()])
    out([s.is_exist("k1"), s.is_exist("nope"), s.batch_is_exist(["k1", "nope"])])
    out([s.batch_put(["k2", "k3"], [b"22", bytearray(b"333")]), [v.decode() for v in s.batch_get(["k2", "nope", "k3"])]])
    out([s.remove("k2"), s.remove("k2"), s.init(5)])
"""


def test_engine_client_stores_objects_in_the_pool(meta, procs):
    provider(meta, procs, local_conf(meta.tmp, meta.ports))
    engine = local_conf(meta.tmp, meta.ports, "engine.conf", dram="0GB")
    result, outputs, out = client(meta, engine, API_BODY, device=3)
    assert result == 0 and "dram{0}" in out and "mmc local register capacity" not in out
    assert outputs == [[0, -3006, "hello", ""], [1, 0, [1, 0]], [[0, 0], ["22", "", "333"]], [0, -3102, 0]]
    values = metrics(meta.ports.http)
    assert http_get(meta.ports.http, "/get_all_segments")[1] == "rank-0-dram\n"  # the engine mounted nothing
    assert values["memcache_stored_keys"] == 2  # k1 and k3 (the engine's exit does not drop objects)
    assert values['memcache_allocated_bytes{medium="dram"}'] == len(b"hello") + len(b"333")
    assert (values["memcache_alloc_requests_total"], values["memcache_alloc_failures_total"]) == (4, 1)
    assert values["memcache_batch_get_not_found_total"] == 1 and values["memcache_remove_not_found_total"] == 1


def test_scheduler_style_client_does_not_join_the_bm(meta, procs):
    provider(meta, procs, local_conf(meta.tmp, meta.ports))
    result, outputs, out = client(meta, local_conf(meta.tmp, meta.ports), "    out(s.put('x', b'1'))", init_bm=False)
    assert (result, outputs) == (0, [0]) and "init bm success" not in out
    assert http_get(meta.ports.http, "/get_all_segments")[1] == "rank-0-dram\n"


def test_puts_without_capacity_exceed(meta):
    engine = local_conf(meta.tmp, meta.ports, "engine.conf", dram="0GB")
    result, outputs, _ = client(meta, engine, "    out([s.put('x', b'1'), s.batch_put(['y'], [b'2'])])")
    assert (result, outputs) == (0, [[-3013, [-3013]]])


def test_full_pool_evicts_least_recently_used(meta, procs):
    provider(meta, procs, local_conf(meta.tmp, meta.ports, dram="2MB", protocol="host_tcp"))
    body = "    out([s.put(f'k{i}', bytes(204800)) for i in range(10)] + [s.is_exist('k0'), s.is_exist('k9')])"
    result, outputs, _ = client(meta, local_conf(meta.tmp, meta.ports, "e.conf", dram="0GB"), body)
    assert outputs == [[0] * 10 + [0, 1]]
    values = metrics(meta.ports.http)
    assert values["memcache_evict_operations_total"] == 1 and values["memcache_stored_keys"] == 8


def test_rest_views_of_keys(meta, procs):
    provider(meta, procs, local_conf(meta.tmp, meta.ports))
    client(meta, local_conf(meta.tmp, meta.ports, "e.conf", dram="0GB"), "    s.put('kv-a', b'abc')")
    assert http_get(meta.ports.http, "/get_all_keys")[1] == "kv-a\n"
    found = json.loads(http_get(meta.ports.http, "/query_key?key=kv-a")[1])
    assert found["size"] == 3 and found["blobs"] == [{"medium": "DRAM", "rank": 0}]
    missing = json.loads(http_get(meta.ports.http, "/query_key?key=zz")[1])
    assert missing["success"] is False and missing["error_message"] == "Key not found"
    summary = http_get(meta.ports.http, "/metrics/summary")[1]
    assert summary.startswith("keys=1 evict=0 hbm_used=0/0 dram_used=3/1073741824 alloc_req=1 ")


# --- init failures -------------------------------------------------------------------------------

def test_unset_local_config_path(meta):
    done = run([sys.executable, "-c", CLIENT.format(body="    pass"), "0", "1"], env(meta.tmp))
    assert "RESULT -3000" in done.stdout and "MMC_LOCAL_CONFIG_PATH is not set" in done.stdout


@pytest.mark.parametrize("kwargs, result, words", [
    ({"extra": ["ock.mmc.meta_service.config_store_url = tcp://127.0.0.1:1\n"]}, -1,
     "Invalid key <ock.mmc.meta_service.config_store_url>."),
    ({"skip": ["ock.mmc.local_service.protocol"]}, -1, "Required key <ock.mmc.local_service.protocol> is not set."),
    ({"dram": "12XB"}, -1, "DRAM or HBM value (12XB) is invalid"),
    ({"protocol": "tcp"}, -3000, "Invalid value for <ock.mmc.local_service.protocol>, it should be one of"),
    ({"world_size": 2048}, -3000, "Invalid value for <ock.mmc.local_service.world_size>, it should be between 1-1024"),
    ({"dram": "2TB"}, -3000, "exceeds (1099511627776)"),
    ({"extra": ["ock.mmc.local_service.max.dram.size = 1GB\n"], "dram": "2GB"}, -3000,
     "ock.mmc.local_service.max.dram.size(1073741824) is smaller than ock.mmc.local_service.dram.size(2147483648)"),
    ({"extra": ["ock.mmc.tls.enable = true\n"]}, -3000, "Invalid acc_link TLS config"),
])
def test_bad_local_config(meta, kwargs, result, words):
    got, _, out = client(meta, local_conf(meta.tmp, meta.ports, **kwargs))
    assert got == result and words in out


def test_unreachable_meta_service(tmp_path):
    unreachable = SimpleNamespace(tmp=tmp_path)
    write_node(tmp_path)
    result, _, out = client(unreachable, local_conf(tmp_path, ports()))
    assert result == -3017 and "mmcc init failed, ret:-3017" in out


def test_config_store_url_must_reach_the_config_store(meta):
    conf = local_conf(meta.tmp, meta.ports)
    conf.write_text(conf.read_text().replace(f":{meta.ports.store}", f":{meta.ports.meta}"))
    result, _, out = client(meta, conf)
    assert result == -1 and "failed to create or start local service" in out


def test_injected_provider_failure_and_bad_device_id(meta):
    assert client(meta, local_conf(meta.tmp, meta.ports), device=384)[0] == -3000
    write_node(meta.tmp, platform="A3", faults={"provider": {"exit": True}})
    result, _, out = client(meta, local_conf(meta.tmp, meta.ports))
    assert result == -1 and "failed to create or start local service" in out


@pytest.mark.parametrize("text, size", [("134217728", 134217728), ("2048KB", 2 << 20), ("2048k", 2 << 20),
                                        ("200MB", 200 << 20), ("200m", 200 << 20), ("2.5GB", 5 << 29),
                                        ("1TB", 1 << 40), ("0GB", 0), ("1.5", None), ("GB", None), ("-1GB", None)])
def test_size_syntax(text, size):
    saved = list(sys.path)
    sys.path[:0] = SIM_PATH
    try:
        from k3sim.memcache.config import parse_size
    finally:
        sys.path[:] = saved
    assert parse_size(text) == size


def test_package_layout_matches_runtime_env_sh(tmp_path):
    code = ("import importlib.util, os\n"
            "for name in ('memfabric_hybrid', 'memcache_hybrid'):\n"
            "    d = next(iter(importlib.util.find_spec(name).submodule_search_locations))\n"
            "    print(os.path.isdir(d + '/lib'))\n"
            "import memcache_hybrid\n"
            "print(sorted(memcache_hybrid.__all__))")
    done = run(py(code), base_env(tmp_path))
    assert done.stdout.splitlines() == ["True", "True", "['DistributedObjectStore', 'KeyInfo', 'LocalConfig', "
                                        "'MetaConfig', 'MetaService', 'ReplicateConfig']"]
    config_dir = SITE / "memcache_hybrid" / "config"
    assert os.path.isfile(config_dir / "mmc-meta.conf") and os.path.isfile(config_dir / "mmc-local.conf")
