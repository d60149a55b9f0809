"""The HTTP front-end (stdlib ThreadingHTTPServer, HTTP/1.1, chunked SSE), uvicorn-shaped.

The socket is bound before the engines start and only listens once they are ready, so
connections are refused while loading (vllm-upstream.md §4). ``--api-key`` guards only the
``/v1`` prefixes (§1.1); ``/metrics`` and ``/health`` stay open.
"""
from __future__ import annotations

import json
import socket
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

from k3sim.vllm import VLLM_VERSION
from k3sim.vllm.config import ServeConfig
from k3sim.vllm.errors import RequestError
from k3sim.vllm.log import Logger
from k3sim.vllm.metrics import Metrics
from k3sim.vllm.runtime import Runtime
from k3sim.vllm.serving import OpenAIServing, Reply

GUARDED = ("/v1", "/v2", "/inference", "/cohere")

ROUTES: list[tuple[str, str]] = [
    ("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"), ("/load", "GET"),
    ("/ping", "GET, POST"), ("/version", "GET"), ("/tokenize", "POST"),
    ("/v1/models", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/metrics", "GET"),
]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def server_bind(self) -> None:
        # vLLM's create_server_socket sets SO_REUSEADDR and SO_REUSEPORT (API servers share the port);
        # a port held by any other program still fails here with EADDRINUSE.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


class Frontend:
    def __init__(self, cfg: ServeConfig, log: Logger) -> None:
        self.cfg = cfg
        self.log = log
        self.runtime: Runtime | None = None
        self.metrics: Metrics | None = None
        self.serving: OpenAIServing | None = None
        self.load = 0
        host = cfg.args.host
        family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
        Server.address_family = family
        self.httpd = Server((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), cfg.args.port),
                            self._handler(), bind_and_activate=False)

    def bind(self) -> None:
        """``setup_server``: bind now (a port clash fails here), listen later."""
        try:
            self.httpd.server_bind()
        except OSError:
            self.httpd.server_close()
            raise

    def serve(self, runtime: Runtime, metrics: Metrics) -> None:
        self.runtime, self.metrics = runtime, metrics
        self.serving = OpenAIServing(self.cfg, runtime, metrics, self.log)
        self.httpd.server_activate()
        host = self.cfg.args.host or "0.0.0.0"
        self.log.info("api_server.py:1971", "Starting vLLM API server 0 on http://%s:%d", host, self.cfg.args.port)
        self.log.info("launcher.py:36", "Available routes are:")
        for path, methods in ROUTES:
            self.log.info("launcher.py:44", "Route: %s, Methods: %s", path, methods)
        import os
        self.log.uvicorn(f"Started server process [{os.getpid()}]")
        self.log.uvicorn("Waiting for application startup.")
        self.log.uvicorn("Application startup complete.")
        self.httpd.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()

    # ---- request handling ------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "uvicorn"
            # uvicorn (asyncio) sets TCP_NODELAY on every connection; without it the body written after
            # the headers waits for the client's delayed ACK: 40 ms per /metrics scrape
            disable_nagle_algorithm = True
            sys_version = ""

            def log_message(self, fmt: str, *args: Any) -> None:  # uvicorn access log instead
                return

            def _access(self, status: int) -> None:
                if not front.cfg.args.disable_uvicorn_access_log:
                    import sys
                    phrase = self.responses.get(status, ("",))[0]
                    front.log.uvicorn(f'{self.client_address[0]}:{self.client_address[1]} - "{self.command} '
                                      f'{self.path} HTTP/1.1" {status} {phrase}', stream=sys.stdout)

            def _send(self, status: int, body: bytes, ctype: str | None, extra: dict[str, str] | None = None) -> None:
                self.send_response_only(status)
                self.send_header("date", formatdate(usegmt=True))
                self.send_header("server", "uvicorn")
                self.send_header("content-length", str(len(body)))
                if ctype:
                    self.send_header("content-type", ctype)
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                self._access(status)

            def _json(self, status: int, obj: Any) -> None:
                body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
                self._send(status, body, "application/json")

            def _sse(self, stream: Any) -> None:
                self.send_response_only(200)
                self.send_header("date", formatdate(usegmt=True))
                self.send_header("server", "uvicorn")
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self._access(200)
                try:
                    for chunk in stream:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                finally:
                    close = getattr(stream, "close", None)
                    if close:
                        close()

            def _body(self) -> Any:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError as exc:
                    raise RequestError(str([{"type": "json_invalid", "loc": ("body", exc.pos if hasattr(exc, "pos")
                                                                              else 0),
                                             "msg": "JSON decode error", "input": {},
                                             "ctx": {"error": getattr(exc, "msg", str(exc))}}])) from None

            def _dispatch(self) -> None:
                path = urlsplit(self.path).path
                try:
                    if front.cfg.api_keys and path.startswith(GUARDED) and self.command != "OPTIONS":
                        auth = self.headers.get("authorization", "")
                        if auth not in {f"Bearer {k}" for k in front.cfg.api_keys}:
                            return self._json(401, {"error": "Unauthorized"})
                    route = front._route(self.command, path)
                    if route is None:
                        known = any(path == p or (p == "/metrics" and path.startswith("/metrics")) for p, _ in ROUTES)
                        if known:
                            return self._json(405, {"detail": "Method Not Allowed"})
                        return self._json(404, {"detail": "Not Found"})
                    body = self._body() if self.command == "POST" else None
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    front.load += 1
                    try:
                        result = route(body, headers)
                    finally:
                        front.load -= 1
                    if isinstance(result, Reply):
                        if result.stream is not None:
                            return self._sse(result.stream)
                        return self._json(result.status, result.body)
                    status, payload, ctype = result
                    return self._send(status, payload, ctype)
                except RequestError as exc:
                    return self._json(exc.status, exc.body())
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                except Exception as exc:  # noqa: BLE001 - the real server answers 500 and logs
                    front.log.error("api_server.py:1310", "Error in request %s %s: %r", self.command, path, exc)
                    return self._json(500, RequestError("Internal server error", 500).body())

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_OPTIONS = _dispatch

        return Handler

    def _route(self, method: str, path: str) -> Callable[[Any, dict[str, str]], Any] | None:
        return self._routes().get((method, "/metrics" if path.startswith("/metrics") else path))

    def _routes(self) -> dict[tuple[str, str], Callable[[Any, dict[str, str]], Any]]:
        """(method, path) -> handler(body, headers); the reset endpoint only in dev mode, as in vLLM."""
        s, rt, metrics = self.serving, self.runtime, self.metrics
        assert s is not None and rt is not None and metrics is not None

        def health(b: Any, h: dict[str, str]) -> tuple[int, bytes, None]:
            return 503 if rt.dead.is_set() else 200, b"", None

        routes: dict[tuple[str, str], Callable[[Any, dict[str, str]], Any]] = {
            ("GET", "/health"): health, ("HEAD", "/health"): health,
            ("GET", "/ping"): health, ("POST", "/ping"): health,
            ("GET", "/version"): lambda b, h: Reply(200, {"version": VLLM_VERSION}),
            ("GET", "/load"): lambda b, h: Reply(200, {"server_load": self.load - 1}),
            ("GET", "/metrics"): lambda b, h: (200, *metrics.exposition()),
            ("GET", "/v1/models"): lambda b, h: Reply(200, s.models()),
            ("POST", "/v1/chat/completions"): s.chat,
            ("POST", "/v1/completions"): s.completion,
            ("POST", "/tokenize"): self._tokenize,
        }
        if _dev_mode():
            routes[("POST", "/reset_prefix_cache")] = self._reset_prefix_cache
        return routes

    def _reset_prefix_cache(self, body: Any, headers: dict[str, str]) -> tuple[int, bytes, None]:
        assert self.runtime is not None
        self.runtime.reset_prefix_cache()
        return 200, b"", None

    def _tokenize(self, body: Any, headers: dict[str, str]) -> Reply:
        from k3sim.vllm import cache

        if not isinstance(body, dict) or "prompt" not in body:
            raise RequestError("prompt is required")
        ids = cache.encode(str(body["prompt"]))
        return Reply(200, {"count": len(ids), "max_model_len": self.cfg.max_model_len, "tokens": ids,
                           "token_strs": None})


def _dev_mode() -> bool:
    import os
    return os.environ.get("VLLM_SERVER_DEV_MODE", "0") in ("1", "true", "True")
