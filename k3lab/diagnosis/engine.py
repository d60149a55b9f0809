"""From the logs and artefacts of a run to its most likely causes, each with evidence, remedy and source.

Every catalogued signature is searched in every log file (bytes, on the lines holding its needle: :mod:`scan`); container exit
codes (``inspect.json``) and failing conformance checks count too. Findings rank as the Ascend cluster
tools locate a fault: a cause the logs state (out of memory, a port taken, a missing file) ranks above
the symptoms that follow it (link and collective timeouts, dead engines), and among equals the one seen
first, by the lines' own timestamps, wins. The node of that first line is the root-cause node; nodes
that failed later are listed, not blamed.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from k3lab.diagnosis import catalogue as _catalogue
from k3lab.diagnosis import codes as _codes
from k3lab.diagnosis import scan as _scan_mod
from k3lab.diagnosis.catalogue import Catalogue, Cause, Signature
from k3lab.diagnosis.logs import NO_NODE, Layout, LogFile, check_dir, collect
from k3lab.diagnosis.scan import line_at as _line_at
from k3lab.model import runs

KEEP = 5  # evidence lines kept per cause
LINE_CHARS = 400
_DAY = 86400.0

# Timestamps as the components print them; each gives month, day, hour, minute, second (+ fraction).
# Years are dropped: lines of one run compare within a year, and most formats carry none.
_TIMES = [
    re.compile(rb"\d{4}-(\d\d)-(\d\d)-(\d\d):(\d\d):(\d\d)(?:\.(\d+))?"),  # CANN plog 2026-05-21-21:39:58.705.534
    re.compile(rb"\d{4}-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"),  # ISO, MemCache, newer vllm-ascend
    re.compile(rb"\b[IWEF]\d{4}(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?"),  # glog E20260106 06:43:02.966156
    re.compile(rb"\b[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?"),  # glog E1210 / torch [W806 22:23:09.97
    re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)"),  # vLLM INFO 06-08 14:45:44
]


def _seconds(m: re.Match[bytes]) -> float | None:
    g = m.groups()
    mo, d, h, mi, s = (int(x) for x in g[:5])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return None
    frac = float(b"0." + g[5]) if len(g) > 5 and g[5] else 0.0
    return ((mo - 1) * 31 + d - 1) * _DAY + h * 3600 + mi * 60 + s + frac


def line_time(text: bytes) -> float | None:
    """Seconds into the year of the first timestamp in ``text``, or None."""
    best: tuple[int, float] | None = None
    for rx in _TIMES:
        m = rx.search(text)
        if m and (t := _seconds(m)) is not None and (best is None or m.start() < best[0]):
            best = (m.start(), t)
    return best[1] if best else None


def _time_before(data: bytes, start: int, window: int = 8192) -> float | None:
    """The last timestamp in the lines before ``start``: a traceback's lines carry none of their own."""
    chunk = data[max(0, start - window):start]
    best: tuple[int, float] | None = None
    for rx in _TIMES:
        for m in rx.finditer(chunk):
            if (t := _seconds(m)) is not None and (best is None or m.start() > best[0]):
                best = (m.start(), t)
    return best[1] if best else None


@dataclass(frozen=True)
class Evidence:
    node: str
    file: str
    line: int  # 1-based in what was read (0: not a line of a log, e.g. a container's exit code)
    text: str
    when: float | None = None
    at: int = field(default=-1, compare=False, repr=False)  # the line's byte offset in its file (-1: not a log line)

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class Finding:
    cause: Cause
    evidence: list[Evidence] = field(default_factory=list)  # earliest first, at most KEEP
    count: int = 0
    nodes: list[str] = field(default_factory=list)  # root-cause node first
    by_code: bool = False  # only an error code's documented meaning points here, no wording of the cause

    @property
    def node(self) -> str | None:
        return self.nodes[0] if self.nodes else None

    @property
    def first(self) -> float | None:
        times = [e.when for e in self.evidence if e.when is not None]
        return min(times) if times else None

    @property
    def warned_only(self) -> bool:
        """Every line shown was logged at INFO or WARNING level: a component that only warned (Ray's object store
        falling back from a small /dev/shm, Gloo falling back to loopback) points here less firmly than an error."""
        return bool(self.evidence) and all(e.line and _NOT_ERROR.search(e.text.encode()) for e in self.evidence)

    @property
    def warning_only(self) -> bool:
        """Every line shown is a warning (or says its error was ignored, as a warning would): what healthy start-ups
        print too, no cause unless something failed."""
        return bool(self.evidence) and all(e.line and _WARNED.search(e.text.encode()) for e in self.evidence)

    def as_dict(self) -> dict[str, Any]:
        c = self.cause
        # a cause an error line states outright is high confidence; a symptom (a timeout, a dead engine) or a cause
        # only warned about only points
        confidence = "high" if c.tier == "cause" and not self.warned_only else "medium"
        return {"id": c.id, "title": c.title, "component": c.component, "tier": c.tier, "confidence": confidence,
                "node": self.node,
                "nodes": self.nodes, "count": self.count, "explanation": c.explanation, "remedy": c.remedy,
                "sources": c.sources,
                "evidence": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text} for e in self.evidence]}


