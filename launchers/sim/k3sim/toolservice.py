"""The node's device tools answered by its resident PID 1, so a tool call costs a shell, not a Python.

The real ``hccn_tool`` and ``npu-smi`` are small C programs that ask the driver; a stand-in that
starts an interpreter per call costs ~17 ms of CPU, and a release makes ~6,000 such calls (every
node runs the guides' per-device loops). node-init (already resident) serves the same
:func:`answer` functions on the node's loopback; the ``hccn_tool`` and ``npu-smi`` shims are bash
clients (``/dev/tcp``, no extra process) that fall back to running the tool in-process whenever
the service is absent (host tests, an older container) or does not answer.

Wire format: the request is NUL-terminated fields ``tool, argc, arg...``; the reply is one header
line ``rc stdout_bytes stderr_bytes`` followed by both bodies; the client reads that many bytes and
closes, and the service then resets its end (no TIME_WAIT socket per call). Output, exit status, the busy lock
and the ICMP pings are those of the tool run in-process: :func:`answer` is the same code.
"""
from __future__ import annotations

import os
import socket
import socketserver
import struct
import threading
from pathlib import Path
from typing import Callable

PORT = int(os.environ.get("K3SIM_TOOL_PORT", "7321"))  # a port no rendered service uses
REQUEST_TIMEOUT_S = 30.0  # a client that stops mid-request must not hold a thread for ever
MAX_REQUEST = 64 * 1024


def _tools() -> dict[str, Callable[[list[str]], tuple[str, int]]]:
    from k3sim import hccn_tool, npu_smi

    return {"hccn_tool": hccn_tool.answer, "npu-smi": npu_smi.answer}


def parse(request: bytes) -> tuple[str, list[str]]:
    fields = request.split(b"\0")
    if len(fields) < 3 or not fields[1].isdigit():
        raise ValueError("malformed request")
    argc = int(fields[1])
    if len(fields) < argc + 3:  # a complete request ends with a NUL: one empty field after the last
        raise ValueError("incomplete request")
    return fields[0].decode(), [f.decode(errors="surrogateescape") for f in fields[2:2 + argc]]


def reply(tools: dict[str, Callable[[list[str]], tuple[str, int]]], request: bytes) -> bytes:
    try:
        tool, args = parse(request)
        if tool not in tools:
            raise ValueError(f"unknown tool {tool!r}")
        out, rc = tools[tool](args)
        err = ""
    except Exception as exc:  # the client prints it and exits 1, as a crashing tool would
        out, rc, err = "", 1, f"k3sim tool service: {type(exc).__name__}: {exc}\n"
    body, errb = out.encode(errors="surrogateescape"), err.encode()
    return f"{rc} {len(body)} {len(errb)}\n".encode() + body + errb


def complete(data: bytes) -> bool:
    try:
        parse(data)
        return True
    except ValueError:
        return False


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(REQUEST_TIMEOUT_S)
        data = b""
        try:
            while not complete(data) and len(data) < MAX_REQUEST:
                chunk = conn.recv(4096)
                if not chunk:
                    break  # the client stopped sending: answer what it sent (an error)
                data += chunk
            conn.sendall(reply(self.server.tools, data))  # type: ignore[attr-defined]
            # The client reads the counted bytes and closes first; then a reset closes ours. An orderly
            # close would leave one TIME_WAIT socket per call (60 s) in the node's /proc/net/tcp, which
            # the suite's port checks read: ~2,000 lines per run that no real tool makes.
            if conn.recv(1) == b"":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            return  # the client went away: nothing to answer


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def shutdown_request(self, request) -> None:
        self.close_request(request)  # no shutdown(SHUT_WR) first: its FIN would put the client in TIME_WAIT


def start(port_file: Path, port: int = PORT) -> socketserver.ThreadingTCPServer:
    """Serve in a daemon thread; the port file (which the shims read) appears once it listens."""
    server = _Server(("127.0.0.1", port), _Handler)
    server.tools = _tools()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="tool-service", daemon=True).start()
    port_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{server.server_address[1]}\n")
    tmp.replace(port_file)
    return server


def main(argv: list[str] | None = None) -> int:
    """``python -m k3sim.toolservice PORT_FILE``: serve until SIGTERM. The emulated lab runs one per host,
    in the host's namespaces, for the containers that share its network (``--net=host``)."""
    import signal
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m k3sim.toolservice PORT_FILE", file=sys.stderr)
        return 2
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    start(Path(args[0]))
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    Path(args[0]).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
