"""Teardown by construction: every resource a run creates registers its removal when it is created.

A :class:`RunScope` is the run's ``ExitStack``. The target registers an undo at the moment it creates
something (the run network, the first container on an endpoint, a helper container on a host), before
the call that creates it, so a call that half-succeeds is undone too. Closing the scope runs every undo
once, newest first, whatever ended the run: success, an exception, a failed gate or suite, Ctrl-C or
SIGTERM. ``keep()`` (``--keep``) is the one way out. A second signal while the undos run is refused
(teardown that is cut short leaks a lab's NPUs), a third one gives up.

The undos answer with the nodes they could not reach (node -> endpoint), so the caller can record
them and exit 3: "one broken host never blocks or leaks" means it is named, not silently left.
"""
from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

Undo = Callable[[], "dict[str, str] | None"]


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised as a kind of Ctrl-C: every ``except KeyboardInterrupt`` (exit 130, teardown) holds
    for a ``kill`` too."""


@dataclass
class _Entry:
    what: str
    undo: Undo
    key: str | None = None


@dataclass
class RunScope:
    """The undos of one run, run newest first on close. ``log`` says what happens (stderr)."""

    run_id: str = ""
    log: Callable[[str], None] = field(default=lambda msg: print(f"k3lab: {msg}", file=sys.stderr, flush=True))
    _entries: list[_Entry] = field(default_factory=list)
    _keys: set[str] = field(default_factory=set)
    kept: bool = False
    closed: bool = False
    left: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _guard: Any = None

    # ------------------------------------------------------------------ registering
    def on_close(self, what: str, undo: Undo, key: str | None = None) -> None:
        """Register ``undo`` (it removes ``what``). With a ``key``, only the first registration counts:
        one sweep per endpoint, however many containers are created there. Thread-safe (nodes are
        created in parallel)."""
        with self._lock:
            if key is not None:
                if key in self._keys:
                    return
                self._keys.add(key)
            self._entries.append(_Entry(what, undo, key))

    def registered(self) -> list[str]:
        return [e.what for e in self._entries]

    def keep(self) -> None:
        """``--keep``: leave everything as it is (``k3lab down RUN`` removes it later)."""
        self.kept = True

    # ------------------------------------------------------------------ closing
    def close(self) -> dict[str, str]:
        """Run every undo once, newest first; an undo that raises is logged and the rest still run.
        The nodes left behind, by every undo together (node -> endpoint)."""
        if self.closed or self.kept:
            return self.left
        self.closed = True
        with _deferred_signals(self.log):
            while self._entries:
                entry = self._entries.pop()
                try:
                    self.left.update(entry.undo() or {})
                except Exception as exc:  # noqa: BLE001 - one failed undo must not keep the others from running
                    self.errors.append(f"{entry.what}: {exc!r}")
                    self.log(f"run {self.run_id}: could not remove {entry.what}: {exc!r}")
        return self.left

    # ------------------------------------------------------------------ as a context
    def signals(self) -> _sigterm_raises:
        """While inside: SIGTERM raises :class:`Interrupted` (as Ctrl-C raises KeyboardInterrupt), so the
        code that closes the scope runs on a ``kill`` too."""
        return _sigterm_raises()

    def __enter__(self) -> RunScope:
        self._guard = self.signals()
        self._guard.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        finally:
            self._guard.__exit__()


class _sigterm_raises:
    def __init__(self) -> None:
        self.previous: Any = None

    def __enter__(self) -> _sigterm_raises:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, _raise_interrupted)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


class _deferred_signals:
    """While the undos run, Ctrl-C and SIGTERM are answered with a line instead of ending teardown;
    the third one in a row ends the process as it asks (the user insists)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.count = 0
        self.previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count >= 3:
            raise KeyboardInterrupt
        self.log("teardown in progress: it removes what the run created; interrupt twice more to abandon it")

    def __enter__(self) -> _deferred_signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
