"""``DistributedObjectStore``: the MemCache client, and with ``init_bm`` the LocalService provider.

As in the real library, initialisation is process-wide (``mmc_init``): a second ``init`` logs
"mmc is already init" and returns 0, and every store object shares one connection. ``init``
connects to the MetaService; with ``init_bm`` it also joins the BM through the config store (which
assigns the segment rank in join order) and mounts a DRAM (and HBM) segment when its size is
non-zero. Both connections stay open while the process lives; the MetaService drops the segment
when they close. Object calls are thread-safe and return MemCache result codes.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from k3sim import hw
from k3sim.memcache import codes, config, wire
from k3sim.memcache.log import Log

MAX_DEVICE_ID = 383
RETRY_INTERVAL_S = 0.2
_log = Log()


class Link:
    """One request/reply connection; a broken link stays broken (the caller gets -3017)."""

    def __init__(self, host: str, port: int, timeout: float):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")
        self.lock = threading.Lock()
        self.broken = False

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.broken:
                raise ConnectionError("connection to the MetaService is broken")
            try:
                self.sock.sendall(wire.frame(request))
                line = self.file.readline()
                if not line:
                    raise ConnectionError("connection closed by the MetaService")
                return wire.unframe(line)
            except (OSError, ValueError):
                self.broken = True  # a late reply would answer the next request
                raise

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def connect(url: str, retry_ms: int, timeout: float) -> Link:
    """Connect to ``tcp://ip:port``, retrying every 200 ms for ``retry_ms`` (client.retry_milliseconds)."""
    host, port = config.parse_url(url, "tcp")
    deadline = time.monotonic() + retry_ms / 1000
    while True:
        _log.info("AccLink acc_tcp_server_default.cpp", f"Trying to connect to {host}:{port}")
        try:
            link = Link(host, port, timeout)
        except OSError as exc:
            if time.monotonic() >= deadline:
                _log.error("AccLink acc_tcp_server_default.cpp", f"Failed to connect to {host}:{port}, {exc}")
                raise
            time.sleep(RETRY_INTERVAL_S)
            continue
        _log.info("AccLink acc_tcp_server_default.cpp", f"Connect to {host}:{port} successfully, with ssl disable")
        return link