@dataclass
class Diagnosis:
    root: Path
    kind: str
    findings: list[Finding]
    looked: list[tuple[str, str, int]]  # (node, file, bytes) of every file read
    nodes: list[str]
    notes: list[str] = field(default_factory=list)
    gate: dict[str, Any] | None = None  # the failed readiness gate, when the bring-up stopped at one
    skipped: list[str] = field(default_factory=list)  # files not read as logs, each with why
    # when no cause matched: the earliest error lines across the nodes, the closest the logs come to a cause
    first_errors: list[Evidence] = field(default_factory=list)
    # when no signature matched: the causes whose meaning a first error line holds (lower confidence, see _likely)
    likely: list[Finding] = field(default_factory=list)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def failed(self) -> bool:
        """A cause matched, or the logs hold an error line no cause explains."""
        return bool(self.findings or self.first_errors)

    def as_dict(self) -> dict[str, Any]:
        verdict = ("cause" if self.findings else "likely" if self.likely else "first-error" if self.first_errors
                   else "clean")
        return {"dir": str(self.root), "kind": self.kind, "verdict": verdict, "nodes": self.nodes, "gate": self.gate,
                "findings": [f.as_dict() for f in self.findings],
                "likely": [{**f.as_dict(), "tier": LIKELY, "confidence": LIKELY} for f in self.likely],
                "first_errors": [{"node": e.node, "file": e.file, "line": e.line, "text": e.text,
                                  "codes": _codes.describe(e.text)} for e in self.first_errors],
                "looked": [{"node": n, "file": f, "bytes": b} for n, f, b in self.looked], "notes": self.notes,
                "skipped": self.skipped}


# ------------------------------------------------------------------------------------------ matching


@dataclass
class _Hits:
    count: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    by_code: bool = False


def _line_text(raw: bytes) -> str:
    """A log line as evidence shows it: decoded, stripped, at most LINE_CHARS."""
    return raw.decode("utf-8", "replace").strip().replace("\r", "")[:LINE_CHARS]


def _evidence(f: LogFile, positions: list[int]) -> list[Evidence]:
    """Evidence for the first KEEP distinct lines among ``positions`` (sorted), line numbers counted once."""
    out: list[Evidence] = []
    line, last, seen = 1, 0, set()
    for pos in positions:
        start, end = _line_at(f.data, pos)
        if start in seen:
            continue
        seen.add(start)
        line += f.data.count(b"\n", last, start)
        last = start
        raw = f.data[start:end]
        when = line_time(raw)
        if when is None:
            when = _time_before(f.data, start)
        out.append(Evidence(f.node, f.rel, line, _line_text(raw), when, start))
        if len(out) >= KEEP:
            break
    return out


def _scan(f: LogFile, cat: Catalogue, active: set[int], unplaced: list[int] | None = None) -> dict[str, _Hits]:
    """Every active signature over one file, grouped by cause id; the lines of a signature whose context the file lacks
    go to ``unplaced``: no cause, but still a failure line a catalogue entry knows."""
    # a service that came up and stayed up: its earlier lines are no cause
    seen = _scan_mod.Seen(max(0, _up_at(f.data, 0)), keep=4 * KEEP)
    pairs = cat.signatures
    _scan_mod.scan(f.data, cat.needles, lambda i: pairs[i][1], active, seen)
    out: dict[str, _Hits] = {}
    by_cause: dict[str, list[int]] = {}
    for i in [i for i in seen.count if not _in_context(f.data, pairs[i][1])]:
        del seen.count[i]
        if unplaced is not None:
            unplaced += seen.starts[i]
    for i in seen.count:
        by_cause.setdefault(pairs[i][0].id, []).append(i)
    for cid, idx in by_cause.items():
        starts = sorted({s for i in idx for s in seen.starts[i]})
        out[cid] = _Hits(sum(seen.count[i] for i in idx), _evidence(f, starts),
                         all(pairs[i][1].code for i in idx))
    return out


def _in_context(data: bytes, sig: Signature) -> bool:
    """A signature with a context counts only when its file holds that context too (searched once it matched)."""
    rx = sig.context_regex
    return rx is None or rx.search(data) is not None


def _iso_seconds(value: object) -> float | None:
    try:
        t = _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")[:26])
    except ValueError:
        return None
    return ((t.month - 1) * 31 + t.day - 1) * _DAY + t.hour * 3600 + t.minute * 60 + t.second


def _exit_hits(layout: Layout, cause: Cause) -> list[_Hits]:
    out = []
    for node, doc in layout.inspect.items():
        state = doc.get("State")
        st: dict[str, Any] = state if isinstance(state, dict) else {}
        code = st.get("ExitCode")
        if isinstance(code, int) and code in cause.exit_codes and st.get("Status") in ("exited", "dead"):
            ev = Evidence(node, f"evidence/{node}/inspect.json", 0, f"container exited with code {code}",
                          _iso_seconds(st.get("FinishedAt")))
            out.append(_Hits(1, [ev]))
    return out


