"""KV connectors at run time: Mooncake P2P handshake ports and the AscendStore (memcache) pool.

Mooncake (vllm-ascend-internals.md §3): every engine binds its handshake ports as real TCP
listeners (a clash ends start-up with ``zmq.error.ZMQError: Address already in use``) plus a
TransferEngine RPC port. A producer answers a ``do_remote_decode`` request with the
``kv_transfer_params`` the decode side needs; a consumer given ``do_remote_prefill`` connects to
every remote handshake port it needs (host from ``remote_multi_nodes_meta_mapping``), reads the
prefill's blocks and fails the request if it cannot.

Pool (§3 AscendStoreConnector, memcache backend): ``DistributedObjectStore`` keyed by model
name + the seeded block hash, so engines with different hash seeds share nothing.
"""
from __future__ import annotations

import itertools
import os
import random
import socket
import sys
import threading
import time
from typing import Any

from k3sim import hw
from k3sim.vllm import wire
from k3sim.vllm.errors import StartupError
from k3sim.vllm.kvconfig import Connector, check_mooncake_extra, handshake_ports, side_channel_port
from k3sim.vllm.log import Logger

WHERE_MC = "mooncake_connector.py"


def _zmq_bind_error(exc: OSError, host: str, port: int) -> StartupError:
    reason = "Address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
    # the sending thread logs the exception before it reaches the engine (vllm-ascend #8938)
    said = [("ERROR", "mooncake_connector.py:246", f"Mooncake KVCacheSendingThread exception: {reason} "
             f"(addr='tcp://{host}:{port}')")]
    return StartupError("zmq.error.ZMQError", f"{reason} (addr='tcp://{host}:{port}')",
                        "vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py", stage="engine",
                        pre_log=said)


def _transport_error(host: str, port: int, status: int = 103900) -> None:
    """The Ascend direct transport's own glog line on stderr when it cannot reach a peer (vllm-ascend #4866)."""
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
    sys.stderr.write(f"E{stamp} {threading.get_native_id()} ascend_direct_transport.cpp:820] Failed to connect to "
                     f"target: {host}:{port}, status: {status}\n")
    sys.stderr.flush()


class _PullFailed(Exception):
    """A KV pull that failed: the reason logged and returned, Mooncake's return code."""

    def __init__(self, reason: str, ret: int = -1) -> None:
        super().__init__(reason)
        self.reason, self.ret = reason, ret


