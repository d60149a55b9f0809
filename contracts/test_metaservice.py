"""MetaService contract: the stand-in (``launchers/sim/k3sim/memcache`` behind ``memcache_hybrid``) against the real
MemCache 1.3.0 MetaService, both started with the guide's own command on loopback ports.

Compared: the metric families the kit reads (HELP and TYPE) and that every family the stand-in
serves exists in the real one with the same HELP and TYPE; ``/health`` (status, content type,
body) and the status of every path the kit uses; the configuration keys the kit renders and the
validation errors of bad configurations (exit status and console lines); the log lines a person
or the kit reads (config listing, log setup line, HTTP server lines in ``mmc-meta.log``, the
audit line, the exit line). Both services take ``/tmp/mmc_meta_service.lock``, so they run one
after the other, never together. Providers are not compared: a real provider needs the Ascend
driver (real-interfaces.md), so ``memcache_segment_*`` families cannot be observed on the real one.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from k3lab.launch.simimage.image import host_pythonpath
from k3lab.launch.simimage.vllm_ascend import FetchError

MAIN = "import sys; from memcache_hybrid import MetaService; sys.exit(MetaService.main())"  # the guide's command
# read by conformance/ and the lifecycle gates (segment samples need a provider; HELP and TYPE do not)
KIT_READS = ("memcache_total_capacity_bytes", "memcache_segment_capacity_bytes", "memcache_stored_keys",
             "memcache_allocated_bytes", "memcache_evict_operations_total")
PATHS = ("/health", "/metrics", "/metrics/summary", "/get_all_segments", "/no-such-path")
CONSOLE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} (?P<level>[A-Z]+) \[\d+-\d+\]\[(?P<tag>[^]]+)\] (?P<msg>.*)$")
FILE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} \d+ (?P<level>[a-z]+) \[(?P<tag>[^]]+)\] (?P<msg>.*)$")
START_TIMEOUT_S = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def three_ports() -> dict[str, int]:
    chosen: list[int] = []
    while len(chosen) < 3:  # the kernel may hand out a just-closed port again
        port = free_port()
        if port not in chosen:
            chosen.append(port)
    return dict(zip(("meta", "store", "http"), chosen))


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    logs: Path
    http: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # path -> (status, content type, body)
    ports: dict[str, int] = field(default_factory=dict)


class Impl:
    """How to start one implementation of ``MetaService.main()``."""

    def __init__(self, name: str, python: str, env: dict[str, str]) -> None:
        self.name, self.python, self.env = name, python, env

    def conf(self, tmp: Path, ports: dict[str, int], *extra: str) -> Path:
        path = tmp / f"{self.name}-mmc-meta.conf"
        path.write_text("\n".join([
            f"ock.mmc.meta_service_url = tcp://127.0.0.1:{ports['meta']}",
            f"ock.mmc.meta_service.config_store_url = tcp://127.0.0.1:{ports['store']}",
            f"ock.mmc.meta_service.metrics_url = http://127.0.0.1:{ports['http']}",
            f"ock.mmc.log_path = {tmp / (self.name + '-logs')}", *extra]) + "\n")
        return path

    def run_once(self, tmp: Path, *extra: str) -> Run:
        """A configuration the service refuses: it must exit on its own."""
        ports = three_ports()
        env = {**self.env, "MMC_META_CONFIG_PATH": str(self.conf(tmp, ports, *extra))}
        done = subprocess.run([self.python, "-u", "-c", MAIN], env=env, capture_output=True, text=True, timeout=15)
        return Run(done.returncode, done.stdout, done.stderr, tmp / f"{self.name}-logs" / "logs", ports=ports)

    def serve(self, tmp: Path, kit_conf: str | None = None) -> Run:
        """Start, query every path, stop with SIGTERM. ``kit_conf``: a rendered mmc-meta.conf, moved to loopback."""
        ports = three_ports()
        conf = self.conf(tmp, ports, "ock.mmc.log_level = info")
        if kit_conf is not None:
            text = re.sub(r"//[\d.]+:\d+", lambda m: "//127.0.0.1:{}", kit_conf)
            conf.write_text(text.format(ports["meta"], ports["store"], ports["http"]) +
                            f"ock.mmc.log_path = {tmp / (self.name + '-logs')}\n")
        env = {**self.env, "MMC_META_CONFIG_PATH": str(conf)}
        out, err = tmp / f"{self.name}.out", tmp / f"{self.name}.err"
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen([self.python, "-u", "-c", MAIN], env=env, stdout=o, stderr=e)
        http: dict[str, tuple[int, str, str]] = {}
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", ports["http"]), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)
            assert proc.poll() is None, f"{self.name} MetaService exited:\n{out.read_text()}\n{err.read_text()}"
            for path in PATHS:
                http[path] = get(ports["http"], path)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait(5)
        return Run(rc, out.read_text(), err.read_text(), tmp / f"{self.name}-logs" / "logs", http, ports)


def get(port: int, path: str) -> tuple[int, str, str]:
    # requests, as the kit's checks use it: the real server (acc_links) never answers a 200 to a
    # request with "Connection: close" (urllib's default), only keep-alive requests
    session = requests.Session()
    session.trust_env = False
    r = session.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    return r.status_code, r.headers.get("Content-Type", ""), r.text


@pytest.fixture(scope="module")
def impls() -> dict[str, Impl]:
    from contracts.fetch import memcache_venv

    try:
        python, site = memcache_venv()
    except FetchError as exc:
        pytest.fail(f"cannot install the real MemCache: {exc}", pytrace=False)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MMC_", "K3SIM_", "LD_LIBRARY_PATH"))}
    real = Impl("real", str(python), {**base, "LD_LIBRARY_PATH": f"{site}/memfabric_hybrid/lib:{site}/memcache_hybrid/lib"})
    standin = Impl("standin", sys.executable, {**base, "PYTHONPATH": os.pathsep.join(host_pythonpath()), "PYTHONDONTWRITEBYTECODE": "1"})
    return {"real": real, "standin": standin}


@pytest.fixture(scope="module")
def served(impls, tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("meta")
    return {name: impl.serve(tmp) for name, impl in impls.items()}  # one after the other: one lock file


# ------------------------------------------------------------------------------- comparisons


def families(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^# (HELP|TYPE) (\S+) ?(.*)$", line)
        if m:
            out.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    return out


def metric_drift(real: str, standin: str) -> list[str]:
    r, s = families(real), families(standin)
    problems = [f"{name}: the kit reads it, the real MetaService does not serve it" for name in KIT_READS if name not in r]
    problems += [f"{name}: the kit reads it, the stand-in does not serve it" for name in KIT_READS if name not in s]
    for name in sorted(s):
        if name not in r:
            problems.append(f"{name}: served by the stand-in only")
        elif s[name] != r[name]:
            problems.append(f"{name}: stand-in {s[name]} != real {r[name]}")
    return problems


def health_drift(real: tuple[int, str, str], standin: tuple[int, str, str]) -> list[str]:
    import json

    problems = []
    if real[:2] != standin[:2]:
        problems.append(f"/health status/content type: stand-in {standin[:2]} != real {real[:2]}")
    try:
        if json.loads(real[2]) != json.loads(standin[2]):
            problems.append(f"/health body: stand-in {standin[2]} != real {real[2]}")
    except ValueError:
        problems.append(f"/health body is not JSON: stand-in {standin[2]!r}, real {real[2]!r}")
    return problems


def console_messages(stdout: str) -> list[tuple[str, str, str]]:
    return [(m["level"], m["tag"], m["msg"]) for line in stdout.splitlines() if (m := CONSOLE.match(line))]


def file_messages(path: Path) -> list[tuple[str, str, str]]:
    text = path.read_text() if path.exists() else ""
    return [(m["level"], m["tag"], m["msg"]) for line in text.splitlines() if (m := FILE.match(line))]


# ------------------------------------------------------------------------------------ tests


def test_metric_families_match(served):
    assert not metric_drift(served["real"].http["/metrics"][2], served["standin"].http["/metrics"][2])


def test_metrics_content_type_matches(served):
    assert served["standin"].http["/metrics"][1] == served["real"].http["/metrics"][1]


def test_health_matches(served):
    assert not health_drift(served["real"].http["/health"], served["standin"].http["/health"])


@pytest.mark.parametrize("path", PATHS)
def test_path_status_matches(served, path):
    assert served["standin"].http[path][0] == served["real"].http[path][0], path


def test_clean_stop_matches(served):
    for run in served.values():
        assert run.rc == 0 and "Received exit signal[15]" in run.stdout


def test_config_listing_matches(served):
    """Both list the keys they loaded (the kit renders these four plus log_path) the same way."""
    real = [(lvl, tag, msg) for lvl, tag, msg in console_messages(served["real"].stdout) if "LoadFromFile" in tag]
    standin = [(lvl, tag, msg) for lvl, tag, msg in console_messages(served["standin"].stdout) if "LoadFromFile" in tag]
    assert real and [t[:2] for t in standin] == [t[:2] for t in real]
    # the same count line and the same keys in the same order (values hold each run's ports and paths)
    assert [m.split(" = ")[0] for _, _, m in standin] == [m.split(" = ")[0] for _, _, m in real]


def test_log_setup_line_matches(served):
    def line(run: Run, name: str) -> str:
        text = next(s for s in run.stdout.splitlines() if s.startswith("Meta service log level"))
        return text.replace(f"{name}-logs", "X")
    assert line(served["standin"], "standin") == line(served["real"], "real")


def test_log_file_lines_match(served):
    """What a person greps for in mmc-meta.log and the audit log: the same level, tag and message."""
    for wanted, log in (("HTTP server started on", "mmc-meta.log"), ("Starting HTTP server on", "mmc-meta.log"),
                        ("Meta Service launched successfully", "mmc-meta-audit.log")):
        found = {}
        for name, run in served.items():
            hits = [(lvl, tag, msg.replace(str(run.ports["http"]), "PORT")) for lvl, tag, msg in
                    file_messages(run.logs / log) if msg.startswith(wanted)]
            assert hits, f"{name}: no '{wanted}' line in {log}"
            found[name] = hits[0]
        assert found["standin"] == found["real"], found


# bad configurations: (extra lines); compared on exit status and the console error lines
BAD_CONFIGS = {
    "unknown-key": ["ock.mmc.local_service.world_size = 4"],
    "wrong-type": ["ock.mmc.evict_threshold_low = often"],
    "tls-without-files": ["ock.mmc.tls.enable = true"],
    "out-of-range": ["ock.mmc.evict_threshold_high = 120", "ock.mmc.log_level = loud"],
    "repeated-key": ["ock.mmc.log_level = info", "ock.mmc.log_level = debug"],
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_validation_errors_match(impls, tmp_path, case):
    real = impls["real"].run_once(tmp_path, *BAD_CONFIGS[case])
    standin = impls["standin"].run_once(tmp_path, *BAD_CONFIGS[case])
    assert real.rc != 0, f"the real MetaService accepted {case}"
    assert standin.rc == real.rc

    def errors(run: Run, name: str) -> list[str]:
        return [line.replace(f"{name}-mmc-meta.conf", "CONF") for line in run.stderr.splitlines()]
    assert errors(standin, "standin") == errors(real, "real")


def test_kit_rendered_config_starts_both(impls, tmp_path):
    """The mmc-meta.conf the kit renders (moved to loopback) starts the real service and the stand-in."""
    from k3lab.model import siminventory
    from k3lab.render import artefacts as render

    files = render.build("a3_pd_pooled", siminventory.default("a3_pd_pooled")).files
    text = next(f["mmc-meta.conf"] for f in files.values() if "mmc-meta.conf" in f)
    assert [line.split(" = ")[0] for line in text.splitlines() if " = " in line] == [
        "ock.mmc.meta_service_url", "ock.mmc.meta_service.config_store_url", "ock.mmc.meta_service.metrics_url",
        "ock.mmc.log_level"]
    for name, impl in impls.items():
        run = impl.serve(tmp_path, kit_conf=text)
        assert run.rc == 0 and run.http["/health"][0] == 200, f"{name}: {run.stdout}\n{run.stderr}"


# ------------------------------------------------------------------------------- drift


def test_drift_renamed_metric_fails(served):
    renamed = served["standin"].http["/metrics"][2].replace("memcache_stored_keys", "memcache_stored_key_count")
    problems = metric_drift(served["real"].http["/metrics"][2], renamed)
    assert "memcache_stored_keys: the kit reads it, the stand-in does not serve it" in problems


def test_drift_changed_health_body_fails(served):
    status, kind, _ = served["standin"].http["/health"]
    problems = health_drift(served["real"].http["/health"], (status, kind, '{"status":"ok"}'))
    assert problems and "/health body" in problems[0]