def _check_hits(rows: list[runs.ResultRow], cause: Cause) -> list[_Hits]:
    out = []
    for row in rows:
        name = (row.id or row.nodeid).rsplit("::", 1)[-1]
        if any(fnmatch.fnmatchcase(name, pat) for pat in cause.checks):
            text = f"check {name} failed: {row.message[:LINE_CHARS]}"
            out.append(_Hits(1, [Evidence(row.node or NO_NODE, "conformance-results.json", 0, text)]))
    return out


# A Python exception's line: its class, then a colon. A builtin or a capitalised class ("ValueError: "), or a class
# named under its module's dotted path whatever its case, as Python prints an exception outside builtins: a pybind11
# binding's ("nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND", dynamo#1519), the socket module's
# ("socket.gaierror: [Errno -2] Name or service not known": the standard library's two lower-case "error" classes; any
# other "x.on_error:" is a setting's name)
_EXCEPTION_NAME = rb"\b[A-Z]\w*(?:Error|Exception):|\b[a-z_]\w*(?:\.\w+)*\.(?:[a-z]\w*(?:Error|Exception)|gaierror|herror):"
# ...and an exception raised with no message: Python's last traceback line is then its class alone, at the start of
# the line or after a rank's or a worker's prefix ("[rank0]: NotImplementedError", HabanaAI/vllm-fork#1557)
_BARE_RAISE = rb"|(?:^|(?<=\n)|(?<=: )|(?<=\] ))[A-Z]\w*(?:Error|Exception)[ \t]*(?=\r?\n|\Z)"
# An error as the components print one, whatever its cause: a log level, a glog E/F line, a Python exception
# line, a CANN/HCCL error code (EI0006, EL0001, EZ9999), a vllm-ascend/MindIE ERRnnnnn, "failed", a crash.
_ERROR_LINE = re.compile(
    rb"\b(?:ERROR|CRITICAL|FATAL)\b|(?<![^\s])[EF]\d{4} \d\d:\d\d:\d\d|" + _EXCEPTION_NAME +
    rb"|\bE[A-Z]\d{4}\b|\bERR\d{5}\b|\b(?:[Ee]rror|[Ff]ail(?:ed|ure)?)\b|\bcannot open shared object"
    # the dynamic loader's statement, an error wherever it is printed: quoted on its own line inside a wrapper's
    # multi-line message (mmengine's "command error: 'Failed to import ...:" above ".../libtorch_npu.so: undefined symbol:
    # ...", Ascend/pytorch#35), pasted without its ImportError (triton-ascend#328)
    rb"|\bundefined symbol: "
    rb"|Segmentation fault|core dumped|Aborted|Fatal Python error|\*\*\* Check failure|^Traceback \(most recent"
    rb"|^panic: |\bpanicked at\b"  # a Go or Rust program's crash (a backend of LocalAI, Ollama, a router)
    rb"|^Exception: "  # Python's line for a bare `raise Exception(...)`: no class prefix for the rule above
    + _BARE_RAISE,
    re.M)
# A line its component logs at WARNING level: glog's W, torch's TORCH_WARN ("[rank0]:[W428 05:12:30.77
# ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname ...", older torch "[W socket.cpp:663] [c10d] ...", as
# vllm-ascend#696 and vllm-backport#14 show them), Paddle-Lite's "[W  5/ 9 20:23:15.461 ...utility.cc:57
# InitializeAscendCL] CANN version mismatch. The build version is 0.0.0, ..." (printed at every start of a build that
# recorded no CANN version: FastDeploy#2162, Paddle-Lite#10678), Python's warnings ("UserWarning: "), torch_npu's
# import-time prints ("Warning : CANN package version ... do not match", utils/npu_intercept.py)
_WARNING_LEVEL = (rb"\b(?:WARNING|WARN)\b|(?<![^\s])W\d{4} \d\d:\d\d:\d\d|\[WARNING\]"
                  rb"|\[W(?:\d{3,4} [\d:.]+)? [\w.-]+\.\w+:\d+\]|\[W {1,2}\d{1,2}/ ?\d{1,2} +\d{1,2}: ?\d{1,2}: ?\d"
                  rb"|\b\w*Warning ?: ")
_WARNING = re.compile(_WARNING_LEVEL)
# a line its own component logs at INFO or WARNING level is no error, whatever it says ("Failed to import
# from vllm._C" is a warning every vllm-ascend start prints), nor is a line that says it ignores an error: SGLang's
# model registry prints "Ignore import error when loading sglang.srt.models.X: ..." with no level at every start of a
# build whose transformers lacks one optional model (sglang#3792, and its CI logs), as other tools say "..., ignoring
# error" (#32 pass 19)
_IGNORED_ERROR = rb"\b[Ii]gnor(?:e|es|ed|ing)\b(?: [\w.-]+){0,2} (?:error|exception)s?\b"
_WARNED = re.compile(_WARNING_LEVEL + b"|" + _IGNORED_ERROR)
_NOT_ERROR = re.compile(rb"\b(?:INFO|DEBUG)\b|(?<![^\s])I\d{4} \d\d:\d\d:\d\d|\[(?:INFO|DEBUG)\]|can be (?:safely )?ignored|"
                        + _IGNORED_ERROR + b"|" + _WARNING_LEVEL)
