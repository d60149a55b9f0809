"""The MetaService's state: BM ranks, registered segments, stored objects and operation counters.

Objects live here, each allocated inside one segment (the DRAM segment with most room first);
segments belong to the client connection that mounted them and vanish with it, taking their
objects along, as when a real provider process exits. Above ``evict_threshold_high`` percent of
capacity the least recently used objects are evicted down to ``evict_threshold_low``.
"""
from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass

from k3sim.memcache import codes

# Operation families of /metrics, in the order BuildPrometheusMetrics writes them, with the
# name used in the HELP text and whether a not-found count exists.
OPERATIONS = [("alloc", "Alloc", False), ("batch_alloc", "BatchAlloc", False), ("get", "Get", True),
              ("batch_get", "BatchGet", True), ("remove", "Remove", True), ("batch_remove", "BatchRemove", True),
              ("remove_all", "RemoveAll", False), ("update_state", "UpdateState", True),
              ("batch_update_state", "BatchUpdateState", True), ("query", "Query", True),
              ("batch_query", "BatchQuery", True), ("get_all_keys", "GetAllKeys", False),
              ("exist_key", "ExistKey", True), ("batch_exist_key", "BatchExistKey", True),
              ("mount", "Mount", False), ("unmount", "Unmount", False)]


@dataclass
class Segment:
    rank: int
    medium: str  # "DRAM" or "HBM"
    capacity: int
    owner: int  # connection id
    used: int = 0

    @property
    def name(self) -> str:
        return f"rank-{self.rank}-{self.medium.lower()}"


@dataclass
class Blob:
    segment: Segment
    value: bytes


