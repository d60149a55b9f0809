"""What the checks accept from a MemCache MetaService, by version.

Supported: memcache_hybrid 1.1 and later (the K3.1 guide pins 1.3.0; the contract tests in
``contracts/`` run the real 1.3.0). ``/health`` answers JSON with ``"status": "ok"``.
MemCache 1.0.x (1.0.3 and older; the K3 guide pins no version) answers ``/health`` with the plain
text ``OK`` and serves no capacity metrics (``memcache_*_capacity_bytes``): its health is
accepted, and capacity checks on it fail with a message naming the version limit.
"""
from __future__ import annotations

import json


def health_ok(status: int, body: str) -> bool:
    """A healthy MetaService ``/health``: 1.1+ JSON ``{"status": "ok", ...}``, or 1.0.x plain ``OK``."""
    if status != 200:
        return False
    if body.strip() == "OK":
        return True
    try:
        return json.loads(body).get("status") == "ok"
    except (ValueError, AttributeError):
        return False
