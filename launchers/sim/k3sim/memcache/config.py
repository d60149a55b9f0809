"""mmc-meta.conf / mmc-local.conf: ``key = value`` files with the real keys, defaults and checks.

Loading fails (the real ``LoadFromFile``) on an unknown key, a value of the wrong type, an
unparsable size or a missing required key; validation then checks ranges and enumerations and
reports every mistake. Messages are the real ones (mmc_configuration.cpp, mmc_config_validator.h).
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KB, MB, GB, TB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
LOG_LEVELS = "debug||info||warn||error"
PROTOCOLS = "host_rdma||host_urma||host_tcp||host_shm||device_rdma||device_sdma||device_urma||device_uboe"
DRAM_KEY, HBM_KEY = "ock.mmc.local_service.dram.size", "ock.mmc.local_service.hbm.size"
MAX_DRAM_KEY, MAX_HBM_KEY = "ock.mmc.local_service.max.dram.size", "ock.mmc.local_service.max.hbm.size"
SIZE_KEYS = (DRAM_KEY, HBM_KEY, MAX_DRAM_KEY, MAX_HBM_KEY)


@dataclass(frozen=True)
class Item:
    kind: str  # "str", "int", "bool" or "size"
    default: Any
    check: tuple = ()  # (low, high) for int, the "a||b" enumeration for str
    required: bool = False


def _tls(prefix: str, keys: tuple[str, ...]) -> dict[str, Item]:
    items = {f"{prefix}.enable": Item("bool", False)}
    items.update({f"{prefix}.{key}": Item("str", "") for key in keys})
    return items


TLS_FILES = ("ca.path", "ca.crl.path", "cert.path", "key.path", "key.pass.path", "package.path", "decrypter.path")
COMMON = {
    "ock.mmc.meta_service_url": Item("str", "tcp://127.0.0.1:5000"),
    "ock.mmc.log_level": Item("str", "info", LOG_LEVELS),
    **_tls("ock.mmc.tls", TLS_FILES),
    **_tls("ock.mmc.config_store.tls", TLS_FILES),
}
META = {
    **COMMON,
    "ock.mmc.meta_service.config_store_url": Item("str", "tcp://127.0.0.1:6000"),
    "ock.mmc.meta_service.metrics_url": Item("str", "http://127.0.0.1:8000"),
    "ock.mmc.meta.ha.enable": Item("bool", False),
    "ock.mmc.log_path": Item("str", "/var/log/memcache_hybrid"),
    "ock.mmc.log_rotation_file_size": Item("int", 20, (1, 500)),
    "ock.mmc.log_rotation_file_count": Item("int", 50, (1, 50)),
    "ock.mmc.evict_threshold_high": Item("int", 90, (1, 100)),
    "ock.mmc.evict_threshold_low": Item("int", 80, (1, 99)),
}
LOCAL = {
    **COMMON,
    "ock.mmc.local_service.config_store_url": Item("str", "tcp://127.0.0.1:6000"),
    "ock.mmc.local_service.world_size": Item("int", 256, (1, 1024)),
    "ock.mmc.local_service.protocol": Item("str", "host_rdma", PROTOCOLS, required=True),
    "ock.mmc.local_service.hcom_url": Item("str", "tcp://127.0.0.1:7000"),
    DRAM_KEY: Item("size", GB, required=True),
    HBM_KEY: Item("size", 0),
    MAX_DRAM_KEY: Item("size", 64 * GB),
    MAX_HBM_KEY: Item("size", 0),
    "ock.mmc.local_service.memory.pool.mode": Item("str", "standard", "standard||expanded"),
    **_tls("ock.mmc.local_service.hcom.tls", tuple(f for f in TLS_FILES if f != "package.path")),
    "ock.mmc.client.retry_milliseconds": Item("int", 0, (0, 600000)),
    "ock.mmc.client.timeout.seconds": Item("int", 60, (1, 600)),
    "ock.mmc.client.read_thread_pool.size": Item("int", 32, (1, 64)),
    "ock.mmc.client.write_thread_pool.size": Item("int", 4, (1, 64)),
    "ock.mmc.client.aggregate.io": Item("bool", True),
    "ock.mmc.client.aggregate.num": Item("int", 122, (1, 1024)),
}


class ConfigError(Exception):
    """``stage`` is "load" (the file could not be read as configuration) or "validate"."""

    def __init__(self, stage: str, messages: list[str]):
        super().__init__("\n".join(messages))
        self.stage = stage
        self.messages = messages


def parse_size(text: str) -> int | None:
    """134217728, 2048KB/2048K, 200MB/200m, 2.5GB, 1TB (case-insensitive); None if invalid."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)b?", text.strip().lower())
    if not match or (match.group(2) == "" and "." in match.group(1)):
        return None
    unit = {"": 1, "k": KB, "m": MB, "g": GB, "t": TB}[match.group(2)]
    return int(float(match.group(1)) * unit)


