"""Multi-process groups over real TCP: the DP handshake (``--data-parallel-rpc-port``) and the
multi-node PP master port (``--master-port``).

Rank 0 (or node 0) binds the port and waits for every member before anyone serves; members
connect with retries until a deadline. The server rejects a rank outside the group, a rank that
is already connected and settings that differ from its own; the rejected member exits with the
reason. After start the link stays open: requests for remote DP engines travel over it, and a
lost peer takes the group down as a failed collective would on hardware.
"""
from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import Any, Callable

from k3sim.vllm import hostenv, wire
from k3sim.vllm.errors import StartupError
from k3sim.vllm.log import Logger


def ready_timeout(default: float) -> float:
    return float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", default))


def _bind_error(kind: str, exc: OSError, host: str, port: int) -> StartupError:
    if kind == "pp":  # torch TCPStore on the master port
        name = {98: "EADDRINUSE", 99: "EADDRNOTAVAIL"}.get(exc.errno or 0, "EUNKNOWN")
        text = (exc.strerror or str(exc)).lower()
        return StartupError("torch.distributed.DistNetworkError", "The server socket has failed to listen on any "
                            f"local network address. port: {port}, useIpv6: false, code: -{exc.errno}, name: {name}, "
                            f"message: {text}", "torch/distributed/rendezvous.py", stage="engine")
    reason = "Address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
    return StartupError("zmq.error.ZMQError", f"{reason} (addr='tcp://{host}:{port}')", "vllm/v1/engine/utils.py")


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}={a.get(k)!r} vs {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


class Member:
    def __init__(self, rank: int, chan: wire.Channel, info: dict[str, Any]) -> None:
        self.rank = rank
        self.chan = chan
        self.info = info
        self.loaded = threading.Event()
        self.pending: dict[int, tuple[threading.Event, list]] = {}
        self.lock = threading.Lock()
        self.alive = True
        self.linking = False  # entered the first collective (HCCL link setup)


class GroupServer:
    """``kind`` = ``dp`` (ranks are DP ranks) or ``pp`` (ranks are node ranks)."""

    def __init__(self, kind: str, host: str, port: int, expected: set[int], own: set[int],
                 fingerprint: dict[str, Any], log: Logger, on_lost: Callable[[int], None]) -> None:
        self.kind = kind
        self.own = own
        self.host, self.port = host, port
        self.expected = expected
        self.fingerprint = fingerprint
        self.log = log
        self.on_lost = on_lost
        self.members: dict[int, Member] = {}
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self.link_lost: int | None = None  # a member lost inside the first collective, before start

    def _noun(self, rank: int) -> str:
        return f"engine {rank}" if self.kind == "dp" else f"node {rank}"

    def bind(self) -> None:
        try:
            self._sock = wire.listen(self.host, self.port)
        except OSError as exc:
            raise _bind_error(self.kind, exc, self.host, self.port) from None
        threading.Thread(target=self._accept, daemon=True).start()

    def close_listener(self) -> None:
        """Stop accepting: vLLM binds the DP RPC port in a ``with`` block of ``launch_core_engines`` and
        closes it once the engines have handshaken. Members keep their established connections.

        shutdown() first: a close() alone leaves the socket listening while the accept thread still
        blocks in accept() on it (the kernel keeps it open for that call)."""
        if self._sock is not None:
            for stop in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close):
                try:
                    stop()
                except OSError:
                    pass

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _reject(self, chan: wire.Channel, exc_type: str, message: str) -> None:
        self.log.error("core_client.py:812" if self.kind == "dp" else "parallel_state.py:1208", "%s: %s",
                       exc_type, message)
        try:
            chan.send({"op": "reject", "exc_type": exc_type, "error": message})
        except OSError:
            pass
        chan.close()

    def _handle(self, sock: socket.socket) -> None:
        chan = wire.Channel(sock)
        chan.settimeout(10)
        hello = chan.recv()
        if not hello or hello.get("op") != "hello" or hello.get("kind") != self.kind:
            chan.close()
            return
        rank = int(hello.get("rank", -1))
        member = self._admit(chan, rank, hello)
        if member is None:
            return
        chan.settimeout(None)
        chan.send({"op": "accept"})
        self.log.debug("core_client.py:790", "HELLO from %s", self._noun(rank))
        self._serve(member)
        self._lost(member)

    def _admit(self, chan: wire.Channel, rank: int, hello: dict) -> Member | None:
        """The new member, or None after rejecting it (known rank, unexpected rank, other configuration)."""
        if rank in self.own:
            self._reject(chan, "RuntimeError", f"Unexpected HELLO message for remote {self._noun(rank)} in "
                         "CONNECTED state.")
            return None
        if rank not in self.expected:
            msg = (f"Message from engine with unexpected data parallel rank: {rank}" if self.kind == "dp"
                   else f"Unexpected node rank {rank}: expected one of {sorted(self.expected)} (nnodes mismatch?)")
            self._reject(chan, "RuntimeError", msg)
            return None
        with self._lock:
            duplicate = rank in self.members and self.members[rank].alive
            if not duplicate:
                member = Member(rank, chan, hello.get("info") or {})
                self.members[rank] = member
        if duplicate:
            self._reject(chan, "RuntimeError", f"Unexpected HELLO message for remote {self._noun(rank)} in "
                         "CONNECTED state.")
            return None
        diffs = _diff(self.fingerprint, hello.get("fingerprint") or {})
        if diffs:
            with self._lock:
                self.members.pop(rank, None)
            self._reject(chan, "RuntimeError", self._mismatch(rank, diffs))
            return None
        return member

    def _mismatch(self, rank: int, diffs: list[str]) -> str:
        if self.kind == "dp":
            return (f"Configuration mismatch detected for engine {rank}. All DP workers must have identical "
                    f"configurations for parameters that affect collective communication. Mismatch: "
                    f"{'; '.join(diffs)}. Please ensure all workers are started with the same command-line "
                    "arguments.")
        return (f"Configuration mismatch detected for node {rank}: {'; '.join(diffs)} (node 0 vs node "
                f"{rank}). All nodes of a multi-node engine must be started with the same model, parallel "
                "sizes, layer partition and max_model_len.")

    def _serve(self, member: Member) -> None:
        """A member's messages until its connection ends: ``loaded`` and ``res`` (answers to calls)."""
        ops = {"linking": self._on_linking, "loaded": self._on_loaded, "res": self._on_result}
        while True:
            msg = member.chan.recv()
            if msg is None:
                return
            handler = ops.get(msg.get("op"))
            if handler is not None:
                handler(member, msg)

    @staticmethod
    def _on_linking(member: Member, msg: dict) -> None:
        member.linking = True

    @staticmethod
    def _on_loaded(member: Member, msg: dict) -> None:
        member.info.update(msg.get("info") or {})
        member.loaded.set()

    @staticmethod
    def _on_result(member: Member, msg: dict) -> None:
        with member.lock:
            waiter = member.pending.pop(int(msg["id"]), None)
        if waiter:
            waiter[1].append(msg.get("payload"))
            waiter[0].set()

    def _lost(self, member: Member) -> None:
        member.alive = False
        member.chan.close()
        with member.lock:
            for event, box in member.pending.values():
                box.append(None)
                event.set()
            member.pending.clear()
        if self._started.is_set():
            self.on_lost(member.rank)
        else:
            with self._lock:
                if self.members.get(member.rank) is member:
                    self.members.pop(member.rank)
            if member.linking:  # HCCL on this rank now waits for links to a peer that is gone
                self.link_lost = member.rank
            self.log.debug("core_client.py:790", "%s disconnected before start", self._noun(member.rank))

    def wait_loaded(self, deadline: float, own_ready: Callable[[], bool]) -> None:
        last_log = 0.0
        while True:
            with self._lock:
                ready = [r for r in self.expected if r in self.members and self.members[r].loaded.is_set()]
                connected = [r for r in self.expected if r in self.members]
            if len(ready) == len(self.expected) and own_ready():
                return
            if self.link_lost is not None:
                raise hostenv.hccl_link_timeout(0)
            now = time.time()
            if now >= deadline:
                missing = sorted(self.expected - set(ready))
                raise StartupError("TimeoutError", "Timed out waiting for engine core processes to start. This is "
                                   "often caused by slow weight loading for large models. Waiting "
                                   f"{ready_timeout(600):g} seconds (VLLM_ENGINE_READY_TIMEOUT_S="
                                   f"{ready_timeout(600):g}). Missing {'engines' if self.kind == 'dp' else 'nodes'}: "
                                   f"{missing}. To increase the timeout, set the environment variable: "
                                   "VLLM_ENGINE_READY_TIMEOUT_S=<seconds>", "vllm/v1/engine/utils.py")
            if now - last_log > 5:
                last_log = now
                self.log.debug("utils.py:1001", "Waiting for %d local, %d remote core engine proc(s) to connect.",
                               0, len(self.expected) - len(connected))
            time.sleep(0.02)

    def start(self, payload: dict[str, Any]) -> None:
        self._started.set()
        for member in list(self.members.values()):
            try:
                member.chan.send({"op": "start", "payload": payload})
            except OSError:
                pass

    def member_info(self) -> dict[int, dict[str, Any]]:
        return {r: m.info for r, m in self.members.items()}

    def call(self, rank: int, payload: dict[str, Any], timeout: float | None = None) -> Any:
        """A request for a remote engine; ``None`` if the link dies."""
        member = self.members.get(rank)
        if member is None or not member.alive:
            return None
        rid = next(self._ids)
        event, box = threading.Event(), []
        with member.lock:
            member.pending[rid] = (event, box)
        try:
            member.chan.send({"op": "req", "id": rid, "payload": payload})
        except OSError:
            return None
        event.wait(timeout)
        return box[0] if box else None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass


class GroupClient:
    def __init__(self, kind: str, host: str, port: int, rank: int, fingerprint: dict[str, Any],
                 info: dict[str, Any], log: Logger) -> None:
        self.kind = kind
        self.host, self.port = host, port
        self.rank = rank
        self.fingerprint = fingerprint
        self.info = info
        self.log = log
        self.chan: wire.Channel | None = None
        self.linked = False

    def connect(self, deadline: float) -> None:
        while True:
            try:
                self.chan = wire.connect(self.host, self.port, timeout=2)
                break
            except OSError:
                if time.time() >= deadline:
                    raise self._timeout(deadline) from None
                time.sleep(0.1)
        self.chan.settimeout(max(1.0, deadline - time.time()))
        self.chan.send({"op": "hello", "kind": self.kind, "rank": self.rank, "fingerprint": self.fingerprint,
                        "info": self.info})
        reply = self.chan.recv()
        if reply is None:
            raise self._timeout(deadline)
        if reply.get("op") == "reject":
            raise StartupError(reply.get("exc_type", "RuntimeError"), reply.get("error", "rejected"),
                               "vllm/v1/engine/core.py", stage="engine")

    def _timeout(self, deadline: float) -> StartupError:
        waited = ready_timeout(300 if self.kind == "dp" else 600)
        if self.kind == "pp":
            return StartupError("torch.distributed.DistNetworkError", f"The client socket has timed out after "
                                f"{int(waited * 1000)}ms while trying to connect to ({self.host}, {self.port}).",
                                "torch/distributed/rendezvous.py", stage="engine")
        return StartupError("RuntimeError", "Did not receive response from front-end process within "
                            f"{waited / 60:g} minutes", "vllm/v1/engine/core.py", stage="engine")

    def linking(self) -> None:
        """This rank enters the first collective: HCCL sets up its links to every peer from here on."""
        assert self.chan is not None
        self.chan.send({"op": "linking"})
        self.linked = True

    def loaded(self, info: dict[str, Any], deadline: float, rank_id: int = 0) -> dict[str, Any]:
        assert self.chan is not None
        self.chan.send({"op": "loaded", "info": info})
        self.chan.settimeout(max(1.0, deadline - time.time()))
        msg = self.chan.recv()
        if msg is None and self.linked and time.time() < deadline - 1:
            # the group fell apart inside the first collective: HCCL here waits for links that never come
            raise hostenv.hccl_link_timeout(rank_id)
        if msg is None or msg.get("op") != "start":
            raise self._timeout(deadline)
        self.chan.settimeout(None)
        return msg.get("payload") or {}

    def serve(self, handler: Callable[[dict[str, Any]], Any]) -> None:
        """Answer requests from the head until the link closes."""
        assert self.chan is not None
        chan = self.chan
        while True:
            msg = chan.recv()
            if msg is None:
                return
            if msg.get("op") == "req":
                def work(m: dict[str, Any] = msg) -> None:
                    try:
                        chan.send({"op": "res", "id": m["id"], "payload": handler(m["payload"])})
                    except OSError:
                        pass
                threading.Thread(target=work, daemon=True).start()
