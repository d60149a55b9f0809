"""``MetaService.main()``: the blocking MemCache metadata service (mmc_meta_service_process.cpp).

It takes the single-instance lock, loads ``MMC_META_CONFIG_PATH``, binds the meta service port
(client requests), the config store port (BM rank joins) and the HTTP port, then runs until
SIGINT/SIGTERM. Console messages and return codes are the real ones; failures return -1.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import signal
import socketserver
import threading
import time
from pathlib import Path
from typing import Any, Callable

from k3sim import hw
from k3sim.memcache import codes, config, http_api, wire
from k3sim.memcache.log import FileLog, console, stderr
from k3sim.memcache.pool import Pool

# The real single-instance lock; tests running in parallel give each MetaService its own.
LOCK_FILE = os.environ.get("K3SIM_MMC_LOCK_FILE", "/tmp/mmc_meta_service.lock")
TAG = "MMC mmc_meta_service_process.cpp"
LOADED_TAG = "MMC mmc_configuration.cpp:159 LoadFromFile"
ITEM_TAG = "MMC mmc_configuration.cpp:167 LoadFromFile"
LOG_LEVELS = {"debug": 0, "info": 1, "warn": 2, "error": 3}
FAULT_POLL_S = 0.5
SHUTDOWN_POLL_S = 0.1  # how soon a stopping server notices; also bounds the stop time
_connection_ids = itertools.count(1)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def meta_handler(pool: Pool) -> type[socketserver.StreamRequestHandler]:
    """Client requests; whatever a connection mounted is unmounted when it closes."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            conn = next(_connection_ids)
            try:
                for line in self.rfile:
                    self.wfile.write(wire.frame(dispatch(pool, conn, wire.unframe(line))))
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a broken or garbled client loses its connection, like any transport error
            finally:
                pool.unmount(conn)

    return Handler


def config_store_handler(pool: Pool) -> type[socketserver.StreamRequestHandler]:
    """BM joins: a rank is held for as long as the joining connection stays open."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            conn = next(_connection_ids)
            try:
                for line in self.rfile:
                    request = wire.unframe(line)
                    if request.get("op") != "join":
                        reply: dict[str, Any] = {"ret": codes.MMC_INVALID_PARAM, "error": "unknown request"}
                    else:
                        ret, rank, reason = pool.join(conn, int(request["world_size"]))
                        reply = {"ret": ret, "rank": rank, "error": reason}
                    self.wfile.write(wire.frame(reply))
            except (OSError, ValueError, KeyError, TypeError):
                pass
            finally:
                pool.leave(conn)

    return Handler


def _batch_get(pool: Pool, conn: int, request: dict[str, Any]) -> dict[str, Any]:
    found = pool.batch_get(request["keys"])
    return {"ret": codes.MMC_OK, "results": [r for r, _ in found], "values": [wire.pack(v) for _, v in found]}


def _get(pool: Pool, conn: int, request: dict[str, Any]) -> dict[str, Any]:
    ret, value = pool.get(request["key"])
    return {"ret": ret, "value": wire.pack(value)}


OPS: dict[str, Callable[[Pool, int, dict[str, Any]], dict[str, Any]]] = {
    "mount": lambda pool, conn, r: {"ret": pool.mount(conn, int(r["rank"]), r["medium"], int(r["capacity"]))},
    "put": lambda pool, conn, r: {"ret": pool.put(r["key"], wire.unpack(r["value"]))},
    "batch_put": lambda pool, conn, r: {"ret": codes.MMC_OK, "results": pool.batch_put(
        r["keys"], [wire.unpack(v) for v in r["values"]])},
    "get": _get,
    "batch_get": _batch_get,
    "exist": lambda pool, conn, r: {"ret": pool.exist(r["key"])},
    "batch_exist": lambda pool, conn, r: {"ret": codes.MMC_OK, "results": pool.batch_exist(r["keys"])},
    "remove": lambda pool, conn, r: {"ret": pool.remove(r["key"])},
}


def dispatch(pool: Pool, conn: int, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    handler = OPS.get(op) if isinstance(op, str) else None
    if handler is None:
        return {"ret": codes.MMC_INVALID_PARAM, "error": f"unknown op {op}"}
    return handler(pool, conn, request)


def take_lock() -> int | None:
    """The real CheckIsRunning: an fcntl write lock on /tmp/mmc_meta_service.lock."""
    try:
        fd = os.open(LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError as exc:
        stderr(f"Open file {LOCK_FILE} failed, error message is {exc.strerror}.")
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        stderr("Fail to start mmc_meta_service, process lock file is locked.")
        os.close(fd)
        return None
    return fd


def load_config() -> dict[str, Any] | None:
    path = os.environ.get("MMC_META_CONFIG_PATH")
    if not path:
        print("[WARNING] MMC_META_CONFIG_PATH is not set. All configuration items use default values.", flush=True)
    try:
        values = config.load(path or None, config.META)
    except config.ConfigError as exc:
        if exc.stage == "load":
            for message in exc.messages:
                stderr(message)
            stderr("Failed to load config from file")
        else:
            stderr(f"Wrong configuration in file <{path}>, because of following mistakes:")
            for message in exc.messages:
                print(message, flush=True)
        return None
    if config.tls_problem(values, "ock.mmc.tls") or config.tls_problem(values, "ock.mmc.config_store.tls"):
        stderr("Invalid tls config.")
        stderr("Error, invalid config.")
        return None
    values["_items"] = file_items(path) if path else []
    return values


def file_items(path: str) -> list[tuple[str, str]]:
    """The file's ``key = value`` entries in order, as the real service lists them."""
    items = []
    for raw in Path(path).read_text().splitlines():
        entry = raw.strip()
        if entry and not entry.startswith("#") and "=" in entry:
            key, _, value = entry.partition("=")
            items.append((key.strip(), value.strip()))
    return items