# ...nor is an error message the log announced as harmless: vLLM's and SGLang's Triton decode-attention kernels
# print "The following error message 'operation scheduled before its operands' can be ignored." before Triton's
# own "loc(...): error: operation scheduled before its operands" (vllm#14447, sglang#4058)
_IGNORABLE = re.compile(rb"error message '([^'\n]{4,200})' can be (?:safely )?ignored")
# The service shown to have come up: uvicorn's start-up lines and vLLM's own (dev excerpts: uvicorn#458 and
# vllm#8204 "Application startup complete.", "Uvicorn running on"; vllm#30749 "Starting vLLM API server 0 on"),
# or a health probe answered (uvicorn's access line, as in vllm#14736). Error lines before the last of them did
# not stop the service (a retry that succeeded, an optional extension that failed to import): a note, not a
# first error.
_READY = (b"Application startup complete.", b"Uvicorn running on ", b"Starting vLLM API server ",
          b'"GET /health HTTP/1.1" 200')
# ...unless the log shows the service going down after it: a traceback, a dead engine or worker, a crash, a
# non-zero exit (vllm-ascend#5509: "Worker proc VllmWorker-0 died unexpectedly"; vLLM's EngineDeadError), or
# uvicorn shutting the application down: it logs "Application startup complete." before it binds the port, and
# on a failed bind goes straight to "Waiting for application shutdown." (openui#226, fast-stable-diffusion#1481)
# (literals found by bytes.find: one regex alternation of them scans ~10 MB/s, too slow for a big log)
_FATAL = (b"Traceback (most recent call last)", b"EngineDeadError", b" died", b"Segmentation fault", b"core dumped",
          b"Fatal Python error", b"Aborted", b"*** Check failure", b"SIGBUS", b"SIGSEGV", b"SIGKILL", b"SIGABRT",
          b"Waiting for application shutdown",
          # asyncio's create_server bind failure (uvicorn logs it after "Application startup complete.", then exits)
          b"error while attempting to bind on address")
_FATAL_EXIT = re.compile(rb"exit(?:ed)? (?:with )?(?:code|status)[ :=]*[1-9]")  # a literal prefix: re's fast search
# ...unless no line is an error by its level: then a line that reports a failure event whatever its level (a
# watchdog firing, a wait that timed out, a crash signal) is the closest the log comes to an error
# (vllm-ascend#5468: the CANN plog says only "[INFO] ... watchdog timeout"), or NCCL's trace of a failed call's return
# code up its stack ("NCCL INFO transport/shm.cc:551 -> 2", after a WARN that names the failure: pytorch/ci-infra#490)
# ...and a process the shell reports killed (bash's "Killed" job line), a compiled extension that did not load whatever
# the level it is logged at (xformers' "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions.", torchvision's
# "Couldn't load custom C++ ops."), a model Triton's status table shows not loaded ("| UNAVAILABLE: Internal: ...")
_EVENT_LINE = re.compile(rb"watchdog timeout|\btimed out\b|\bcore dumped\b|\bBus error\b|\bSIG(?:BUS|SEGV|KILL|ABRT)\b"
                         rb"|\b[Oo]ut of memory\b|(?:exited|died|terminated) unexpectedly|NCCL INFO [\w/.]+:\d+ -> [1-9]"
                         rb"|(?m:^[ \t]*Killed[ \t]*$)|: line \d+: +\d+ Killed\b|\|\s*UNAVAILABLE: "
                         rb"|(?i:(?:can't|cannot|could not|couldn't|unable to|failed to) load (?:custom )?(?:C\+\+|CUDA))"
                         # numpy 2's import-time banner for a module built for 1.x; a resolver that found no set of
                         # releases (uv's "No solution found when resolving dependencies", its pubgrub derivation
                         # "And because vllm>=0.8.5 depends on torch==2.6.0, we can conclude that ...": a pin or a
                         # dependency on the line, not prose; poetry's "version solving failed"): printed with no level
                         rb"|module that was compiled using NumPy 1\.x cannot be run in|No solution found when resolving"
                         rb"|\b[Bb]ecause\b[^\n]*(?:[<>=!~]=|\bdepends on\b|\bis available\b)[^\n]*\bwe can conclude\b"
                         rb"|\bversion solving failed\b")
# The failures a cause only warned about can explain: a wait that timed out or hung, a crash, a dead process, a peer
# that refused or dropped the connection (Gloo's loopback fallback: "Connection refused, remote=[127.0.0.1]"; a small
# /dev/shm: SIGBUS), or a component's own error line next to its warning (sglang#4880: Mooncake's W "Failed to
# retrieve segment descriptor" and its E "metadata not found"). A Python exception that states another reason (a
# ValueError about the model) is not explained by an earlier warning.
# ...but advice about an event is none: vLLM's model_runner logs at every start with CUDA graphs "CUDA graphs can take
# additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization`"
_ADVICE = re.compile(rb"\b[Ii]f\b[^.;!?\n]*(?:" + _EVENT_LINE.pattern + rb")")
_WARNED_FAILURE = re.compile(_EVENT_LINE.pattern + rb"|\b[Tt]ime ?out\b|\bTimeoutError\b|Connection (?:refused|reset)"
                             rb"|\bhang")
