"""The simulated hardware of one node: what a real driver would know.

Only stand-ins read this file (``npu-smi``, ``hccn_tool``, the ``vllm`` engine, MemCache). Conformance
checks never do: they use the stand-ins' real command-line and HTTP interfaces, exactly as on a
real node. Faults are injected by rewriting the ``faults`` section of the file (``k3sim.fault``);
every stand-in re-reads the file on each call, so a fault takes effect in a running node.

Schema (JSON, path from ``K3SIM_NODE_FILE``, default ``/etc/k3lab-sim/node.json``)::

    {
      "node": "p0",                      # inventory node name
      "platform": "A3" | "A2" | "950DT",
      "device_count": 16,                 # A3 16, A2 8, 950DT 8
      "host_ip": "172.30.0.11",          # the node's eth0 address
      "nic": "eth0",
      "super_pod_id": 0, "server_index": 0,
      "super_pod_size": 384,              # optional (npu-smi spod-info)
      "super_pods": {"192.1.2.199": 1},   # optional: super pod of peer vNIC addresses (hccs_ping)
      "hccs_net": "10.89.0.0/16",         # optional (A3): the network that carries HCCS on the sim (carrier)
      "devices": [                        # one per logical device, id 0..device_count-1
        {"id": 0, "ip": "10.88.1.11", "netmask": "255.255.0.0", "gateway": "10.88.0.1"}
        # optional per device: "netdetect" (default gateway)
      ],
      "faults": {                          # all optional; absent means healthy
        "devices": {"3": {"health": "Alarm", "link": "DOWN", "net_health": "Fault",
                           "tls_switch": 1, "no_ip": true, "vnic_link": "DOWN",
                           "missing": true, "tls_error": "...",
                           "error_code": "80E18005", "error_info": "..."}},
        "unreachable": ["10.88.1.12"],    # device/vNIC addresses this node cannot reach
        "engine": {"crash_after_s": 5, "hang": true, "slow_start_s": 30,
                    "hash_seed": "7", "drop_kv_handshake": true,
                    "oom_prompt_tokens": 131072,    # a longer prompt kills the engine: NPU out of memory
                    "shm_exhausted": true,          # /dev/shm full: the engine dies at start (errno 28)
                    "hccl_link_timeout_s": 2},      # HCCL links never come up: EI0006 after 2 s, then the group
        "provider": {"dram_size": "512MB", "exit": true},
        "metaservice": {"exit": true}
      }
    }

A3 vNIC addresses are not in the file: the driver derives them (``vnic_address``), so a node file
cannot give a die an address the real driver would not. On the sim HCCS rides on the container
network: each vNIC address has a carrier address in ``hccs_net`` (``carrier``), which node-init adds
to the NIC and ``-hccs_ping`` sends its ICMP echoes between.
"""
from __future__ import annotations

import marshal
import os
import zlib

# Every hccn_tool / npu-smi call starts a fresh interpreter that imports this module, thousands of
# times per release: pathlib, typing, tempfile and json cost more than the call's own work, so they
# are imported only where they are used (annotations are strings), and the parsed node file is kept
# as a marshal cache keyed by the file's identity (see load).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

NODE_FILE_ENV = "K3SIM_NODE_FILE"
DEFAULT_NODE_FILE = "/etc/k3lab-sim/node.json"
CACHE_DIR = "/run/k3lab-sim"
# Parsed node files kept in CACHE_DIR. A node sees a handful of contents (one per injected fault); stand-in
# tests run as root on a host write one per test into the host's /run, so the oldest beyond this go.
CACHE_KEEP = 64
STALE_TMP_S = 60  # a half-written cache file older than this belongs to a writer that died
DEVICE_COUNT = {"A3": 16, "A2": 8, "950DT": 8}
VNIC_NETMASK = "255.255.255.0"
CARRIER_HOST = 10  # carrier = hccs_net + (server + 101) * 256 + 10 + device, as the device IPs sit at + 10 + device


def vnic_address(server: int, device: int) -> str:
    """The vNIC address the A3 driver gives logical device ``device`` (die ``device % 2`` of NPU
    ``device // 2``) of server ``server`` in its super pod: ``192.<server>.<2+die>.<199-device>``.

    Source: issue #24 and real-interfaces.md (``192.<server>.<2+die>.<199-device>``); the CANN
    hccn_tool manual's example (device 0: ``vnic ipaddr: 192.168.2.199``) confirms the last two
    octets; no public capture confirms the second octet."""
    return f"192.{server}.{2 + device % 2}.{199 - device}"


def vnic_device(address: str) -> tuple[int, int] | None:
    """(server, device) of an address that follows the vNIC scheme, None for any other address."""
    parts = address.split(".")
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 for p in parts) or parts[0] != "192":
        return None
    server, third, fourth = int(parts[1]), int(parts[2]), int(parts[3])
    device = 199 - fourth
    if server > 255 or not 0 <= device < DEVICE_COUNT["A3"] or third != 2 + device % 2:
        return None
    return server, device


def node_file() -> Path:
    from pathlib import Path

    return Path(_node_path())


