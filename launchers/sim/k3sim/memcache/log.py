"""MemCache's log line formats.

Clients: ``2025-11-27 15:35:48.075697 info 528 [MMC mmc_bm_proxy.cpp:72] init bm success, ...``.
The 1.3.0 MetaService (run here, see contracts/): before its logger starts it writes console
lines ``<time> INFO [<pid>-<tid>][MMC mmc_configuration.cpp:159 LoadFromFile] Loaded 5 config items:``
to stdout; afterwards only ``<time> <tid> <level> [<tag>] <message>`` lines to its log files.
"""
from __future__ import annotations

import datetime
import os
import sys
import threading
from pathlib import Path


def line(level: str, tag: str, message: str) -> str:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    return f"{now} {level} {threading.get_native_id()} [{tag}] {message}"


def console(level: str, tag: str, message: str) -> None:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    print(f"{now} {level.upper()} [{os.getpid()}-{threading.get_native_id()}][{tag}] {message}", flush=True)


class FileLog:
    """The MetaService's spdlog file sink: ``<time> <tid> <level> [<tag>] <message>``, nothing on stdout."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.file = path
        self.lock = threading.Lock()

    def write(self, level: str, tag: str, message: str) -> None:
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        with self.lock, self.file.open("a") as out:
            out.write(f"{now} {threading.get_native_id()} {level} [{tag}] {message}\n")

    def info(self, tag: str, message: str) -> None:
        self.write("info", tag, message)

    def error(self, tag: str, message: str) -> None:
        self.write("error", tag, message)


class Log:
    """Writes each line to stdout and, once ``to_file`` was called, to that file as well."""

    def __init__(self) -> None:
        self.file: Path | None = None
        self.lock = threading.Lock()

    def to_file(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.file = path

    def write(self, level: str, tag: str, message: str) -> None:
        text = line(level, tag, message)
        with self.lock:
            print(text, flush=True)
            if self.file is not None:
                with self.file.open("a") as out:
                    out.write(text + "\n")

    def info(self, tag: str, message: str) -> None:
        self.write("info", tag, message)

    def error(self, tag: str, message: str) -> None:
        self.write("error", tag, message)


def stderr(message: str) -> None:
    """The process's own console messages (std::cerr in the real service)."""
    print(message, file=sys.stderr, flush=True)