_EXCEPTION = re.compile(_EXCEPTION_NAME + rb"|^Exception: ", re.M)  # and a bare `raise Exception(...)`, as _ERROR_LINE
FIRST_ERRORS = 3
FIRST_ERROR_BYTES = 8 << 20  # of each file's end: the generic error regex is slow, and a failure ends a log


def _line_starts(data: bytes, rx: re.Pattern[bytes], begin: int, keep) -> list[int]:
    """Positions of the first FIRST_ERRORS lines from ``begin`` that ``rx`` matches and ``keep`` accepts."""
    out: list[int] = []
    for m in rx.finditer(data, begin):
        start, end = _line_at(data, m.start())
        if keep(start, end) and (not out or _line_at(data, out[-1])[0] != start):
            out.append(m.start())
            if len(out) >= FIRST_ERRORS:
                break
    return out


def _up_at(data: bytes, begin: int) -> int:
    """The end of the last readiness line from ``begin`` when nothing fatal follows it, else -1."""
    last = max(data.rfind(needle, begin) for needle in _READY)
    if last < 0:
        return -1
    end = _line_at(data, last)[1]
    fatal = any(data.find(needle, end) >= 0 for needle in _FATAL) or _FATAL_EXIT.search(data, end)
    return -1 if fatal else end


def _with_last_frame(data: bytes, found: list[int]) -> list[int]:
    """A traceback with no error line after it was cut inside its frames (a paste that stops there, vllm#2418):
    its last frame is where it stopped, the file:line to show with it."""
    if len(found) != 1 or data.find(b"Traceback (most recent call last)", *_line_at(data, found[0])) < 0:
        return found
    frame = data.rfind(b'  File "')
    return found + [frame] if frame > found[0] else found


def _error_positions(data: bytes, unplaced: list[int] | None = None) -> tuple[list[int], int]:
    """The first error lines, and where the service came up after them for good (-1: it did not)."""
    begin = max(0, len(data) - FIRST_ERROR_BYTES)
    begin = data.find(b"\n", begin - 1) + 1 if begin else 0  # from a whole line
    ignorable = [m[1] for m in _IGNORABLE.finditer(data)] if data.find(b"can be", begin) >= 0 else []

    def an_error(s: int, e: int) -> bool:
        return not _NOT_ERROR.search(data, s, e) and not any(data.find(x, s, e) >= 0 for x in ignorable)
    found = _with_last_frame(data, _line_starts(data, _ERROR_LINE, begin, an_error))
    up = _up_at(data, begin)
    if up >= 0:  # nothing fatal after the service came up: only error lines before it, a note
        return [p for p in found if p < up], up
    # no error-level line: a line a signature matched without its context (heldout vllm-ascend#2674's MTE address
    # error alone) still failed, else a failure event
    return found or sorted(set(unplaced or []))[:FIRST_ERRORS] or _line_starts(data, _EVENT_LINE, begin, lambda s, e: not _ADVICE.search(data, s, e)), -1


def _first_errors(files: list[LogFile], rank, unplaced: list[list[int]] | None = None) -> tuple[list[Evidence], list[str]]:
    """The earliest error lines across the files (by their times, else the order read), at most FIRST_ERRORS;
    and a note for each file whose service came up after its error lines."""
    found: list[Evidence] = []
    notes: list[str] = []
    for k, f in enumerate(files):
        positions, up = _error_positions(f.data, unplaced[k] if unplaced else [])
        if up >= 0:
            if positions:
                e = _evidence(f, positions[:1])[0]
                notes.append(f"{e.where()}: error line before the service came up, nothing fatal after it: {e.text}")
            continue
        mine, later = _evidence(f, positions), None
        for i in reversed(range(len(mine))):  # a line without a time (a traceback's) is no later than the next
            if mine[i].when is None:
                mine[i] = replace(mine[i], when=later)
            later = mine[i].when
        found += mine
    return sorted(found, key=rank)[:FIRST_ERRORS], notes


# ------------------------------------------------------------------------------------------ ranking


def _node_rank(nodes: list[str], gate: dict[str, Any] | None):
    order = {n: i for i, n in enumerate(nodes)}
    gate_node = (gate or {}).get("node")

    def rank(e: Evidence) -> tuple[float, int, int]:
        # earliest line first; without times, the node a gate failed on, then the plan's order
        return (e.when if e.when is not None else math.inf, 0 if e.node == gate_node else 1,
                order.get(e.node, len(order)))
    return rank


def _finding(cause: Cause, hits: list[_Hits], rank) -> Finding:
    evidence = sorted((e for h in hits for e in h.evidence), key=rank)
    nodes = list(dict.fromkeys(e.node for e in evidence))
    return Finding(cause, evidence[:KEEP], sum(h.count for h in hits), nodes, all(h.by_code for h in hits))


