"""MemCache pool artefacts: MetaService and client configs, runtime_env.sh, the standalone provider.

Contents follow K3.1 Pro §5.3.1-§5.3.4 (A3 reference) and K3 §5.1.2.1. Engine clients register
no DRAM where standalone providers exist (``dram.size = 0GB``); where engines are the only pool
members (K3 8P8D, 950DT pooled) their client config contributes the guide's 1GB.
"""
from __future__ import annotations

import re

from k3lab.model.catalog import Scenario
from k3lab.model.inventory import Inventory, Node
from k3lab.render.scripts import Cmd, export, runtime_env_effect
from k3lab.render.shell import Raw, Script, Source, Var, w

RUNTIME_ENV = """#!/usr/bin/env bash
export MEMC_PYTHON="${MEMC_PYTHON:-python3}"
MEMFABRIC_PACKAGE_DIR="$("$MEMC_PYTHON" -c 'import importlib.util; print(next(iter(importlib.util.find_spec("memfabric_hybrid").submodule_search_locations)))')"
MEMCACHE_PACKAGE_DIR="$("$MEMC_PYTHON" -c 'import importlib.util; print(next(iter(importlib.util.find_spec("memcache_hybrid").submodule_search_locations)))')"
export LD_LIBRARY_PATH="${MEMFABRIC_PACKAGE_DIR}/lib:${MEMCACHE_PACKAGE_DIR}/lib:${LD_LIBRARY_PATH:-}"
export PYTHONHASHSEED=0
"""

STANDALONE = """import time
from memcache_hybrid import DistributedObjectStore

if __name__ == "__main__":
    store = DistributedObjectStore()
    result = store.init(0)
    if result != 0:
        print(f"Failed to initialize MemCache, result = {result}", flush=True)
        raise SystemExit(1)
    print("Successfully initialized memcache.", flush=True)
    while True:
        time.sleep(1)
"""

META_START = "from memcache_hybrid import MetaService; MetaService.main()"


def meta_conf(ip: str, inv: Inventory) -> str:
    p = inv.ports
    return (f"ock.mmc.meta_service_url = tcp://{ip}:{p.meta_service}\n"
            f"ock.mmc.meta_service.config_store_url = tcp://{ip}:{p.config_store}\n"
            f"ock.mmc.meta_service.metrics_url = http://{ip}:{p.meta_metrics}\n"
            "ock.mmc.log_level = info\n")


GUIDE_DRAM_SIZE = "1GB"  # K3.1 Pro §5.3.2: the guide's default per LocalService
GUIDE_PROTOCOL = "device_sdma"  # the A3 reference; the inventory sets another per node and fabric


_UNITS = {"": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def size_bytes(size: str, protocol: str) -> int:
    """What MemCache registers for ``dram.size``: aligned up to 1 GB (device_*) or 2 MB (host_*)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(KB|MB|GB|TB)?", size)
    if not m:
        raise ValueError(f"dram.size {size!r} is not a MemCache size")
    raw = int(float(m.group(1)) * _UNITS[m.group(2) or ""])
    align = 1 << 30 if protocol.startswith("device_") else 2 << 20
    return -(-raw // align) * align


def member_bytes(node: Node) -> int:
    """The DRAM one node's pool member contributes (provider or 950DT engine client)."""
    return size_bytes(node.memcache_dram_size or GUIDE_DRAM_SIZE, node.memcache_protocol or GUIDE_PROTOCOL)


def local_conf(ip: str, inv: Inventory, dram: str, protocol: str = GUIDE_PROTOCOL) -> str:
    p = inv.ports
    return (f"ock.mmc.meta_service_url = tcp://{ip}:{p.meta_service}\n"
            f"ock.mmc.local_service.config_store_url = tcp://{ip}:{p.config_store}\n"
            "ock.mmc.log_level = info\n"
            "ock.mmc.local_service.world_size = 256\n"
            f"ock.mmc.local_service.protocol = {protocol}\n"
            f"ock.mmc.local_service.dram.size = {dram}\n"
            "ock.mmc.local_service.max.dram.size = 1024GB\n")


def files_for(sc: Scenario, inv: Inventory, node: Node, meta: Node | None, runtime_env: bool,
              engine_conf: str | None) -> dict[str, tuple[str, str]]:
    """Pool files one node needs: artefact name -> (text, path in the container).

    ``runtime_env``: the family's MemCache nodes source runtime_env.sh; ``engine_conf``: where this
    node's engine client config goes when its family gives engines their own (else none)."""
    if meta is None:
        return {}
    d = inv.paths.memcache_config_dir
    out: dict[str, tuple[str, str]] = {}
    engine = node.role in ("prefill", "decode")
    if runtime_env and (node.name == meta.name or engine):
        out["runtime_env.sh"] = (RUNTIME_ENV, f"{d}/runtime_env.sh")
    if node.name == meta.name:
        out["mmc-meta.conf"] = (meta_conf(meta.local_ip, inv), f"{d}/mmc-meta.conf")
    dram, proto = node.memcache_dram_size or GUIDE_DRAM_SIZE, node.memcache_protocol or GUIDE_PROTOCOL
    if sc.pool == "providers" and engine:
        # engine clients keep 0GB beside a provider, to avoid allocating the node's share twice (§5.3.2)
        out["mmc-local.conf"] = (local_conf(meta.local_ip, inv, "0GB", proto), f"{d}/mmc-local.conf")
        out["mmc-local-standalone.conf"] = (local_conf(meta.local_ip, inv, dram, proto), f"{d}/mmc-local-standalone.conf")
        out["memcache_standalone.py"] = (STANDALONE, f"{d}/memcache_standalone.py")
    elif engine_conf:
        out["mmc-local.conf"] = (local_conf(meta.local_ip, inv, dram, proto), engine_conf)
    return out


def metaservice_script_k3(inv: Inventory) -> Script:
    """K3 §5.1.2.1."""
    d = inv.paths.memcache_config_dir
    return Script([Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail"), export("MMC_META_CONFIG_PATH", f"{d}/mmc-meta.conf"),
                   Cmd("python", "-c", META_START).done(exec_=True)])


def metaservice_script_k31(inv: Inventory) -> Script:
    """K3.1 Pro §5.3.3."""
    d = inv.paths.memcache_config_dir
    return Script([Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail"),
                   Source(w(f"{d}/runtime_env.sh"), effect=runtime_env_effect), export("MMC_META_CONFIG_PATH", f"{d}/mmc-meta.conf"),
                   Cmd(w(Var("MEMC_PYTHON")), "-u", "-c", META_START).done(exec_=True)])


def provider_script(inv: Inventory) -> Script:
    """K3.1 Pro §5.3.4: one standalone provider per P/D node."""
    d = inv.paths.memcache_config_dir
    return Script([Raw("#!/usr/bin/env bash"), Raw("set -euo pipefail"), Source(w(f"{d}/runtime_env.sh"), effect=runtime_env_effect),
                   export("MMC_LOCAL_CONFIG_PATH", f"{d}/mmc-local-standalone.conf"),
                   Cmd(w(Var("MEMC_PYTHON")), "-u", f"{d}/memcache_standalone.py").done(exec_=True)])