def log_loaded(items: list[tuple[str, str]], write) -> None:
    write("info", LOADED_TAG, f"Loaded {len(items)} config items:")
    for key, value in items:
        write("info", ITEM_TAG, f"  {key} = {value}")


def init_logs(values: dict[str, Any]) -> tuple[FileLog, FileLog] | None:
    logs = Path(values["ock.mmc.log_path"]).absolute() / "logs"
    print(f"Meta service log level {LOG_LEVELS[values['ock.mmc.log_level'].lower()]}, "
          f"log path: {logs / 'mmc-meta.log'}, audit log path: {logs / 'mmc-meta-audit.log'}, "
          f"log rotation file size: {values['ock.mmc.log_rotation_file_size'] * 1024 * 1024}, "
          f"log rotation file count: {values['ock.mmc.log_rotation_file_count']}, log output target: 1", flush=True)
    try:
        log, audit = FileLog(logs / "mmc-meta.log"), FileLog(logs / "mmc-meta-audit.log")
    except OSError as exc:
        stderr(f"Failed to init spdlog, error: {exc}")
        return None
    log_loaded(values["_items"], log.write)  # the service loads its configuration a second time
    return log, audit


def start_meta_service(values: dict[str, Any], pool: Pool, log: FileLog) -> list[Server] | None:
    servers: list[Server] = []
    for key, handler in (("ock.mmc.meta_service_url", meta_handler(pool)),
                         ("ock.mmc.meta_service.config_store_url", config_store_handler(pool))):
        try:
            host, port = config.parse_url(values[key], "tcp")
            servers.append(Server((host, port), handler))
        except (ValueError, OSError) as exc:
            log.error(TAG, f"Failed to start {key} {values[key]}: {exc}")
            stop(servers, started=False)
            return None
    for server in servers:
        threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
    return servers


def start_http(values: dict[str, Any], pool: Pool, log: FileLog) -> Server | None:
    url = values["ock.mmc.meta_service.metrics_url"]
    try:
        host, port = config.parse_url(url, "http")
    except ValueError as exc:
        log.error(TAG, f"Invalid http URL, {exc}")
        log.error(TAG, f"Extract ip and port from http URL: {url} failed")
        return None
    log.write("trace", f"{TAG}:676 StartHttpServer", f"Starting HTTP server on {host}:{port}")
    try:
        server = http_api.serve(pool, host, port)
    except OSError as exc:
        log.error("MMC mmc_http_server.cpp", f"Failed to start HTTP server: {exc}")
        return None
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
    log.write("trace", "MMC mmc_http_server.cpp:631 Start", f"HTTP server started on {host}:{port}")
    return server


def stop(servers: list[socketserver.BaseServer], started: bool = True) -> None:
    for server in servers:
        if started:
            server.shutdown()
        server.server_close()


def main() -> int:
    lock_fd = take_lock()
    if lock_fd is None:
        stderr("Error, meta service is already running.")
        return -1
    try:
        return run()
    finally:
        os.close(lock_fd)


def run() -> int:
    values = load_config()
    if values is None:
        stderr("Error, failed to load config.")
        return -1
    received: list[int] = []
    previous = register_signals(received)
    try:
        if values["_items"]:
            log_loaded(values["_items"], console)
        logs = init_logs(values)
        if logs is None:
            stderr("Error, failed to init logger.")
            return -1
        log, audit = logs
        if values["ock.mmc.meta.ha.enable"]:
            stderr("Error, failed to start meta service leader election.")  # needs the K8s lease API
            return -1
        pool = Pool(values["ock.mmc.evict_threshold_high"], values["ock.mmc.evict_threshold_low"])
        servers = start_meta_service(values, pool, log)
        if servers is None:
            stderr("Error, failed to start MmcMetaService.")
            return -1
        http = start_http(values, pool, log)
        if http is None:
            stderr("Error, failed to start the HTTP Service.")
            stop(servers)
            return -1
        audit.write("warning", f"{TAG}:132 MainForPython", "Meta Service launched successfully")
        wait(received)
        print(f"Received exit signal[{received[0]}]", flush=True)
        stop(servers + [http])
        audit.write("warning", f"{TAG}:147 MainForPython", "Meta Service stopped")
        return 0
    finally:
        for signo, handler in previous.items():
            signal.signal(signo, handler)


def register_signals(received: list[int]) -> dict[int, Any]:
    previous = {}
    for signo, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        try:
            previous[signo] = signal.signal(signo, lambda num, _frame: received.append(num))
        except ValueError:  # not the main thread
            stderr(f"Register {name} handler failed")
    return previous


def wait(received: list[int]) -> None:
    """Poll for a signal every 100 ms (as the real loop does) and for an injected crash."""
    next_fault_check = 0.0
    while not received:
        if time.monotonic() >= next_fault_check:
            if hw.faults("metaservice").get("exit"):
                os._exit(1)  # simulated crash: no goodbye, sockets closed by the kernel
            next_fault_check = time.monotonic() + FAULT_POLL_S
        time.sleep(0.1)