def _order(f: Finding) -> tuple[int, int, int, float, int, str]:
    # within a tier, a cause an error line states outranks one only warned about, and a cause's own wording one
    # inferred from an error code alone; symptoms go by time whatever named them: a code's documented symptom (EI0002's
    # collective timeout) seen first is nearer the root than the dead engine vLLM reports after it
    first = f.first
    cause = f.cause.tier == "cause"
    return (0 if cause else 1, int(f.warned_only), int(f.by_code and cause),
            first if first is not None else math.inf, -f.cause.weight, f.cause.id)


def _results(root: Path) -> tuple[list[runs.ResultRow], dict[str, str], list[str]]:
    """Failing rows and versions of the suite's results, when the directory has them."""
    path = root / "conformance-results.json"
    if not path.is_file():
        return [], {}, []
    from k3lab.errors import InputError

    try:
        res = runs.results(root)
    except InputError as exc:
        return [], {}, [str(exc)]
    rows = [r for r in res.tests if r.outcome in ("failed", "error")]
    return rows, dict(res.versions), []


def _gate(root: Path) -> dict[str, Any] | None:
    from k3lab.errors import InputError

    try:
        doc = runs.read_doc(root / runs.GATE_FAILURE, 4 << 20)
    except (InputError, ValueError):  # missing, linked out of the run, too large: no stage to name
        return None
    return doc if isinstance(doc, dict) else None


def diagnose(path: str | Path, cat: Catalogue | None = None, versions: dict[str, str] | None = None) -> Diagnosis:
    """Diagnose a run directory or a folder of hand-collected logs (InputError when it is neither)."""
    root = check_dir(path)
    cat = cat or _catalogue.load()
    layout = collect(root)
    rows, found_versions, problems = _results(root)
    versions = {**found_versions, **(versions or {})}
    gate = _gate(root)
    rank = _node_rank(layout.nodes, gate)
    active = {i for i, (_, sig) in enumerate(cat.signatures) if sig.holds_for(versions)}
    unplaced: list[list[int]] = [[] for _ in layout.files]
    per_file = [_scan(f, cat, active, unplaced[k]) for k, f in enumerate(layout.files)]
    findings = sorted(_findings(cat, per_file, layout, rows, rank), key=_order)
    looked = [(f.node, f.rel, f.size) for f in layout.files]
    findings, first, benign = _failed_or_warned(findings, layout.files, rank, unplaced)
    return Diagnosis(root, layout.kind, findings, looked, layout.nodes, layout.notes + problems + benign, gate,
                     layout.skipped, first, [] if findings else _likely(cat, first, layout.files))


LIKELY = "likely"  # the tier and confidence of a cause read from a first error's meaning, below every signature's


# a traceback's frame header as Python prints it (`File "x.py", line 9, in f`, also under a log prefix: vLLM's
# "ERROR ... [core.py:387]   File ...", a timestamp per line) and as IPython / Jupyter do: IPython >= 8 "File
# /x/configuration_auto.py:748, in _LazyConfigMapping.__getitem__(self, key)", older "/x/configuration_auto.py in
# __getitem__(self, key)", each followed by numbered source lines before the exception
_FRAME = re.compile(rb'(?:^|\s)File (?:"[^"\n]+", line \d+|[^\s"]+:\d+, in )|(?:^|\s)[^\s"]+\.py in [\w.<>]+\(')
FRAME_LINES = 8  # lines above an exception searched for its frame: IPython prints up to 5 source lines per frame


def _file_of(e: Evidence, files: list[LogFile]) -> LogFile | None:
    """The log file an evidence line was read from."""
    return next((f for f in files if f.node == e.node and f.rel == e.file), None)


def _with_frame(e: Evidence, files: list[LogFile]) -> str:
    """An exception line read with the traceback's last frame above it (``File ".../transformers/..."``): where it
    was raised is part of what it means (a KeyError inside transformers' config mapping)."""
    if not _EXCEPTION.search(e.text.encode()):
        return e.text
    f = _file_of(e, files)
    if f is None or e.at <= 0:
        return e.text
    at = e.at
    for _ in range(FRAME_LINES):  # back to the start of the line FRAME_LINES above, from the offset the evidence kept
        at = f.data.rfind(b"\n", 0, max(0, at - 1)) + 1
    lines = f.data[at:e.at].split(b"\n")[:FRAME_LINES]
    m = next((m for x in reversed(lines) if (m := _FRAME.search(x))), None)
    frame = m.string[m.start():] if m else b""
    return frame.decode("utf-8", "replace").strip() + " " + e.text


# a message that goes on past its line: it stops on a comma, a colon (xFormers' "built for:" above its versions) or
# on a word no sentence ends with (an article, a preposition, a conjunction, a copula), as Python's multi-line
# exception messages and terminals that wrap a pasted line leave it ("ValueError: To serve at least one request with
# the model's max seq len (1048576)," above "22.5 GiB KV cache is needed, ...": kaito#2132), or an exception whose
# message starts on the next line ("ValueError: " alone, the rest below, as a vLLM user's troubleshooting note quotes
# it). A line that merely lacks a full stop is whole: most do
_OPEN_END = re.compile(rb"(?:[,:]|\b(?:the|a|an|of|to|than|and|or|but|is|are|was|were|be|with|for|from|by|that|which)"
                       rb"|" + _EXCEPTION_NAME + rb")\s*$")
CONTINUATION_LINES = 2