class MooncakeSide:
    """One engine's Mooncake P2P endpoint (all local tp/pcp ranks of this node's PP stages)."""

    def __init__(self, conn: Connector, *, dp_rank: int, tp: int, pp: int, pcp: int, dcp: int,
                 pp_ranks: list[int], host: str, block_size: int, log: Logger) -> None:
        self.conn = conn
        self.sizes = check_mooncake_extra(conn)
        self.dp_rank, self.tp, self.pp, self.pcp, self.dcp = dp_rank, tp, pp, pcp, dcp
        self.pp_ranks = pp_ranks
        self.host = host
        self.block_size = block_size
        self.log = log
        self.engine_id = conn.engine_id
        self.side_port = side_channel_port(conn, dp_rank, tp, pp, pcp)
        self._port_rank = {port: (r, t, c) for r in pp_ranks
                           for port, t, c in handshake_ports(conn, dp_rank, tp, pp, pcp, r)}
        self.ports = list(self._port_rank)
        self.te_rpc_port = 0
        self.mapping: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._block_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.timeout = float(os.environ.get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", "480"))
        log.info("mooncake_connector.py:1712", "Initializing Mooncake Scheduler %s", self.engine_id)

    # ---- start-up -------------------------------------------------------------------------
    def bind(self) -> None:
        for port in self.ports:
            try:
                self._socks.append(wire.listen(self.host, port))
            except OSError as exc:
                self.close()
                raise _zmq_bind_error(exc, self.host, port) from None
        self._bind_te_rpc()
        for sock in self._socks:
            threading.Thread(target=self._accept, args=(sock,), daemon=True).start()
        thread = "KVCacheSendingThread" if self.conn.is_producer else "KVCacheRecvingThread"
        for port in self.ports:
            pp_rank, tp_rank, pcp_rank = self._port_rank[port]
            self.log.info("mooncake_connector.py:478", "%s started listening on path: tcp://%s:%d. Thread: "
                          "tp_rank=%d, pp_rank=%d, pcp_rank=%d", thread, self.host, port, tp_rank, pp_rank, pcp_rank)

    def _bind_te_rpc(self) -> None:
        """Mooncake TransferEngine in P2PHANDSHAKE mode: a random free RPC port in [15000, 17000)."""
        lo = int(os.environ.get("MC_MIN_RPC_PORT", os.environ.get("MC_MIN_PRC_PORT", "15000")))
        hi = int(os.environ.get("MC_MAX_RPC_PORT", "17000"))
        for port in random.sample(range(lo, hi), min(64, hi - lo)):
            try:
                sock = wire.listen(self.host, port)
            except OSError:
                continue
            self._socks.append(sock)
            self.te_rpc_port = port
            self.log.info("transfer_engine_impl.cpp:146", "Transfer Engine RPC using P2P handshake, listening on "
                          "%s:%d", self.host, port)
            return

    def set_peers(self, nodes: dict[int, dict[str, Any]]) -> None:
        """multi_nodes_meta_mapping over all PP stages: port offset -> host/engine/handshake port."""
        for pp_rank in range(self.pp):
            peer = nodes.get(pp_rank, {"host": self.host, "engine_id": self.engine_id})
            for pcp_rank in range(self.pcp):
                for tp_rank in range(self.tp):
                    offset = (pp_rank * self.pcp + pcp_rank) * self.tp + tp_rank
                    self.mapping[str(offset)] = {"host": peer["host"],
                                                 "engine_id": peer.get("engine_id", self.engine_id),
                                                 "handshake_port": self.side_port + offset}
        self.log.info("mooncake_connector.py:1790", "MooncakeConnector set_xfer_handshake_metadata: worker_count=%d, "
                      "updated=%s, multi_nodes_meta_mapping=%s", len(self.mapping), True, self.mapping)

    def close(self) -> None:
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass
        self._socks.clear()

    # ---- producer side --------------------------------------------------------------------
    def _accept(self, lsock: socket.socket) -> None:
        port = lsock.getsockname()[1]
        while True:
            try:
                sock, _ = lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock, port), daemon=True).start()

    def _serve(self, sock: socket.socket, port: int) -> None:
        if hw.faults("engine").get("drop_kv_handshake"):
            sock.close()  # injected fault: the side channel refuses the handshake
            return
        chan = wire.Channel(sock)
        chan.settimeout(30)
        try:
            while True:
                msg = chan.recv()
                if msg is None:
                    return
                chan.send(self._answer(msg, port))
        except OSError:
            pass
        finally:
            chan.close()

    def _answer(self, msg: dict[str, Any], port: int) -> dict[str, Any]:
        op = msg.get("op")
        pp_rank, tp_rank, pcp_rank = self._port_rank.get(port, (0, 0, 0))
        if op == "get_meta_msg":
            return {"engine_id": self.engine_id, "te_rpc_port": self.te_rpc_port, "local_ip": self.host,
                    "handshake_port": port, "tp_rank": tp_rank, "pp_rank": pp_rank, "pcp_rank": pcp_rank,
                    "block_size": self.block_size}
        if op == "read_blocks":
            self.expire()
            with self._lock:
                entry = self._pending.get(str(msg.get("request_id")))
            wanted = list(msg.get("block_ids") or [])
            if entry is None or any(b not in entry["block_ids"] for b in wanted):
                return {"ret": -1, "error": "remote blocks not found (freed or expired)"}
            return {"ret": 0, "hashes": entry["hashes"], "num_blocks": len(wanted)}
        if op == "done_recving_msg":
            with self._lock:
                self._pending.pop(str(msg.get("request_id")), None)
            return {"ack": "ACK"}
        return {"ret": -1, "error": f"unknown message {op!r}"}

    def expire(self) -> None:
        now = time.time()
        with self._lock:
            old = [rid for rid, e in self._pending.items() if now - e["t"] > self.timeout]
            for rid in old:
                self._pending.pop(rid)
        for rid in old:
            self.log.warning("mooncake_connector.py:389", "Force freed expired request: %s. Reason: Request exceeded "
                             "timeout threshold (%s seconds).", rid, self.timeout)

    def producer_params(self, request_id: str, num_tokens: int, hashes: list[str], last_token: int) -> dict[str, Any]:
        num_blocks = -(-num_tokens // self.block_size)
        with self._lock:
            block_ids = [next(self._block_ids) for _ in range(num_blocks)]
            self._pending[request_id] = {"block_ids": block_ids, "hashes": hashes, "t": time.time()}
        self.log.info("mooncake_connector.py:1402", "Delaying free of %d blocks for request %s", num_blocks, request_id)
        return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": block_ids,
                "remote_engine_id": self.engine_id, "remote_request_id": request_id, "remote_host": self.host,
                "remote_port": self.side_port, "remote_pcp_size": self.pcp, "remote_dcp_size": self.dcp,
                "remote_ptp_size": self.tp, "last_token_id": last_token,
                "remote_multi_nodes_meta_mapping": dict(self.mapping), "num_prompt_blocks": num_blocks}

    # ---- consumer side --------------------------------------------------------------------
    def _remote_ports(self, params: dict[str, Any]) -> list[tuple[str, int, int]]:
        ptp = int(params.get("remote_ptp_size") or self.sizes["prefill_tp"])
        ppcp = int(params.get("remote_pcp_size") or self.sizes["prefill_pcp"])
        ppp = int(self.sizes["prefill_pp"])
        # each D rank pulls from one P rank of its group
        tp_ranks = sorted({d * ptp // self.tp for d in range(self.tp)}) if ptp > self.tp else list(range(ptp))
        base = int(params["remote_port"])
        mapping = params.get("remote_multi_nodes_meta_mapping") or {}
        out = []
        for pp_rank in range(ppp):
            for pcp_rank in range(ppcp):
                for tp_rank in tp_ranks:
                    offset = (pp_rank * ppcp + pcp_rank) * ptp + tp_rank
                    peer = mapping.get(str(offset)) or {}
                    host = peer.get("host") or params["remote_host"]
                    out.append((host, int(peer.get("handshake_port") or base + offset), offset))
        return out

    def pull(self, request_id: str, params: dict[str, Any], num_tokens: int) -> tuple[bool, str]:
        """Fetch the prefill's KV for this request; (ok, reason)."""
        remote_rid = str(params.get("remote_request_id") or request_id)
        start = time.time()
        try:
            session = self._transfer(remote_rid, params)
        except _PullFailed as exc:
            return self._failed(remote_rid, exc.reason, exc.ret)
        self.log.info("mooncake_connector.py:702", "KV cache transfer for request %s took %.2f ms. local_ip %s "
                      "local_device_id %s remote_session_id %s", request_id, (time.time() - start) * 1000, self.host,
                      0, session)
        return True, ""

    def _transfer(self, remote_rid: str, params: dict[str, Any]) -> str:
        """Handshake with every remote rank, read the blocks from rank 0; its session id."""
        remote_engine = str(params.get("remote_engine_id"))
        if remote_engine == self.engine_id:
            raise _PullFailed(f"AssertionError: Conflict engine id {remote_engine} with local engine id "
                              f"{self.engine_id}.")
        # A refused or dropped handshake still fails at once; the timeout only bounds a slow peer. 2 s was
        # too short for the stand-in's Python side channel on a 2-core machine running two scenarios
        # (a healthy release failed "handshake ... timed out" at load 9).
        timeout = float(os.environ.get("K3SIM_KV_CONNECT_TIMEOUT_S", "10"))
        refused = bool(hw.faults("engine").get("kv_pull_refused"))  # fault: this Decode cannot reach Prefill KV ports
        try:
            targets = self._remote_ports(params)
        except (KeyError, TypeError, ValueError) as exc:
            self.log.warning("mooncake_connector.py:120", "Got invalid KVTransferParams. params=%s. ", params)
            raise _PullFailed(f"invalid kv_transfer_params: {exc}") from None
        head: tuple[str, int] | None = None
        session = ""
        for host, port, offset in targets:
            meta = self._meta(host, port, timeout, refused)
            if offset == 0:
                head, session = (host, port), f"{host}:{meta.get('te_rpc_port')}"
        if head is None:
            raise _PullFailed("no handshake port for remote rank 0")
        self._read_blocks(head, remote_rid, params.get("remote_block_ids") or [], timeout)
        return session

    @staticmethod
    def _meta(host: str, port: int, timeout: float, refused: bool) -> dict[str, Any]:
        """One remote rank's handshake (``get_meta_msg``)."""
        try:
            if refused:
                raise ConnectionRefusedError(111, "Connection refused")
            chan = wire.connect(host, port, timeout)
        except OSError as exc:
            _transport_error(host, port)
            raise _PullFailed(f"handshake with tcp://{host}:{port} failed: {exc.strerror or exc}") from None
        try:
            chan.settimeout(timeout)
            chan.send({"op": "get_meta_msg"})
            meta = chan.recv()
        finally:
            chan.close()
        if not meta or "engine_id" not in meta:
            raise _PullFailed(f"handshake with tcp://{host}:{port} failed: connection closed by peer")
        return meta

    @staticmethod
    def _read_blocks(head: tuple[str, int], remote_rid: str, blocks: list, timeout: float) -> None:
        try:
            chan = wire.connect(head[0], head[1], timeout)
            chan.settimeout(timeout)
            chan.send({"op": "read_blocks", "request_id": remote_rid, "block_ids": blocks})
            reply = chan.recv()
            if reply and reply.get("ret") == 0:
                chan.send({"op": "done_recving_msg", "request_id": remote_rid})
                chan.recv()
            chan.close()
        except OSError as exc:
            raise _PullFailed(f"transfer from tcp://{head[0]}:{head[1]} failed: {exc}") from None
        if not reply or reply.get("ret") != 0:
            raise _PullFailed((reply or {}).get("error", "connection closed by peer"),
                              int((reply or {}).get("ret", -1)))

    def _failed(self, remote_rid: str, reason: str, ret: int = -1) -> tuple[bool, str]:
        self.log.error("mooncake_connector.py:731", "Mooncake transfer failed for request. remote_request_id=%s, "
                       "ret=%d. %s", remote_rid, ret, reason)
        return False, reason


class PoolClient:
    """AscendStoreConnector's memcache backend, as seen from one engine."""

    def __init__(self, conn: Connector, model_name: str, dp_rank: int, log: Logger) -> None:
        self.conn = conn
        self.model_name = model_name
        self.log = log
        self.backend = str(conn.extra.get("backend", "mooncake"))
        self.store: Any = None
        lookup = conn.extra.get("lookup_rpc_port")
        if lookup is None and "mooncake_rpc_port" in conn.extra:
            log.warning("pool_scheduler.py:60", "It is recommended to use the lookup_rpc_port, as the "
                        "mooncake_rpc_port will be removed in the future.")
            lookup = conn.extra["mooncake_rpc_port"]
        base = os.environ.get("VLLM_RPC_BASE_PATH", "/tmp")
        self.lookup_path = f"ipc://{base}/lookup_rpc_port_{int(lookup or 0)}_dp_rank{dp_rank}"
        self.load_enabled = conn.role != "kv_consumer" or bool(conn.extra.get("consumer_is_to_load", False))
        self.save_enabled = conn.role != "kv_consumer" or bool(conn.extra.get("consumer_is_to_put", False))
        self.block_bytes = int(os.environ.get("K3SIM_KV_BLOCK_BYTES", "1024"))
        if conn.name == "MooncakeConnectorStoreV1":
            log.warning("ascend_store_connector.py:41", "It is recommended to use the AscendStoreConnector, as the "
                        "MoonCakeStoreConnector will be removed in the future.")

    def init(self, device_id: int) -> None:
        where = "vllm_ascend/distributed/kv_transfer/kv_pool/ascend_store/backend/memcache_backend.py"
        if self.backend not in ("mooncake", "memcache", "yuanrong"):
            raise StartupError("KeyError", repr(self.backend), "vllm_ascend/.../ascend_store/backend/__init__.py",
                               stage="engine")
        if self.backend != "memcache":
            self.log.info("mooncake_backend.py:52", "Initializing Mooncake store. metadata_server=%s",
                          os.environ.get("MOONCAKE_CONFIG_PATH"))
            self.log.error("mooncake_backend.py:70", "Initialize mooncake failed. ret=%d, metadata_server=%s. Check "
                           "the mooncake master and metadata server.", -1, os.environ.get("MOONCAKE_CONFIG_PATH"))
            raise StartupError("RuntimeError", "Initialize mooncake failed. ret=-1", where, stage="engine")
        self.log.info("memcache_backend.py:47", "Initializing Memcache store. local_rank=%d", device_id)
        if not os.environ.get("MMC_LOCAL_CONFIG_PATH"):
            msg = "The environment variable 'MMC_LOCAL_CONFIG_PATH' is not set."
            self.log.error("memcache_backend.py:61", "Configuration loading failed. error=%s. Check memcache config "
                           "and environment.", msg)
            raise StartupError("ValueError", msg, where, stage="engine")
        try:
            from memcache_hybrid import DistributedObjectStore  # lazy: only when the pool is configured
        except ImportError as exc:
            raise StartupError("ImportError", "Please install memcache_hybrid by following the instructions at "
                               f"https://gitee.com/ascend/memfabric_hybrid to run vLLM with MemcacheConnector. ({exc})",
                               where, stage="engine") from None
        try:
            store = DistributedObjectStore()
            ret = store.init(device_id, init_bm=True)
        except ValueError as exc:
            self.log.error("memcache_backend.py:61", "Configuration loading failed. error=%s. Check memcache config "
                           "and environment.", exc)
            raise StartupError("ValueError", str(exc), where, stage="engine") from None
        except Exception as exc:  # noqa: BLE001 - the real backend logs any init failure the same way
            self.log.error("memcache_backend.py:65", "Store initialization failed. error=%s. Check MetaService "
                           "reachability and the memcache configuration.", exc)
            raise StartupError("RuntimeError", f"Store initialization failed: {exc}", where, stage="engine") from None
        if ret != 0:
            self.log.error("memcache_backend.py:65", "Store initialization failed. error=%s. Check MetaService "
                           "reachability and the memcache configuration.", f"init returned {ret}")
            raise StartupError("AssertionError", "", where, stage="engine")
        self.store = store
        self.log.info("ascend_store_connector.py:88", "Lookup key server listening on %s", self.lookup_path)

    def key(self, block_hash: str) -> str:
        return f"{self.model_name}@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@{block_hash}"

    def lookup(self, hashes: list[str], limit: int) -> int:
        """Leading blocks present in the pool (``batch_is_exist``)."""
        if not self.load_enabled or not hashes or limit <= 0:
            return 0
        try:
            found = self.store.batch_is_exist([self.key(h) for h in hashes[:limit]])
        except Exception as exc:  # noqa: BLE001
            self.log.error("pool_worker.py:212", "Remote connection failed in lookup. type=%s, error=%s. Check network "
                           "and remote store.", type(exc).__name__, exc)
            return 0
        hits = 0
        for value in found:
            if value != 1:
                break
            hits += 1
        return hits

    def load(self, hashes: list[str]) -> bool:
        keys = [self.key(h) for h in hashes]
        failed = []
        for k in keys:
            try:
                if not self.store.get(k):
                    failed.append(k)
            except Exception:  # noqa: BLE001
                failed.append(k)
        if failed:
            self.log.error("memcache_backend.py:120", "Failed to get %d keys out of %d. error_codes=%s. Check key "
                           "existence and memory state.", len(failed), len(keys), [-3007] * len(failed))
            return False
        return True

    def save(self, hashes: list[str]) -> None:
        if not self.save_enabled or not hashes:
            return
        keys = [self.key(h) for h in hashes]
        try:
            exists = self.store.batch_is_exist(keys)
        except Exception:  # noqa: BLE001
            exists = [0] * len(keys)
        codes = []
        for k, present in zip(keys, exists):
            if present == 1:
                continue
            payload = (k.encode() * (self.block_bytes // max(1, len(k)) + 1))[:self.block_bytes]
            try:
                ret = self.store.put(k, payload)
            except Exception:  # noqa: BLE001
                ret = -1
            if ret != 0:
                codes.append(ret)
        if codes:
            self.log.error("memcache_backend.py:140", "Failed to put %d keys out of %d. error_codes=%s. Check memory "
                           "and store capacity.", len(codes), len(keys), codes)

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001
                pass
