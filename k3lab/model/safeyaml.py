"""Loading untrusted YAML (inventories, gate policies): bounded, strict, with line numbers.

* a size cap, read before parsing: ``-i /dev/zero`` fails at once instead of filling memory;
* a nesting cap and a node-count cap, checked on the event stream before anything is built, so
  100k nested brackets never reach a recursive constructor;
* the C loader (``yaml.CSafeLoader``) when PyYAML was built with libyaml, else the pure-Python one;
* duplicate mapping keys are errors naming both lines (YAML would silently keep the last);
* numbers must be plain decimals: YAML 1.1 reads ``010000`` as octal 4096, ``0x1F`` as hex and
  ``1:30`` as sexagesimal 90, none of which a port or a rank should ever be;
* every mapping key and sequence item remembers its line, so validation errors can name it.
"""
from __future__ import annotations

import functools
import json
import os
import re
import selectors
import stat
import sys
import time
from pathlib import Path

import yaml

from k3lab.errors import InputError
from k3lab.paths import STDIN, STDIN_NAME, source_name

MAX_BYTES = 1 << 20  # 1 MiB: the largest real inventory (16 nodes, comments) is about 4 KiB
MAX_DEPTH = 32
MAX_EVENTS = 200_000

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9]*)")


class Lines:
    """Line numbers (1-based) of mapping keys and sequence items, keyed by the container's id."""

    def __init__(self) -> None:
        self.keys: dict[int, dict[object, int]] = {}
        self.items: dict[int, list[int]] = {}
        self._keep: list[object] = []  # keep containers alive so their ids stay unique

    def line(self, data: object, loc: tuple) -> int | None:
        """The line of the deepest element of ``loc`` (a pydantic error location) that is known."""
        found = None
        cur = data
        for part in loc:
            if isinstance(cur, dict) and part in cur:
                found = self.keys.get(id(cur), {}).get(part, found)
                cur = cur[part]
            elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
                items = self.items.get(id(cur), [])
                found = items[part] if part < len(items) else found
                cur = cur[part]
            else:
                break
        return found


def _loader(lines: Lines, source: str):
    class Loader(_Base):  # type: ignore[misc, valid-type]
        pass

    def construct_mapping(loader, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, f"expected a mapping, got {node.id}", node.start_mark)
        loader.flatten_mapping(node)
        out: dict = {}
        where: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise InputError(f"{source}:{key_node.start_mark.line + 1}: a mapping key must be a plain value") from None
            line = key_node.start_mark.line + 1
            if key in out:
                raise InputError(f"{source}:{line}: duplicate key {key!r} (first at line {where[key]}); "
                                 f"YAML would silently keep only the last one")
            out[key] = loader.construct_object(value_node, deep=True)
            where[key] = line
        lines.keys[id(out)] = where
        lines._keep.append(out)
        return out

    def construct_sequence(loader, node, deep=False):
        out = [loader.construct_object(child, deep=True) for child in node.value]
        lines.items[id(out)] = [child.start_mark.line + 1 for child in node.value]
        lines._keep.append(out)
        return out

    def construct_int(loader, node):
        text = loader.construct_scalar(node)
        if not _DECIMAL.fullmatch(text):
            raise InputError(f"{source}:{node.start_mark.line + 1}: {text!r} is not a plain decimal number "
                             f"(YAML reads leading zeros as octal, 0x as hex and a:b as base 60); "
                             f"write it in decimal, or quote it if it is text")
        return int(text)

    Loader.add_constructor("tag:yaml.org,2002:map", construct_mapping)
    Loader.add_constructor("tag:yaml.org,2002:omap", construct_mapping)
    Loader.add_constructor("tag:yaml.org,2002:seq", construct_sequence)
    Loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return Loader


STDIN_DEADLINE_S = 30.0  # an inventory is a small file: a pipe still open after this is a writer that never ends