def _continued(data: bytes, end: int) -> bytes:
    """The lines that continue the message ending at ``end``: at column 0, with no time, level or error of their own
    (then they are a line of their own), at most CONTINUATION_LINES, while the message stays open."""
    out = b""
    for _ in range(CONTINUATION_LINES):
        if not _OPEN_END.search(data, max(0, end - 80), end) or end >= len(data):
            break
        colon = data[max(0, end - 8):end].rstrip().endswith(b":")
        start, end = _line_at(data, end + 1)
        raw = data[start:end]
        # a line of its own: indented (a frame's code; but after a colon, the items it announces: xFormers' "xFormers
        # was built for:" above "    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cu118)", xformers#800),
        # timed, leveled, an error, or one token (an error name)
        if ((not raw[:1].strip() and (not colon or _BODY_END.match(raw))) or b" " not in raw.strip()
                or line_time(raw) is not None or _ERROR_LINE.search(raw) or _NOT_ERROR.search(raw)):
            break
        out += b" " + raw.strip()
    return out


# ...and an exception's message is all the lines below it up to a blank line, indented ones too (Ray's RayActorError:
# "The actor died unexpectedly ..." then its attributes indented, then "The actor is dead because ... Worker exit
# detail: Task was killed due to the node running low on memory.", ray#28778), unless a line is one of its own
_BODY_END = re.compile(rb'^\s*(?:$|File "|Traceback \(|During handling|The above exception)')
EXCEPTION_BODY_LINES = 8


def _exception_body(data: bytes, end: int) -> bytes:
    out = b""
    for _ in range(EXCEPTION_BODY_LINES):
        if end >= len(data):
            break
        start, end = _line_at(data, end + 1)
        raw = data[start:end]
        if _BODY_END.match(raw) or line_time(raw) is not None or _ERROR_LINE.search(raw) or _NOT_ERROR.search(raw):
            break
        out += b" " + raw.strip()
    return out


def _with_continuation(e: Evidence, files: list[LogFile]) -> Evidence:
    """An error line with the lines that carry on its message (a traceback's frame is no message: never continued)."""
    f = _file_of(e, files)
    if f is None or e.at < 0 or 'File "' in e.text:
        return e
    end = _line_at(f.data, e.at)[1]
    more = _exception_body(f.data, end) if _EXCEPTION.search(e.text.encode()) else _continued(f.data, end)
    return replace(e, text=e.text + more.decode("utf-8", "replace")) if more else e


MEANING_LINES = 40  # error lines read for a meaning from a file's first error on
MEANING_BYTES = 256 << 10  # ...within this many bytes of it


def _meaning_lines(first: list[Evidence], files: list[LogFile]) -> list[Evidence]:
    """The first errors, then the error lines that follow each file's first error, in order: a wrapper's error or a
    traceback's frames come first, and the line that states the cause (the exception below the frames, the reason
    a framework prints after its own "failed to start") a few lines later."""
    out = list(first)
    seen = {(e.node, e.file, e.at) for e in first}
    windows: set[tuple[str, str]] = set()  # one window per file, from its earliest first error
    for e in first:
        f = _file_of(e, files)
        if f is None or e.at < 0 or (e.node, e.file) in windows:
            continue
        windows.add((e.node, e.file))
        line, last, kept = e.line, e.at, 0
        for m in _ERROR_LINE.finditer(f.data, e.at, e.at + MEANING_BYTES):
            start, end = _line_at(f.data, m.start())
            if (f.node, f.rel, start) in seen or _NOT_ERROR.search(f.data, start, end):
                continue
            seen.add((f.node, f.rel, start))
            line += f.data.count(b"\n", last, start)
            last = start
            out.append(Evidence(f.node, f.rel, line, _line_text(f.data[start:end]), e.when, start))
            kept += 1
            if kept >= MEANING_LINES:
                break
    return out


# an item of a numbered list of possible reasons or remedies ("...may be due to the following reasons:" then
# "[87033]5. The TLS switch is inconsistent, ..." in HCCL's socket manager): a guess the component offers, not a
# statement of what happened; the words before the list on the same line still state what failed ("Getting socket
# times out. Reason: 1. The remote does not initiate a connect request")
_LIST_ITEM = re.compile(r"(?:^|[\s\]>|])\d{1,2}\. +[A-Za-z]")


# a C++ symbol the loader could not resolve, as the Itanium ABI mangles it ("undefined symbol: _ZN2at19Undefined...",
# "_ZNK3c1017SymbolicShapeMeta..."): read by the namespace it names (at::, c10::, torch:: are torch's own, so an
# extension built against another torch), and by std::__cxx11:: when it holds one (then the extension and the library
# differ by the C++ ABI they were built with, which a release mismatch and a broken build alike leave)
_MANGLED = re.compile(r"undefined symbol: _ZNK?(\d{1,2})([A-Za-z_]\w*)")


def _read_symbol(line: str) -> str:
    m = _MANGLED.search(line)
    if m is None:
        return line
    n, rest = int(m[1]), m[2]
    abi = " std::__cxx11::" if "__cxx11" in rest else ""
    return f"{line} ({rest[:n]}::{abi})" if len(rest) > n else line


