"""Deterministic tokenizer, chained block hashes and the engine's local prefix cache.

Tokenizer (the sim's stand-in for the Kimi tokenizer): a token is one special marker
``<|name|>``, or optional leading whitespace plus up to 6 word characters, or optional leading
whitespace plus one other character; concatenating the tokens gives the text back. Token ids
are CRC32s of the token text, so every process agrees on them.

Block hashes follow vLLM v1: full blocks only, each hash chained on its parent and seeded by
``NONE_HASH``, which comes from ``PYTHONHASHSEED`` (random per process when unset). Two engines
therefore share KV-pool keys only when their hash seeds agree, as on hardware.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
import zlib
from collections import OrderedDict

_TOKEN = re.compile(r"<\|[a-z_]+\|>|\s*\w{1,6}|\s*[^\w\s]|\s+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def token_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) & 0x7FFFFFFF


def encode(text: str) -> list[int]:
    return [token_id(t) for t in tokenize(text)]


def none_hash(seed: str | None) -> bytes:
    """vllm/v1/core/kv_cache_utils.py::init_none_hash."""
    if seed is None:
        return os.urandom(32)
    return hashlib.sha256(seed.encode()).digest()


def block_hashes(token_ids: list[int], block_size: int, seed: bytes,
                 mm: list[tuple[int, int, str]] = ()) -> list[str]:
    """Hex hashes of the full blocks; ``mm`` = (offset, length, hash) of multimodal placeholders."""
    out: list[str] = []
    parent = seed
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        chunk = token_ids[start:start + block_size]
        extra = "".join(h for off, n, h in mm if off < start + block_size and off + n > start)
        digest = hashlib.sha256(parent + struct.pack(f"<{len(chunk)}I", *chunk) + extra.encode()).digest()
        out.append(digest.hex())
        parent = digest
    return out


def max_hit_blocks(num_tokens: int, block_size: int) -> int:
    """At least one prompt token is always recomputed (``max_cache_hit_length = num_tokens - 1``)."""
    return max(0, (num_tokens - 1) // block_size)


class PrefixCache:
    """LRU set of block hashes one engine holds in device memory."""

    def __init__(self, capacity_blocks: int, enabled: bool = True) -> None:
        self.capacity = capacity_blocks
        self.enabled = enabled
        self._blocks: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, hashes: list[str], limit: int) -> int:
        """Number of leading blocks present (at most ``limit``)."""
        if not self.enabled:
            return 0
        hits = 0
        with self._lock:
            for h in hashes[:limit]:
                if h not in self._blocks:
                    break
                self._blocks.move_to_end(h)
                hits += 1
        return hits

    def insert(self, hashes: list[str]) -> None:
        if not self.enabled:
            return
        with self._lock:
            for h in hashes:
                self._blocks[h] = None
                self._blocks.move_to_end(h)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)

    def reset(self) -> None:
        with self._lock:
            self._blocks.clear()

    def __len__(self) -> int:
        return len(self._blocks)
