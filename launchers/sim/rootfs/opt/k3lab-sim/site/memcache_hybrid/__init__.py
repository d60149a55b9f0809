"""Stand-in for MemCache's Python package (memcache_hybrid): the real public names.

The real package imports memfabric_hybrid, loads ``lib/libmf_memcache.so`` and exports these from
``_pymmc``; here they come from ``k3sim.memcache``. Config templates are in ``config/``.
"""
import memfabric_hybrid  # noqa: F401  (the real package needs MemFabric importable too)
from k3sim.memcache.meta_service import main as _meta_main
from k3sim.memcache.store import DistributedObjectStore


class MetaService:
    @staticmethod
    def main() -> int:
        """Blocking: runs the MetaService until SIGINT/SIGTERM; -1 when it cannot start."""
        return _meta_main()


class MetaConfig:
    """Placeholder: ``MetaService.setup(MetaConfig())`` is not simulated; use MMC_META_CONFIG_PATH."""


class LocalConfig:
    """Placeholder: the simulated client reads MMC_LOCAL_CONFIG_PATH."""


class KeyInfo:
    """Placeholder for the real key metadata type."""


class ReplicateConfig:
    """Placeholder: the simulated store keeps one replica."""


__all__ = ["DistributedObjectStore", "KeyInfo", "LocalConfig", "MetaConfig", "MetaService", "ReplicateConfig"]