class Client:
    """The process-wide MemCache state behind every DistributedObjectStore."""

    def __init__(self, meta: Link, store: Link | None):
        self.meta, self.store = meta, store

    def call(self, request: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.meta.call(request)
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        for link in (self.meta, self.store):
            if link is not None:
                link.close()


_client: Client | None = None
_init_lock = threading.Lock()


def local_config() -> tuple[dict[str, Any] | None, int]:
    """The validated, aligned local configuration, or the result code for its failure."""
    path = os.environ.get("MMC_LOCAL_CONFIG_PATH")
    if not path:
        _log.error("MMC mmc_client.cpp", "MMC_LOCAL_CONFIG_PATH is not set")
        return None, codes.MMC_INVALID_PARAM
    try:
        values = config.load(path, config.LOCAL)
    except config.ConfigError as exc:
        for message in exc.messages:
            _log.error("MMC mmc_configuration.cpp", message)
        return None, codes.MMC_ERROR if exc.stage == "load" else codes.MMC_INVALID_PARAM
    for prefix, what in (("ock.mmc.tls", "acc_link"), ("ock.mmc.local_service.hcom.tls", "hcom"),
                         ("ock.mmc.config_store.tls", "config store")):
        if config.tls_problem(values, prefix):
            _log.error("MMC mmc_configuration.h", f"Invalid {what} TLS config")
            return None, codes.MMC_INVALID_PARAM
    return (values, codes.MMC_OK) if align(values) else (None, codes.MMC_INVALID_PARAM)


def align(values: dict[str, Any]) -> bool:
    """Align the sizes up (1GB for device_sdma/device_rdma, 2MB otherwise) and check the limits."""
    alignment = config.alignment_for(values["ock.mmc.local_service.protocol"])
    unit = "1GB" if alignment == config.GB else "2MB"
    for key in config.SIZE_KEYS:
        values[key] = config.align_up(values[key], alignment)
        if values[key] > config.TB:
            _log.error("MMC mmc_configuration.h", f"After alignment {unit}, {key}({values[key]}) exceeds ({config.TB})")
            return False
    for size_key, max_key in ((config.DRAM_KEY, config.MAX_DRAM_KEY), (config.HBM_KEY, config.MAX_HBM_KEY)):
        if values[max_key] < values[size_key]:
            _log.error("MMC mmc_configuration.h",
                       f"{max_key}({values[max_key]}) is smaller than {size_key}({values[size_key]})")
            return False
    _log.info("MMC mmc_configuration.h", f"After alignment {unit}, {config.DRAM_KEY} is {values[config.DRAM_KEY]}, "
                                        f"{config.MAX_DRAM_KEY} is {values[config.MAX_DRAM_KEY]}")
    return True


def start(device_id: int, init_bm: bool) -> int:
    """mmc_init: config, MetaService connection, then (init_bm) BM join and segment mounts."""
    global _client
    values, result = local_config()
    if values is None:
        return result
    timeout = float(values["ock.mmc.client.timeout.seconds"])
    retry_ms = values["ock.mmc.client.retry_milliseconds"]
    try:
        meta = connect(values["ock.mmc.meta_service_url"], retry_ms, timeout)
    except (OSError, ValueError):
        _log.error("MMC mmc_client.cpp", f"mmcc init failed, ret:{codes.MMC_NOT_CONNET_META}")
        return codes.MMC_NOT_CONNET_META
    store = None
    if init_bm:
        store = start_local_service(values, device_id, meta, retry_ms, timeout)
        if store is None:
            meta.close()
            _log.error("MMC mmc_client.cpp", "failed to create or start local service")
            return codes.MMC_ERROR
    _log.info("MMC mmc_client_default.cpp", "Starting client mmc_client")
    _client = Client(meta, store)
    return codes.MMC_OK


def start_local_service(values: dict[str, Any], device_id: int, meta: Link, retry_ms: int,
                        timeout: float) -> Link | None:
    if hw.faults("provider").get("exit"):
        return None  # injected: the LocalService cannot start on this node
    _log.info("MMC mmc_local_service_default.cpp", "Starting meta service local_service")
    world_size = values["ock.mmc.local_service.world_size"]
    try:
        store = connect(values["ock.mmc.local_service.config_store_url"], retry_ms, timeout)
        reply = store.call({"op": "join", "world_size": world_size, "device_id": device_id})
    except (OSError, ValueError):
        return None
    if reply.get("ret") != codes.MMC_OK:
        _log.error("SMEM smem_bm_entry_manager.cpp", f"Failed to auto ranking, {reply.get('error', '')}")
        store.close()
        return None
    rank = int(reply["rank"])
    dram, hbm = values[config.DRAM_KEY], values[config.HBM_KEY]
    short = hw.faults("provider").get("dram_size")
    if short is not None and dram > 0:
        dram = config.parse_size(str(short)) or 0  # injected: the node has less memory than configured
    _log.info("MMC mmc_bm_proxy.cpp", f"init bm success, rank:{rank}, worldSize:{world_size}, hbm{{{hbm}}}, dram{{{dram}}}")
    media = [(medium, size) for medium, size in (("DRAM", dram), ("HBM", hbm)) if size > 0]
    for medium, size in media:
        _log.info("MMC mmc_local_service_default.cpp", f"mmc local register capacity:{size}, type:1")
        try:
            result = meta.call({"op": "mount", "rank": rank, "medium": medium, "capacity": size})["ret"]
        except (OSError, ValueError):
            result = codes.MMC_NOT_CONNET_META
        if result != codes.MMC_OK:
            _log.error("MMC mmc_local_service_default.cpp", f"bm register failed, ret:{result}")
            store.close()
            return None
    if media:
        _log.info("MMC mmc_local_service_default.cpp", f"bm register succeed, bmRankId={rank}, type num={len(media)}")
    _log.info("MMC mmc_local_service_default.cpp",
              f"Started LocalService (local_service) server {values['ock.mmc.meta_service_url']}")
    return store


def blob(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None


class DistributedObjectStore:
    def init(self, device_id: int, init_bm: bool = True) -> int:
        if not 0 <= int(device_id) <= MAX_DEVICE_ID:
            _log.error("MMC mmc.cpp", f"device id {device_id} is invalid, it should be between 0-{MAX_DEVICE_ID}")
            return codes.MMC_INVALID_PARAM
        with _init_lock:
            if _client is not None:
                _log.info("MMC mmc.cpp", "mmc is already init")
                return codes.MMC_OK
            return start(int(device_id), bool(init_bm))

    def close(self) -> None:
        global _client
        with _init_lock:
            if _client is not None:
                _client.close()
                _client = None

    def _call(self, request: dict[str, Any]) -> dict[str, Any] | None:
        client = _client
        return None if client is None else client.call(request)

    @staticmethod
    def _failure() -> int:
        return codes.MMC_CLIENT_NOT_INIT if _client is None else codes.MMC_NOT_CONNET_META

    def put(self, key: str, value: bytes) -> int:
        data = blob(value)
        if data is None:
            return codes.MMC_INVALID_PARAM
        reply = self._call({"op": "put", "key": key, "value": wire.pack(data)})
        return self._failure() if reply is None else reply["ret"]

    def batch_put(self, keys: list[str], values: list[bytes]) -> list[int]:
        data = [blob(v) for v in values]
        if len(keys) != len(values) or any(d is None for d in data):
            return [codes.MMC_INVALID_PARAM] * len(keys)
        reply = self._call({"op": "batch_put", "keys": list(keys), "values": [wire.pack(d) for d in data]})
        return [self._failure()] * len(keys) if reply is None else reply["results"]

    def get(self, key: str) -> bytes:
        reply = self._call({"op": "get", "key": key})
        return wire.unpack(reply["value"]) if reply and reply["ret"] == codes.MMC_OK else b""

    def batch_get(self, keys: list[str]) -> list[bytes]:
        reply = self._call({"op": "batch_get", "keys": list(keys)})
        if reply is None:
            return [b""] * len(keys)
        return [wire.unpack(v) if r == codes.MMC_OK else b"" for r, v in zip(reply["results"], reply["values"])]

    def is_exist(self, key: str) -> int:
        reply = self._call({"op": "exist", "key": key})
        return self._failure() if reply is None else int(reply["ret"] == codes.MMC_OK)

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        reply = self._call({"op": "batch_exist", "keys": list(keys)})
        if reply is None:
            return [self._failure()] * len(keys)
        return [int(r == codes.MMC_OK) for r in reply["results"]]

    def remove(self, key: str) -> int:
        reply = self._call({"op": "remove", "key": key})
        return self._failure() if reply is None else reply["ret"]
