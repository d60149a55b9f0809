"""Where the logs of a run are, and reading them within bounds.

Two layouts: a run directory the kit wrote (``evidence/<node>/*.log``, ``inspect.json`` per node, the
suite's ``conformance-results.json``, ``gate-failure.json``) and a plain directory of logs collected by
hand, one folder per node (files directly in it belong to no node). Only regular files are read (no
symlinks, FIFOs or devices: a hand-made folder may hold anything), at most ``MAX_FILE_BYTES`` of each (the
tail of a larger file: the end of a log is where a failure is), at most ``MAX_FILES`` files.
"""
from __future__ import annotations

import gzip
import itertools
import json
import os
import stat
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from k3lab.errors import InputError

MAX_FILE_BYTES = 32 << 20  # per file: the tail of a larger log
MAX_FILES = 4000
MAX_DEPTH = 4  # folders below a node's folder
MAX_ENTRIES = 2 * MAX_FILES  # names listed per folder: a folder of a million files is not sorted whole
MAX_SECONDS = 60.0  # reading logs, at most: a slow or hostile filesystem ends in a note, not a hang
# kit evidence that is not a log (its own readers handle the JSON ones)
SKIP_NAMES = {"shell-env.txt", "open-sockets.txt", "plan.json", "run-state.json"}
SKIP_SUFFIXES = {".json", ".prom", ".sh", ".yaml", ".yml", ".html", ".md", ".xml", ".svg", ".lock"}
NO_NODE = "-"


@dataclass
class LogFile:
    node: str
    rel: str  # path relative to the directory diagnosed, as shown to the user
    data: bytes
    size: int
    skipped_bytes: int = 0  # a large file's head that was not read

    @property
    def truncated(self) -> bool:
        return self.skipped_bytes > 0


@dataclass
class Layout:
    root: Path
    kind: str  # "run" or "logs"
    files: list[LogFile] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # in the run's plan order when there is one
    inspect: dict[str, dict] = field(default_factory=dict)  # node -> docker inspect
    notes: list[str] = field(default_factory=list)  # what could not be read, or was read in part
    skipped: list[str] = field(default_factory=list)  # files not read as logs, each with why