class Pool:
    def __init__(self, evict_high: int, evict_low: int):
        self.lock = threading.Lock()
        self.evict_high, self.evict_low = evict_high, evict_low
        self.world_size: int | None = None  # fixed by the first rank to join
        self.ranks: dict[int, int] = {}  # rank -> connection id
        self.segments: list[Segment] = []
        self.objects: OrderedDict[str, Blob] = OrderedDict()  # least recently used first
        self.counts: Counter[str] = Counter()

    # --- counters -----------------------------------------------------------------------------
    def count(self, op: str, result: int) -> None:
        self.counts[f"{op}_requests"] += 1
        outcome = "successes" if result == codes.MMC_OK else "not_found" if result == codes.MMC_UNMATCHED_KEY else "failures"
        self.counts[f"{op}_{outcome}"] += 1

    def count_batch(self, op: str, item_op: str, results: list[int]) -> None:
        for result in results:
            self.count(item_op, result)
        errors = [r for r in results if r not in (codes.MMC_OK, codes.MMC_UNMATCHED_KEY)]
        self.count(op, errors[0] if errors else codes.MMC_UNMATCHED_KEY if codes.MMC_UNMATCHED_KEY in results else 0)

    # --- BM ranks (config store) ---------------------------------------------------------------
    def join(self, conn: int, world_size: int) -> tuple[int, int | None, str]:
        with self.lock:
            if self.world_size is not None and self.ranks and world_size != self.world_size:
                return codes.MMC_ERROR, None, f"world size {world_size} differs from the joined ranks' {self.world_size}"
            if len(self.ranks) >= world_size:
                return codes.MMC_ERROR, None, f"world size {world_size} is full"
            self.world_size = world_size
            rank = min(set(range(world_size)) - set(self.ranks))
            self.ranks[rank] = conn
            return codes.MMC_OK, rank, ""

    def leave(self, conn: int) -> None:
        with self.lock:
            for rank in [r for r, owner in self.ranks.items() if owner == conn]:
                del self.ranks[rank]

    # --- segments ------------------------------------------------------------------------------
    def mount(self, conn: int, rank: int, medium: str, capacity: int) -> int:
        with self.lock:
            taken = any(s.rank == rank and s.medium == medium for s in self.segments)
            result = codes.MMC_DUPLICATED_OBJECT if taken or capacity <= 0 else codes.MMC_OK
            if result == codes.MMC_OK:
                self.segments.append(Segment(rank, medium, capacity, conn))
            self.count("mount", result)
            return result

    def unmount(self, conn: int) -> None:
        with self.lock:
            gone = [s for s in self.segments if s.owner == conn]
            for segment in gone:
                self.segments.remove(segment)
                self.count("unmount", codes.MMC_OK)
            for key in [k for k, blob in self.objects.items() if blob.segment in gone]:
                del self.objects[key]

    # --- objects -------------------------------------------------------------------------------
    def _alloc(self, key: str, value: bytes) -> int:
        if key in self.objects:
            return codes.MMC_DUPLICATED_OBJECT
        fits = [s for s in self.segments if s.capacity - s.used >= len(value)]
        if not fits:
            return codes.MMC_EXCEED_CAPACITY
        segment = max(fits, key=lambda s: (s.medium == "DRAM", s.capacity - s.used))
        segment.used += len(value)
        self.objects[key] = Blob(segment, value)
        self._evict_if_full()
        return codes.MMC_OK

    def _evict_if_full(self) -> None:
        capacity = sum(s.capacity for s in self.segments)
        if not capacity or sum(s.used for s in self.segments) * 100 < self.evict_high * capacity:
            return
        while self.objects and sum(s.used for s in self.segments) * 100 > self.evict_low * capacity:
            _, blob = self.objects.popitem(last=False)
            blob.segment.used -= len(blob.value)
        self.counts["evict"] += 1

    def _get(self, key: str) -> tuple[int, bytes]:
        blob = self.objects.get(key)
        if blob is None:
            return codes.MMC_UNMATCHED_KEY, b""
        self.objects.move_to_end(key)
        return codes.MMC_OK, blob.value

    def _remove(self, key: str) -> int:
        blob = self.objects.pop(key, None)
        if blob is None:
            return codes.MMC_UNMATCHED_KEY
        blob.segment.used -= len(blob.value)
        return codes.MMC_OK

    def put(self, key: str, value: bytes) -> int:
        with self.lock:
            result = self._alloc(key, value)
            self.count("alloc", result)
            return result

    def batch_put(self, keys: list[str], values: list[bytes]) -> list[int]:
        with self.lock:
            results = [self._alloc(k, v) for k, v in zip(keys, values)]
            self.count_batch("batch_alloc", "alloc", results)
            return results

    def get(self, key: str) -> tuple[int, bytes]:
        with self.lock:
            result, value = self._get(key)
            self.count("get", result)
            return result, value

    def batch_get(self, keys: list[str]) -> list[tuple[int, bytes]]:
        with self.lock:
            found = [self._get(k) for k in keys]
            self.count_batch("batch_get", "get", [r for r, _ in found])
            return found

    def exist(self, key: str) -> int:
        with self.lock:
            result = codes.MMC_OK if key in self.objects else codes.MMC_UNMATCHED_KEY
            self.count("exist_key", result)
            return result

    def batch_exist(self, keys: list[str]) -> list[int]:
        with self.lock:
            results = [codes.MMC_OK if k in self.objects else codes.MMC_UNMATCHED_KEY for k in keys]
            self.count_batch("batch_exist_key", "exist_key", results)
            return results

    def remove(self, key: str) -> int:
        with self.lock:
            result = self._remove(key)
            self.count("remove", result)
            return result

    # --- views for the HTTP API ----------------------------------------------------------------
    def all_keys(self) -> list[str]:
        with self.lock:
            self.count("get_all_keys", codes.MMC_OK)
            return list(self.objects)

    def query(self, key: str) -> dict | None:
        with self.lock:
            blob = self.objects.get(key)
            self.count("query", codes.MMC_OK if blob else codes.MMC_UNMATCHED_KEY)
            if blob is None:
                return None
            return {"key": key, "size": len(blob.value), "numBlobs": 1,
                    "blobs": [{"rank": blob.segment.rank, "medium": blob.segment.medium}]}

    def snapshot(self) -> tuple[list[Segment], int, Counter[str]]:
        """Copies of the segments, the key count and the counters, taken under one lock."""
        with self.lock:
            segments = [Segment(s.rank, s.medium, s.capacity, s.owner, s.used) for s in self.segments]
            return segments, len(self.objects), Counter(self.counts)