def _node_path() -> str:
    return os.environ.get(NODE_FILE_ENV, DEFAULT_NODE_FILE)


def load() -> dict[str, Any]:
    """The node description, re-read on every call so injected faults apply at once.

    The cache is keyed by the file's content (its length and CRC-32): reading a few KiB is cheap, parsing
    them in every tool call is not. A key from the file's identity (inode, mtime, size) went stale when a
    freed inode came back within one clock tick with a same-sized file (a flaky stand-in test)."""
    try:
        with open(_node_path(), "rb") as fh:
            return _parsed(fh)
    except FileNotFoundError:
        # A node without a description behaves as a healthy A3 with no device network.
        return {"node": "standalone", "platform": "A3", "device_count": 16, "devices": [], "faults": {}}


def _parsed(fh: Any) -> dict[str, Any]:
    """The open node file's content, from the marshal cache of the same content when there is one."""
    raw = fh.read()
    cache = f"{CACHE_DIR}/node-{len(raw)}-{zlib.crc32(raw):08x}.marshal"
    try:
        with open(cache, "rb") as c:
            return marshal.load(c)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import json

    data = json.loads(raw.decode("utf-8"))
    try:
        tmp = f"{cache}.{os.getpid()}"
        with open(tmp, "wb") as c:
            marshal.dump(data, c)
        os.replace(tmp, cache)
    except (OSError, ValueError):
        return data  # no cache directory (stand-ins run on a test host): parse every time
    prune(CACHE_DIR, CACHE_KEEP)  # only after a miss wrote an entry: a hit costs nothing more
    return data


def prune(directory: str, keep: int, now: float | None = None) -> None:
    """Bound the node-file cache: the ``keep`` newest entries stay, and a temporary file older than
    STALE_TMP_S (its writer died between open and rename) goes. Processes prune concurrently: an entry
    another one removed first is not an error, and a reader that loses its entry parses the file."""
    import time

    now = time.time() if now is None else now
    entries, stale = [], []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.name.startswith("node-") or ".marshal" not in entry.name:
                    continue
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                if entry.name.endswith(".marshal"):
                    entries.append((mtime, entry.path))
                elif now - mtime > STALE_TMP_S:
                    stale.append(entry.path)
    except OSError:
        return
    entries.sort(reverse=True)
    for path in stale + [path for _, path in entries[keep:]]:
        try:
            os.unlink(path)
        except OSError:
            pass


class Node:
    """One consistent reading of the node file: a command reads it once and asks this."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def platform(self) -> str:
        return str(self.data.get("platform", "A3"))

    @property
    def device_count(self) -> int:
        return int(self.data.get("device_count", DEVICE_COUNT.get(self.platform, 16)))

    @property
    def nic(self) -> str:
        return str(self.data.get("nic", "eth0"))

    def device(self, device_id: int) -> dict[str, Any] | None:
        for dev in self.data.get("devices", []):
            if int(dev["id"]) == device_id:
                return dev
        return None

    def faults(self, section: str) -> dict[str, Any]:
        return dict(self.data.get("faults", {}).get(section, {}) or {})

    def device_faults(self, device_id: int) -> dict[str, Any]:
        return dict(self.faults("devices").get(str(device_id), {}) or {})

    @property
    def super_pod(self) -> int:
        return int(self.data.get("super_pod_id", 0))

    def super_pod_of(self, vnic_ip: str) -> int | None:
        """Super pod of a peer vNIC address (``super_pods`` map: what the fabric knows), None if unknown."""
        pod = (self.data.get("super_pods") or {}).get(vnic_ip)
        return None if pod is None else int(pod)

    @property
    def server_index(self) -> int:
        return int(self.data.get("server_index", 0))

    def vnic_address(self, device_id: int) -> str:
        return vnic_address(self.server_index, device_id)

    def carrier(self, vnic: str) -> str | None:
        """The sim's carrier address of a vNIC address (the address itself without ``hccs_net``);
        None for an address outside the scheme: no die on the fabric has it."""
        found = vnic_device(vnic)
        if found is None:
            return None
        net = self.data.get("hccs_net")
        if not net:
            return vnic
        import ipaddress

        base = ipaddress.ip_network(net, strict=False)
        server, device = found
        return str(base.network_address + ((server + 101) << 8) + CARRIER_HOST + device)

    def carrier_prefix(self) -> int:
        import ipaddress

        net = self.data.get("hccs_net")
        return ipaddress.ip_network(net, strict=False).prefixlen if net else 24

    def unreachable(self) -> set[str]:
        return set(self.data.get("faults", {}).get("unreachable", []) or [])


def node() -> Node:
    return Node(load())


def faults(section: str) -> dict[str, Any]:
    return node().faults(section)


def device_faults(device_id: int) -> dict[str, Any]:
    return node().device_faults(device_id)


def device(device_id: int) -> dict[str, Any] | None:
    return node().device(device_id)


def device_count() -> int:
    return node().device_count


def platform() -> str:
    return node().platform


def save(data: dict[str, Any]) -> None:
    """Replace the node file atomically so a concurrent reader sees the old or the new file."""
    import json
    import tempfile

    path = node_file()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