def convert(key: str, item: Item, text: str) -> Any:
    if item.kind == "int":
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ConfigError("load", [f"<{key}> was empty or in wrong type, it should be a int number."])
        return int(text)
    if item.kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ConfigError("load", [f"<{key}> should represent a bool value."])
        return text.lower() == "true"
    if item.kind == "size":
        size = parse_size(text)
        if size is None:
            raise ConfigError("load", [f"DRAM or HBM value ({text}) is invalid, please check "
                                       f"'{DRAM_KEY}' or '{HBM_KEY}'"])
        return size
    return text


def load(path: str | os.PathLike | None, schema: dict[str, Item]) -> dict[str, Any]:
    """The typed configuration: defaults overlaid with the file (None = defaults only)."""
    values = {key: item.default for key, item in schema.items()}
    if path is None:
        return values
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("load", [f"Open file {path} failed, error message is {exc.strerror}."]) from None
    seen: set[str] = set()
    for raw in text.splitlines():
        entry = _entry(raw, schema, seen)
        if entry is not None:
            key, value = entry
            values[key] = convert(key, schema[key], value)
            seen.add(key)
    missing = [key for key, item in schema.items() if item.required and key not in seen]
    if missing:
        raise ConfigError("load", [f"Required key <{key}> is not set." for key in missing])
    errors = [error for key, item in schema.items() if (error := check(key, item, values[key]))]
    if errors:
        raise ConfigError("validate", errors)
    return values


def _entry(raw: str, schema: dict[str, Item], seen: set[str]) -> tuple[str, str] | None:
    """(key, value) of one ``key = value`` line; None for a blank line or a comment."""
    entry = raw.strip()
    if not entry or entry.startswith("#"):
        return None
    key, sep, value = entry.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or key not in schema:
        raise ConfigError("load", [f"Invalid key <{key}>."])
    if key in seen:
        raise ConfigError("load", [f"Key <{key}> in configuration file is repeated."])
    return key, value


def check(key: str, item: Item, value: Any) -> str | None:
    if item.kind == "int" and item.check and not item.check[0] <= value <= item.check[1]:
        return f"Invalid value for <{key}>, it should be between {item.check[0]}-{item.check[1]}"
    if item.kind == "str" and item.check and value.lower() not in item.check.split("||"):
        return f"Invalid value for <{key}>, it should be one of {item.check}"
    return None


def tls_problem(values: dict[str, Any], prefix: str) -> str | None:
    """With TLS on, the CA, certificate and key files must exist and not be symlinks."""
    if not values.get(f"{prefix}.enable"):
        return None
    for key, what in (("ca.path", "CA(Certificate Authority) file"), ("cert.path", "certificate file"),
                      ("key.path", "private key file")):
        path = values.get(f"{prefix}.{key}", "")
        if not path or not os.path.isfile(path) or os.path.islink(path):
            return f"{what} does not exist or is a symlink"
    return None


def parse_url(url: str, scheme: str) -> tuple[str, int]:
    """``scheme://ipv4:port`` with port in [1025, 65535]; ValueError with the reason otherwise."""
    rest = url
    if "://" in url:
        if not url.startswith(f"{scheme}://"):
            raise ValueError(f"protol {scheme}:// not found")
        rest = url[len(scheme) + 3:]
    elif scheme == "tcp":
        raise ValueError(f"protol {scheme}:// not found")
    host, sep, port = rest.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"invalid ip {host or rest}") from None
    if not sep or not port.isdigit() or not 1025 <= int(port) <= 65535:
        raise ValueError(f"invalid port {port}, it should be between 1025-65535")
    return host, int(port)


def align_up(size: int, alignment: int) -> int:
    return (size + alignment - 1) // alignment * alignment


def alignment_for(protocol: str) -> int:
    """1GB for the device SDMA/RDMA protocols, 2MB otherwise (ValidateLocalServiceConfig)."""
    return GB if protocol in ("device_rdma", "device_sdma") else 2 * MB
