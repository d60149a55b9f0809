"""Readers of the Ascend tools' output: ``npu-smi info`` tables and ``hccn_tool -g`` answers.

Pure functions, run over the corpus of real outputs in ``tests/corpus`` (each sample with its
source and the result a correct reader must give). Every reader either returns what the output
says or raises :class:`Unparsed` naming the line it could not read: a check that cannot read an
answer fails as "unparsed output", never as healthy.

Values that later reach a shell (device addresses for ``-ping``/``-hccs_ping``) are validated
here: an address is a dotted IPv4 address or the reader raises.

Formats (sources in tests/corpus/corpus.yaml and shared/reference/ascend-components.md §3):

* ``npu-smi info``: a first row per chip ``| 0  Ascend910 | OK | 162.6 34 0 / 0 |`` and a second
  ``| 0  0 | 0000:9D:00.0 | 0  0 / 0  3419 / 65536 |``; 98 or 116 columns wide (26.x drivers);
  the Bus-Id can be ``NA`` (310P, 950) or masked, the first cell of the second row can be empty
  (950), a number can touch its slash (``61609/ 65536``); 310P rows have no HBM column. A process
  table follows (names can be blank inside containers).
* ``hccn_tool``: ``link status: UP``, ``net health status: <one of ten states>``,
  ``ipaddr:A.B.C.D``/``netmask:...`` (or ``Get ipconf failed, because no ip was preset there!``),
  ``vnic link status: UP``/``vnic ipaddr: A.B.C.D`` (``0.0.0.0`` when unset: ``inet_ntop`` of 0),
  ``dev_id:N, tls switch[S]...`` or ``device N, tls switch[S]...``, the ping summaries
  (``packet loss`` for ``-ping``, ``packets loss`` and ``L1 plane check result = 0x..`` for
  ``-hccs_ping``), and two busy answers.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

HEALTH = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
# hccn_tool's g_net_health_status[] table (0..9); only Success is healthy
NET_HEALTH = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
              "Thread error", "Detect ip set", "Unknown")
# hccn_tool is not re-entrant ("hccn_tool is busy, please try again."); -hccs_ping answers a busy
# device with UDA_TOOL_HCCS_PING_RESOURCE_BUSY's text. Both did nothing and are retried.
BUSY = ("hccn_tool is busy", "The device is occupied. Please try again later.")
NO_IP = "Get ipconf failed, because no ip was preset there!"
UNSET = "0.0.0.0"


class Unparsed(ValueError):
    """Output a reader cannot read; the message names the line (or says the output is empty)."""


def busy(text: str) -> bool:
    return any(b in text for b in BUSY)


def ipv4(value: str) -> str:
    """``value`` if it is a dotted-quad IPv4 address, else :class:`Unparsed` (masked, empty, other)."""
    try:
        if re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", value):
            return str(ipaddress.IPv4Address(value))
    except ValueError:
        pass
    raise Unparsed(f"not an IPv4 address: {value!r}")


# ------------------------------------------------------------------------------------------------
# npu-smi info


@dataclass
class Chip:
    """One health row (A3: one per die) and, from its second row, memory and HBM in MB."""
    npu: int
    name: str
    health: str
    chip: int | None = None
    phy_id: int | None = None
    bus_id: str | None = None
    memory: tuple[int, int] | None = None
    hbm: tuple[int, int] | None = None


@dataclass
class Process:
    npu: int
    chip: int | None
    pid: int
    name: str  # blank inside containers
    memory_mb: int


@dataclass
class NpuSmiInfo:
    version: str | None = None
    chips: list[Chip] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)

    @property
    def healths(self) -> list[str]:
        return [c.health for c in self.chips]


_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_BUS = re.compile(r"^(?:[0-9A-Fa-f]{4}:[0-9A-Fa-fx]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|NA)$")
_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")


def _cells(line: str) -> list[str] | None:
    """The cells of a table row ``| a | b |``; None for a row cut short (no closing bar)."""
    if not line.endswith("|") or len(line) < 2:
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split() if t.isdigit()]


def _first_row(cells: list[str]) -> Chip | None:
    """``| 0  Ascend910 | OK | ... |`` (A2/A3/310P) or ``| 0 | Ascend950DT | OK | ... |`` (950)."""
    for at in (1, 2):
        if len(cells) > at + 1 and cells[at] in HEALTH:
            head = " ".join(cells[:at]).split()
            if head and head[0].isdigit():
                return Chip(npu=int(head[0]), name=" ".join(head[1:]), health=cells[at])
    return None


def _second_row(cells: list[str], chip: Chip) -> bool:
    """Fill ``chip`` from ``| 0  0 | 0000:9D:00.0 | 0  0 / 0  3419 / 65536 |``; False if not one."""
    bus_at = next((i for i, c in enumerate(cells) if _BUS.match(c)), None)
    if bus_at is None or bus_at + 1 >= len(cells):
        return False
    pairs = [(int(a), int(b)) for a, b in _PAIR.findall(cells[bus_at + 1])]
    if not 1 <= len(pairs) <= 2 or any(used > total for used, total in pairs):
        return False  # a usage above its total is garbled: the row stays unread, never a value
    ids = _ints(" ".join(cells[:bus_at]))
    chip.chip = ids[0] if ids else None
    chip.phy_id = ids[1] if len(ids) > 1 else None
    chip.bus_id = cells[bus_at]
    chip.memory = pairs[0]
    chip.hbm = pairs[1] if len(pairs) == 2 else None
    return True


def _process_row(cells: list[str]) -> Process | None:
    """``| 4  0 | 957687 | pt_main_thread | 49207 |`` (a fifth cell: the pid in the container)."""
    if len(cells) < 4 or not cells[1].isdigit() or not cells[3].isdigit():
        return None
    ids = _ints(cells[0])
    if not ids:
        return None
    return Process(npu=ids[0], chip=ids[1] if len(ids) > 1 else None, pid=int(cells[1]), name=cells[2],
                   memory_mb=int(cells[3]))


def _is_heading(cells: list[str]) -> bool:
    head = cells[0]
    return (head.startswith(("NPU", "Chip")) and not head[3:4].isdigit()) or any(
        c in ("Bus-Id", "Health", "Process id", "Name") for c in cells) or head.startswith("No running processes")


def npu_smi_info(text: str) -> NpuSmiInfo:
    """The chips (health, memory, HBM) and processes of an ``npu-smi info`` table.

    Rows of the table the reader does not recognise are listed in ``unparsed``; an output with no
    chip row at all (an error message instead of a table) raises :class:`Unparsed`."""
    reader = _TableReader()
    for raw in text.splitlines():
        reader.feed(raw)
    out = reader.out
    if not out.chips:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise Unparsed(f"no chip row in npu-smi info output: {first[:200]!r}" if first else "empty npu-smi output")
    return out


class _TableReader:
    def __init__(self) -> None:
        self.out = NpuSmiInfo()
        self.pending: Chip | None = None  # a first row waiting for its second row
        self.processes = False  # past the process table's heading

    def feed(self, raw: str) -> None:
        line = raw.strip()
        if not line.startswith("|"):
            return  # borders (+---+), blank lines, text around the table
        if m := _VERSION.search(line):
            self.out.version = m.group(2)
            return
        cells = _cells(line)
        if cells is None:
            self.out.unparsed.append(raw)
            return
        self.processes = self.processes or "Process id" in cells
        if _is_heading(cells):
            return
        if not self._row(cells):
            self.out.unparsed.append(raw)

    def _row(self, cells: list[str]) -> bool:
        if self.processes:
            proc = _process_row(cells)
            if proc is not None:
                self.out.processes.append(proc)
            return proc is not None
        if self.pending is not None and _second_row(cells, self.pending):
            self.pending = None
            return True
        chip = _first_row(cells)
        if chip is not None:
            self.out.chips.append(chip)
            self.pending = chip
        return chip is not None


def hbm_usage(text: str) -> list[tuple[int, int]]:
    """(used, total) HBM in MB per chip, in table order; chips without an HBM column are left out."""
    try:
        return [c.hbm for c in npu_smi_info(text).chips if c.hbm is not None]
    except Unparsed:
        return []


# ------------------------------------------------------------------------------------------------
# hccn_tool


def _value(text: str, key: str) -> str:
    """The value after ``key`` (``link status:``) on its own line; Unparsed if absent or twice."""
    found = re.findall(rf"^\s*{re.escape(key)}[ \t]*(.*?)\s*$", text, re.M)
    if len(found) != 1:
        raise Unparsed(f"no '{key}' line in {_show(text)}" if not found else f"'{key}' twice in {_show(text)}")
    return found[0]


def _show(text: str) -> str:
    text = text.strip()
    return repr(text[:200]) if text else "an empty answer"


def link(text: str) -> str:
    """``hccn_tool -i N -link -g``: UP or DOWN."""
    state = _value(text, "link status:")
    if state not in ("UP", "DOWN"):
        raise Unparsed(f"link status {state!r} in {_show(text)}")
    return state


def net_health(text: str) -> str:
    """``-net_health -g``: the state text (Success is the only healthy one). A state outside the
    tool's table (e.g. ``Socket failed`` in a vendor fixture) is returned as printed: it is read,
    and it is not Success."""
    state = _value(text, "net health status:")
    if not state:
        raise Unparsed(f"empty net health status in {_show(text)}")
    return state


@dataclass(frozen=True)
class Address:
    """A device address (``-ip -g``) or vNIC (``-vnic -g``): ``address`` None when unset."""
    address: str | None
    netmask: str | None = None
    link: str | None = None  # -vnic only: "vnic link status"

    @property
    def usable(self) -> bool:
        return self.address is not None and self.link in (None, "UP")


def ip(text: str) -> Address:
    """``hccn_tool -i N -ip -g``: ``ipaddr:A.B.C.D`` / ``netmask:...``, or no address preset."""
    if NO_IP in text:
        return Address(None)
    address = ipv4(_value(text, "ipaddr:"))
    return Address(None if address == UNSET else address, ipv4(_value(text, "netmask:")))


def vnic(text: str) -> Address:
    """``hccn_tool -i N -vnic -g`` (A3): link state and address; ``0.0.0.0`` means unset."""
    state = _value(text, "vnic link status:")
    if state not in ("UP", "DOWN"):
        raise Unparsed(f"vnic link status {state!r} in {_show(text)}")
    address = ipv4(_value(text, "vnic ipaddr:"))
    return Address(None if address == UNSET else address, ipv4(_value(text, "vnic netmask:")), state)


_TLS = re.compile(r"^\s*(?:dev_id:\s*|device\s+)(\d+),\s*tls switch\[(\d+)\]", re.M)


@dataclass(frozen=True)
class Tls:
    device: int
    switch: int


def tls(text: str) -> Tls:
    """``-tls -g``: ``dev_id:0, tls switch[0](...)`` or (newer) ``device 0, tls switch[0](...)``."""
    found = _TLS.findall(text)
    if len(found) != 1:
        raise Unparsed(f"no 'tls switch[N]' line in {_show(text)}" if not found else
                       f"several 'tls switch' lines in {_show(text)}")
    return Tls(int(found[0][0]), int(found[0][1]))


_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received, (\d+(?:\.\d+)?)% packets? loss")
_PLANE = re.compile(r"L1 plane check result\s*=\s*(0x[0-9A-Fa-f]+)")


@dataclass(frozen=True)
class Ping:
    """A ``-ping``/``-hccs_ping`` answer: packets, loss and the non-zero L1 plane check results."""
    transmitted: int
    received: int
    loss: float
    plane_errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (self.transmitted > 0 and self.received == self.transmitted and self.loss == 0.0
                and not self.plane_errors)

    def describe(self) -> str:
        text = f"{self.transmitted} transmitted, {self.received} received, {self.loss:.2f}% loss"
        return text + (f", L1 plane check result {', '.join(self.plane_errors)}" if self.plane_errors else "")


def ping(text: str) -> Ping:
    """The summary of ``hccn_tool -i N -ping|-hccs_ping -g address IP``; Unparsed without one."""
    found = _SUMMARY.findall(text)
    if len(found) != 1:
        raise Unparsed(f"no 'packets transmitted' summary in {_show(text)}" if not found else
                       f"several ping summaries in {_show(text)}")
    sent, got, loss = int(found[0][0]), int(found[0][1]), float(found[0][2])
    # a summary out of its domain is garbled, not a result: more received than sent, a loss
    # outside 0-100 % (e.g. the real '3 packets transmitted, 0 received, 100.00% packet loss' is in)
    if got > sent or not 0.0 <= loss <= 100.0:
        raise Unparsed(f"ping summary out of its domain ({sent} transmitted, {got} received, {loss}% loss) "
                       f"in {_show(text)}")
    planes = tuple(v for v in _PLANE.findall(text) if int(v, 16) != 0)
    return Ping(sent, got, loss, planes)


def spod_info(text: str) -> dict[str, int]:
    """``npu-smi info -t spod-info -i N -c C`` (A3): SDID, Super Pod ID, Super Pod Size, Server Index."""
    out = {}
    for key in ("SDID", "Super Pod ID", "Super Pod Size", "Server Index"):
        m = re.search(rf"^\s*{key}\s*:\s*(\d+)\s*$", text, re.M)
        if m:
            out[key] = int(m.group(1))
    if "Super Pod ID" not in out:
        raise Unparsed(f"no 'Super Pod ID' in {_show(text)}")
    return out


# The rest of the guides' §3.2 procedure (shared/reference/ascend-components.md §3.2-3.3):
# ``-lldp -g`` prints the neighbour's TLVs with ``\tIfname: 400GE1/1/5:1``; ``-netdetect -g``
# ``netdetect address: 11.12.165.1``; ``-gateway -g`` ``default gateway:11.12.165.1, Iface:eth0``;
# ``/etc/hccn.conf`` lines ``key_<devid>=value`` (``address_0=29.1.137.205``).


def lldp_ifname(text: str) -> str | None:
    """``-lldp -g``: the switch port's Ifname; None when no neighbour was learnt (empty answer)."""
    if not text.strip():
        return None
    return _value(text, "Ifname:") or None


def netdetect(text: str) -> str | None:
    """``-netdetect -g``: the netdetect address, None when unset (``0.0.0.0`` or empty)."""
    raw = _value(text, "netdetect address:")
    address = ipv4(raw) if raw else UNSET
    return None if address == UNSET else address


def gateway(text: str) -> str | None:
    """``-gateway -g``: the default gateway, None when unset."""
    raw = _value(text, "default gateway:").split(",", 1)[0].strip()
    address = ipv4(raw) if raw else UNSET
    return None if address == UNSET else address


def hccn_conf(text: str) -> dict[int, dict[str, str]]:
    """``/etc/hccn.conf``: device -> {key: value} from ``key_<devid>=value`` lines (comments skipped)."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([a-z_]+?)_(\d+)\s*=\s*(.*?)\s*$", line)
        if m and not line.lstrip().startswith("#"):
            out.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3)
    return out
