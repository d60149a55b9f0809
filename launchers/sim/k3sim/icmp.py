"""ICMP echo over a raw socket, bound to a chosen source address.

The simulated device addresses are secondary addresses on the node NIC, so pinging from them over
the container network is a real reachability test between simulated devices.
"""
from __future__ import annotations

import os
import random
import select
import socket
import struct
import time

ECHO_REQUEST, ECHO_REPLY = 8, 0


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


class Pinger:
    """Echo requests from ``source``; raises ``OSError`` when the address is not local."""

    def __init__(self, source: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        try:
            self.sock.bind((source, 0))
        except OSError:
            self.sock.close()
            raise
        # A raw socket gets a copy of every ICMP packet of the namespace: while a node's ping block runs
        # many pings at once on 2 loaded cores, the default buffer overflowed and dropped our replies.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sent: dict[int, float] = {}
        self.late: dict[int, float] = {}  # seq -> round trip of a reply that came after its own wait
        # Random per invocation: concurrent pings on one node must not take each other's replies.
        self.ident = (os.getpid() ^ random.getrandbits(16)) & 0xFFFF

    def echo(self, target: str, seq: int, timeout: float) -> float | None:
        """Round-trip time in seconds, or None when no reply came within ``timeout``."""
        payload = struct.pack("!d", time.monotonic()) + bytes(48)
        header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, self.ident, seq)
        packet = struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(header + payload), self.ident, seq) + payload
        sent = self.sent[seq] = time.monotonic()
        self.sock.sendto(packet, (target, 0))
        deadline = sent + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([self.sock], [], [], left)[0]:
                break
            data, (peer, _) = self.sock.recvfrom(2048)
            icmp = data[(data[0] & 0x0F) * 4:]
            kind, _, _, ident, got_seq = struct.unpack("!BBHHH", icmp[:8])
            if kind != ECHO_REPLY or ident != self.ident or peer != target:
                continue
            if got_seq == seq:
                return time.monotonic() - sent
            if got_seq in self.sent:  # an earlier packet's reply, late (first packets wait for ARP under load)
                self.late[got_seq] = time.monotonic() - self.sent[got_seq]
        return None

    def close(self) -> None:
        self.sock.close()