# a Python mapping's repr inside a message ("current_node_resource={'accelerator_type:T4': 1.0, 'memory': 1.9e11,
# 'CPU': 112.0}", Ray's resources in vLLM's ray_utils; a config dict a wrapper dumps): its keys are data, not the
# message's words ("memory" and "node" there state no host OOM, vllm#29265); to the end when the line was cut inside it
_MAPPING_REPR = re.compile(r"\{'[^'{}\n]{1,80}': [^{}\n]*(?:\}|$)")


def _likely(cat: Catalogue, first: list[Evidence], files: list[LogFile]) -> list[Finding]:
    """The causes whose meaning (catalogue.yaml ``meaning``) an error line holds, the earliest line first: another
    project's wording of a cause the catalogue has (a wrapper's, a serving framework's). Only the first error lines
    and the few error lines after them are read, so it costs nothing on a large log."""
    out: dict[str, Finding] = {}
    for e in _meaning_lines(first, files):
        read = _with_continuation(e, files)  # read with its continuation, shown as logged
        item = _LIST_ITEM.search(read.text)
        line = _read_symbol(_with_frame(replace(read, text=read.text[:item.start()]) if item else read, files))
        line = _MAPPING_REPR.sub("{...}", line)
        for cause in cat.causes:
            if cause.meaning and cause.means(line):
                f = out.setdefault(cause.id, Finding(cause))
                f.evidence.append(e)
                f.count += 1
                if e.node not in f.nodes:
                    f.nodes.append(e.node)
    return list(out.values())


def _findings(cat: Catalogue, per_file: list[dict[str, _Hits]], layout: Layout, rows: list[runs.ResultRow],
              rank) -> list[Finding]:
    out = []
    for cause in cat.causes:
        hits = [h for found in per_file if (h := found.get(cause.id))]
        hits += _exit_hits(layout, cause) if cause.exit_codes else []
        hits += _check_hits(rows, cause) if cause.checks else []
        if hits:
            out.append(_finding(cause, hits, rank))
    return out


def _failed_or_warned(findings: list[Finding], files: list[LogFile], rank,
                      unplaced: list[list[int]] | None = None) -> tuple[list[Finding], list[Evidence], list[str]]:
    """The findings, the first errors (when no cause is named) and notes. A cause only warned about (Gloo's loopback
    fallback, Ray's /tmp fallback for a small /dev/shm: warnings healthy start-ups print) is named only when the logs
    show a failure it may explain (a timeout, a crash, a dead process, a refused connection); on logs with none it is
    a note, not a root cause, even when the excerpt ends before a readiness line, and with another failure the first
    error is shown instead."""
    warned = bool(findings) and all(f.warning_only for f in findings)
    if findings and not warned:
        stated = _stated_by_code(findings, files, rank)
        return ([], *stated) if stated else (findings, [], [])
    first, notes = _first_errors(files, rank, unplaced)
    if warned and not any(_WARNED_FAILURE.search(t) or not _EXCEPTION.search(t) for t in (e.text.encode() for e in first)):
        return [], first, notes + [_warning_note(f, bool(first)) for f in findings]
    return findings, [] if findings else first, notes


def _stated_by_code(findings: list[Finding], files: list[LogFile], rank) -> tuple[list[Evidence], list[str]] | None:
    """The first errors and notes when only symptoms were found and a first error's code states their cause."""
    if any(f.cause.tier == "cause" for f in findings):
        return None
    first, notes = _first_errors(files, rank)
    return (first, notes) if any(_code_outside_catalogue(e, findings) for e in first) else None


# the hcomm error codes' categories whose meaning is a cause rather than an event (docs/en/error_codes: EI0001
# Config_Error_..., EI0003/EI0005 Invalid_Argument..., EI0004 File_Operation_Error_Parse, EI0007 Resource_Error, ...)
_STATES_CAUSE = re.compile(r"(?:Config_Error|Invalid_Argument|File_Operation_Error|Package_Error|Resource_Error)")


def _code_outside_catalogue(e: Evidence, symptoms: list[Finding]) -> bool:
    """A first error carries a documented code that states a cause the catalogue does not hold (HCCL's EI0005: the
    arguments differ between ranks) and precedes every symptom: the symptoms (a transport that then failed) follow
    from it, so the first error with its code's meaning says more than a symptom would. Only the code categories that
    state a cause count (configuration, argument, file, package, resource); a communication or execution error, a
    timeout (EI0002, 107020) or a generic code (EE9999, no name: its reason is in the lines after it) is a symptom."""
    if not any(_STATES_CAUSE.match(c.name) and not c.cause for _, c in _codes.decode(e.text)):
        return False

    def after(s: Evidence) -> bool:
        if s.file == e.file and s.node == e.node:
            return s.line >= e.line
        return e.when is not None and s.when is not None and s.when >= e.when
    return all(f.evidence and after(f.evidence[0]) for f in symptoms)


def _warning_note(f: Finding, failed: bool) -> str:
    e = f.evidence[0]
    what = "the failure is not one it explains" if failed else "nothing failed"
    return f"{e.where()}: only a warning points to {f.cause.id}, and {what}: {e.text}"
