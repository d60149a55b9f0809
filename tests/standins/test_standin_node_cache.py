"""The stand-ins' node-file cache (k3sim.hw): content-keyed marshal files, bounded in number."""
from __future__ import annotations

import importlib
import json
import os
import time

from tests.standins._vllm import SITE  # noqa: F401  (puts the stand-in site on sys.path)

hw = importlib.import_module("k3sim.hw")  # once the stand-in site is on sys.path


def _entries(directory) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_a_miss_prunes_the_cache_to_its_newest_entries(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    old = time.time() - 3600
    for i in range(5):  # five earlier nodes' entries, the higher i the newer
        (cache / f"node-{i}-0000000{i}.marshal").write_bytes(b"x")
        os.utime(cache / f"node-{i}-0000000{i}.marshal", (old + i, old + i))
    (cache / "node-9-00000009.marshal.4242").write_bytes(b"")  # a writer that died mid-write
    os.utime(cache / "node-9-00000009.marshal.4242", (old, old))
    (cache / "node-8-00000008.marshal.4343").write_bytes(b"")  # a writer at work now: left alone
    (cache / "tool-service").write_text("1234")  # not the cache's: left alone
    monkeypatch.setattr(hw, "CACHE_DIR", str(cache))
    monkeypatch.setattr(hw, "CACHE_KEEP", 3)
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"node": "t0", "platform": "A2", "faults": {}}))
    monkeypatch.setenv(hw.NODE_FILE_ENV, str(node))

    assert hw.load()["platform"] == "A2"
    written = {name for name in _entries(cache) if name.startswith(f"node-{node.stat().st_size}-")}
    assert len(written) == 1
    assert _entries(cache) == written | {"node-4-00000004.marshal", "node-3-00000003.marshal",
                                         "node-8-00000008.marshal.4343", "tool-service"}
    assert hw.load()["platform"] == "A2"  # a hit: served from the entry, nothing pruned
    assert len(_entries(cache)) == 5


def test_prune_without_a_cache_directory_is_quiet(tmp_path):
    hw.prune(str(tmp_path / "absent"), 3)