def check_dir(path: str | Path) -> Path:
    """The directory to diagnose, or an InputError (exit 2) saying why not."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{p}: no such directory") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: not a directory (give a run directory or a folder of logs, one folder per node)")
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputError(f"{p}: not readable")
    return p


def read_tail(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[bytes, int, int]:
    """(data, size, skipped): the whole file, or its last ``limit`` bytes from the first full line."""
    # O_NOFOLLOW|O_NONBLOCK: a file swapped for a link or a FIFO after the walk is refused, never waited on
    with open(path, "rb", opener=lambda f, flags: os.open(f, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= limit:
            return fh.read(limit), size, 0
        fh.seek(size - limit)
        data = fh.read(limit)
    cut = data.find(b"\n") + 1  # a partial first line would match half a message
    return data[cut:], size, size - limit + cut


def read_gz_tail(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[bytes, int, int]:
    """(data, size, skipped) of a gzip log: its decompressed tail, streamed so memory stays within ``limit``."""
    chunks: deque[bytes] = deque()
    size = kept = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            size += len(chunk)
            chunks.append(chunk)
            kept += len(chunk)
            while kept - len(chunks[0]) >= limit:  # the oldest chunk is not needed for the last ``limit`` bytes
                kept -= len(chunks.popleft())
    tail = b"".join(chunks)[-limit:]
    if size <= limit:
        return tail, size, 0
    cut = tail.find(b"\n") + 1  # a partial first line would match half a message
    return tail[cut:], size, size - limit + cut


_CONTROL = bytes(b for b in range(32) if b not in (0, 9, 10, 12, 13, 27))  # NUL: copytruncate pads logs with it


def _binary(data: bytes) -> bool:
    """Mostly control bytes: a core dump, an archive or an image, not a text log."""
    sample = data[:4096]
    return len(sample.translate(None, _CONTROL)) < 0.9 * len(sample)


def _regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _walk(base: Path, depth: int = 0):
    """Regular files under ``base`` in a stable order, to MAX_DEPTH folders down, symlinks not followed."""
    try:
        with os.scandir(base) as it:
            entries = sorted(itertools.islice(it, MAX_ENTRIES), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if _regular(e):
            yield Path(e.path)
        elif depth < MAX_DEPTH and e.is_dir(follow_symlinks=False):
            yield from _walk(Path(e.path), depth + 1)


def _wanted(path: Path) -> bool:
    return path.name not in SKIP_NAMES and path.suffix.lower() not in SKIP_SUFFIXES


def _plan_nodes(root: Path) -> list[str]:
    from k3lab.errors import InputError
    from k3lab.model import runs

    try:
        return runs.plan_nodes(root)
    except InputError:  # no plan, or unreadable: the nodes come from the folders' names
        return []


def _inspect(path: Path, notes: list[str], rel: str) -> dict | None:
    try:
        doc = json.loads(read_tail(path, 4 << 20)[0])
    except (OSError, ValueError) as exc:
        notes.append(f"{rel}: unreadable ({exc})")
        return None
    return doc if isinstance(doc, dict) else None


def _node_dirs(root: Path) -> tuple[str, Path, list[tuple[str, Path]]]:
    """The layout's kind, the folder whose subfolders are nodes, and those (name, folder) pairs. An
    ``evidence`` that is a symlink is never followed (it would quote files outside the run directory)."""
    evidence = root / "evidence"
    linked = evidence.is_symlink()
    is_run = (evidence.is_dir() and not linked) or (root / "run-state.json").is_file()
    base = evidence if is_run else root
    if linked:
        return "run" if is_run else "logs", base, []
    try:
        dirs = sorted((e.name, Path(e.path)) for e in itertools.islice(os.scandir(base), MAX_ENTRIES)
                      if e.is_dir(follow_symlinks=False))
    except OSError:
        dirs = []
    return ("run" if is_run else "logs"), base, dirs


def _groups(root: Path) -> tuple[Layout, list[tuple[str, list[Path]]]]:
    """The layout (kind, nodes) and every candidate file, grouped by node."""
    kind, base, dirs = _node_dirs(root)
    order = _plan_nodes(root) if kind == "run" else []
    found = dict(dirs)
    names = [n for n in order if n in found] if order else [n for n, _ in dirs]
    # a run's folders that are no node of its plan (evidence/bench) hold logs of no one node
    folders = [(n, found[n]) for n in names] + [(NO_NODE, d) for n, d in dirs if order and n not in order]
    # files straight in the base folder: the run's bench logs, or a hand collection without node folders
    top = list(_walk(base, MAX_DEPTH)) if base.is_dir() and not base.is_symlink() else []
    layout = Layout(root, kind, nodes=names)
    if (root / "evidence").is_symlink():
        layout.skipped.append(f"evidence (a symlink to {os.readlink(root / 'evidence')}: not followed)")
    return layout, [(NO_NODE, top)] + [(n, list(_walk(d))) for n, d in folders]


def collect(root: Path, max_bytes: int = MAX_FILE_BYTES, max_files: int = MAX_FILES) -> Layout:
    """Every log file of the directory, per node, read within the bounds."""
    layout, groups = _groups(root)
    deadline = time.monotonic() + MAX_SECONDS
    for node, paths in groups:
        for path in paths:
            rel = path.relative_to(root).as_posix()
            if path.name == "inspect.json" and node != NO_NODE:
                if (doc := _inspect(path, layout.notes, rel)) is not None:
                    layout.inspect[node] = doc
            elif not _wanted(path):
                if layout.kind == "logs":  # in a run directory they are the kit's own files, no news to anyone
                    layout.skipped.append(f"{rel} (not a log: {path.suffix.lower() or path.name})")
                continue
            elif len(layout.files) >= max_files or time.monotonic() > deadline:
                layout.notes.append(f"more than {max_files} files or {MAX_SECONDS:.0f}s: the rest were not read")
                return layout
            else:
                _add(layout, node, path, rel, max_bytes)
    return layout


def _add(layout: Layout, node: str, path: Path, rel: str, max_bytes: int) -> None:
    reader = read_gz_tail if path.suffix.lower() == ".gz" else read_tail
    try:
        data, size, skipped = reader(path, max_bytes)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        layout.skipped.append(f"{rel} (unreadable: {why})")
        return
    if _binary(data):
        layout.skipped.append(f"{rel} (not a log: binary)")
        return
    if skipped:
        layout.notes.append(f"{rel}: {size / 2**20:.0f} MiB, read its last {max_bytes / 2**20:.0f} MiB")
    layout.files.append(LogFile(node, rel, data, size, skipped))