@functools.cache
def _stdin_bytes(max_bytes: int, deadline_s: float = STDIN_DEADLINE_S) -> bytes:
    # read once per process: a command may load its inventory more than once (preflight, render).
    # Every wait has a deadline: a pipe whose writer never closes it (`tail -f lab.yaml | k3lab ...`)
    # is refused after deadline_s instead of hanging; never past the cap, as a file.
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream ends by itself
        return sys.stdin.buffer.read(max_bytes + 1)
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while size <= max_bytes:
            left = end - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise InputError(f"{STDIN_NAME}: standard input did not end within {deadline_s:g} s; "
                                 f"pipe a whole file in, as in: -i - < lab.yaml")
            chunk = os.read(fd, min(65536, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def read_stdin(what: str, max_bytes: int = MAX_BYTES) -> str:
    """Standard input's text under the file reader's cap; a terminal or an empty input is refused
    (a terminal would wait for typing nobody means to do)."""
    usage = f"pipe the {what} in, as in: -i - < lab.yaml"
    if sys.stdin is None or sys.stdin.isatty():
        raise InputError(f"{STDIN_NAME}: standard input is a terminal; {usage}")
    raw = _stdin_bytes(max_bytes)
    if not raw.strip():
        raise InputError(f"{STDIN_NAME}: standard input is empty; {usage}")
    return decode(raw, STDIN_NAME, what, max_bytes)


def read_capped(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of a small input file: never a FIFO or socket (it would block), never past
    ``max_bytes`` (a sparse file is refused by its size, /dev/zero by the capped read); every
    problem is an InputError naming the file and the reason. ``-`` is standard input, under the same cap."""
    text_path = str(path)
    if text_path.strip() == "":
        raise InputError(f"{what}: empty path; give the {what} file")
    if text_path == STDIN:
        return read_stdin(what, max_bytes)
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on what was opened
        fh = open(p, "rb", opener=lambda f, flags: os.open(f, flags | os.O_NONBLOCK | os.O_NOCTTY))  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise InputError(f"{p}: no such {what} file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory; give the {what} file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read the {what} file ({exc.strerror})") from None
    with fh:
        _check_type(os.fstat(fh.fileno()), p, what, max_bytes)
        try:
            raw = fh.read(max_bytes + 1)  # the file may grow after the stat: never past the cap
        except OSError as exc:
            raise InputError(f"{p}: cannot read the {what} file ({exc.strerror})") from None
    return decode(raw, str(p), what, max_bytes)


def decode(raw: str | bytes, source: str, what: str, max_bytes: int = MAX_BYTES) -> str:
    """Input bytes (a file's, or text handed over in memory) as UTF-8 text within ``max_bytes``;
    an InputError naming ``source`` otherwise."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise InputError(f"{source}: {what} file is larger than the limit of {max_bytes} bytes (the {what} byte limit)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: {what} file is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _check_type(st: os.stat_result, p: Path, what: str, max_bytes: int) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a directory; give the {what} file")
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):  # would wait for a writer that may never come
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
        # '-' reads standard input, which the caller's shell connects: nothing to wait for here
        other = ", or pipe it to standard input (-i - < lab.yaml)" if what == "inventory" else ""
        raise InputError(f"{p}: {what} file is {kind}; give a regular file{other}")
    # a character device (/dev/zero) has no size: the capped read refuses one that never ends
    if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:  # a sparse file's size, before a byte is read
        raise InputError(f"{p}: {what} file is {st.st_size} bytes; the limit is {max_bytes} bytes")


def json_depth(doc: object) -> int:
    """Nesting depth of a parsed JSON document, without recursion."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def read_json(path: str | Path, what: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> object:
    """A bounded JSON file: :func:`read_capped`, no NaN/Infinity constants, at most ``max_depth`` deep.
    A file that is not JSON raises ValueError (callers decide whether a half-written file is an error);
    every other problem is an InputError naming the file and the reason."""
    p = Path(path)
    text = read_capped(p, what, max_bytes)
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InputError(f"{p}: {what} file is nested too deeply") from None
    if json_depth(doc) > max_depth:
        raise InputError(f"{p}: {what} file is nested more than {max_depth} levels deep")
    return doc


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a measurement can have")


def _line(event: yaml.Event) -> int:
    """1-based line of a parser event (the parser always sets start_mark)."""
    return event.start_mark.line + 1 if event.start_mark is not None else 0


def _check_shape(text: str, source: str, max_depth: int, max_events: int) -> None:
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_Base), 1):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > max_depth:
                raise InputError(f"{source}:{_line(event)}: nested more than {max_depth} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            # aliases can multiply a small file into a huge structure ("billion laughs"): inputs never need them
            raise InputError(f"{source}:{_line(event)}: YAML aliases (*name) are not accepted")
        if count > max_events:
            raise InputError(f"{source}: more than {max_events} YAML elements")


def loads(text: str, source: str, max_depth: int = MAX_DEPTH, max_events: int = MAX_EVENTS) -> tuple[object, Lines]:
    """Parse YAML text from ``source`` (a file name for messages) into plain data and its line map."""
    lines = Lines()
    try:
        _check_shape(text, source, max_depth, max_events)
        return yaml.load(text, Loader=_loader(lines, source)), lines  # noqa: S506 - a SafeLoader subclass
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise InputError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None


def load(path: str | Path, what: str = "inventory", max_bytes: int = MAX_BYTES,
         max_depth: int = MAX_DEPTH) -> tuple[object, Lines]:
    """Read and parse one untrusted YAML file with every cap; errors are InputError (exit code 2)."""
    return loads(read_capped(path, what, max_bytes), source_name(path), max_depth)
