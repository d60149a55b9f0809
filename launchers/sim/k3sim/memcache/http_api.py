"""The MetaService REST endpoints on ``ock.mmc.meta_service.metrics_url`` (MemCache 1.1 generation).

``/metrics`` is the hand-built Prometheus text of ``MmcRestApiFacade::BuildPrometheusMetrics``:
operation counters, evictions, stored keys, then one line per registered segment and the
per-medium totals (hbm and dram always). JSON bodies are compact with sorted keys, as nlohmann's.
"""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from k3sim.memcache.pool import OPERATIONS, Pool, Segment

JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


def dump(body: object) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def usage(segments: list[Segment], medium: str) -> tuple[int, int]:
    chosen = [s for s in segments if s.medium.lower() == medium]
    return sum(s.used for s in chosen), sum(s.capacity for s in chosen)


def prometheus(pool: Pool) -> str:
    segments, keys, counts = pool.snapshot()
    out: list[str] = []

    def family(name: str, help_text: str, kind: str, samples: list[tuple[str, int]]) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
        out.extend(f"{name}{labels} {value}" for labels, value in samples)

    for op, title, has_not_found in OPERATIONS:
        outcomes = [("requests", "requests"), ("successes", "successes"), ("failures", "failures")]
        if has_not_found:
            outcomes.append(("not_found", "not found results"))
        for suffix, words in outcomes:
            family(f"memcache_{op}_{suffix}_total", f"Total number of {title} {words}", "counter",
                   [("", counts[f"{op}_{suffix}"])])
    family("memcache_evict_operations_total", "Total number of eviction operations", "counter", [("", counts["evict"])])
    family("memcache_stored_keys", "Current number of stored keys", "gauge", [("", keys)])
    family("memcache_segment_capacity_bytes", "Segment total capacity in bytes", "gauge",
           [(f'{{segment="{s.name}"}}', s.capacity) for s in segments])
    family("memcache_segment_allocated_bytes", "Segment allocated bytes", "gauge",
           [(f'{{segment="{s.name}"}}', s.used) for s in segments])
    totals = {medium: usage(segments, medium) for medium in ("hbm", "dram")}
    family("memcache_total_capacity_bytes", "Total capacity by medium in bytes", "gauge",
           [(f'{{medium="{m}"}}', total) for m, (_, total) in totals.items()])
    family("memcache_allocated_bytes", "Allocated bytes by medium", "gauge",
           [(f'{{medium="{m}"}}', used) for m, (used, _) in totals.items()])
    return "\n".join(out) + "\n"


def summary(pool: Pool) -> str:
    segments, keys, counts = pool.snapshot()
    fields = [f"keys={keys}", f"evict={counts['evict']}"]
    for medium in ("hbm", "dram"):
        used, total = usage(segments, medium)
        fields.append(f"{medium}_used={used}/{total}")
    short = {"requests": "req", "successes": "success", "failures": "fail", "not_found": "not_found"}
    for op, _, has_not_found in OPERATIONS:
        for suffix in ("requests", "successes", "failures") + (("not_found",) if has_not_found else ()):
            fields.append(f"{op}_{short[suffix]}={counts[f'{op}_{suffix}']}")
    return " ".join(fields)


def error(message: str) -> tuple[int, str, str]:
    """Business errors are HTTP 200 with success=false, as in the real REST API."""
    return 200, JSON, dump({"success": False, "error_message": message, "timestamp": int(time.time())})


def _health(pool: Pool, query: dict[str, list[str]]) -> tuple[int, str, str]:
    return 200, JSON, dump({"status": "ok", "role": "unknown", "ha_state": "unknown", "service_ready": True,
                            "leader_address": "unknown", "view_version": 0})


def _query_key(pool: Pool, query: dict[str, list[str]]) -> tuple[int, str, str]:
    key = query.get("key", [""])[0]
    if not key:
        return error("Missing key parameter")
    found = pool.query(key)
    return (200, JSON, dump(found)) if found else error("Key not found")


ROUTES: dict[str, Callable[[Pool, dict[str, list[str]]], tuple[int, str, str]]] = {
    "/health": _health,
    "/metrics": lambda pool, query: (200, "text/plain; version=0.0.4", prometheus(pool)),
    "/metrics/summary": lambda pool, query: (200, TEXT, summary(pool)),
    "/get_all_segments": lambda pool, query: (200, TEXT, "".join(f"{s.name}\n" for s in pool.snapshot()[0])),
    "/get_all_keys": lambda pool, query: (200, TEXT, "".join(f"{key}\n" for key in pool.all_keys())),
    "/query_key": _query_key,
}


def route(pool: Pool, path: str, query: dict[str, list[str]]) -> tuple[int, str, str]:
    handler = ROUTES.get(path)
    return handler(pool, query) if handler is not None else (404, TEXT, "Not Found")


def serve(pool: Pool, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # headers and body are separate writes: no delayed-ACK stall

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            parts = urlsplit(self.path)
            status, content_type, body = route(pool, parts.path, parse_qs(parts.query))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass  # the real server does not log requests

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
