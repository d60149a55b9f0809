"""vLLM-shaped log lines: ``(APIServer pid=N) INFO 08-27 15:11:51 [file.py:123] message``.

vLLM prints its own logger to stdout and uvicorn's lines plus tracebacks to stderr; each child
process prefixes its lines with ``(<Name> pid=N)``. Conformance checks grep these lines, so the
shapes follow the real ones exactly; the file:line tags are the real modules' names.
"""
from __future__ import annotations

import os
import sys
import threading
import time

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
_lock = threading.Lock()


def _threshold() -> int:
    return _LEVELS.get(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper(), 20)


def _write(stream, text: str) -> None:
    with _lock:
        try:
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


class Logger:
    """One process role (``APIServer``, ``EngineCore_DP0`` ...); ``prefix=None`` prints bare lines."""

    def __init__(self, prefix: str | None) -> None:
        self.prefix = prefix

    def _tag(self) -> str:
        return f"({self.prefix} pid={os.getpid()}) " if self.prefix else ""

    def log(self, level: str, where: str, msg: str, *args: object) -> None:
        if _LEVELS[level] < _threshold():
            return
        text = msg % args if args else msg
        stamp = time.strftime("%m-%d %H:%M:%S")
        lines = text.split("\n")
        out = f"{self._tag()}{level} {stamp} [{where}] {lines[0]}\n"
        out += "".join(f"{self._tag()}{line}\n" for line in lines[1:])
        _write(sys.stdout, out)

    def debug(self, where: str, msg: str, *args: object) -> None:
        self.log("DEBUG", where, msg, *args)

    def info(self, where: str, msg: str, *args: object) -> None:
        self.log("INFO", where, msg, *args)

    def warning(self, where: str, msg: str, *args: object) -> None:
        self.log("WARNING", where, msg, *args)

    def error(self, where: str, msg: str, *args: object) -> None:
        self.log("ERROR", where, msg, *args)

    def uvicorn(self, msg: str, stream=None) -> None:
        """uvicorn's own format (``INFO:     ...``), on stderr like its default log config."""
        _write(stream or sys.stderr, f"{self._tag()}INFO:     {msg}\n")

    def traceback(self, exc_type: str, message: str, frames: list[tuple[str, int, str, str]]) -> None:
        """A Python-traceback-shaped block ending in ``ExcType: message`` (stderr)."""
        out = [f"{self._tag()}Traceback (most recent call last):"]
        for path, line, func, code in frames:
            out.append(f'{self._tag()}  File "{path}", line {line}, in {func}')
            out.append(f"{self._tag()}    {code}")
        out.extend(f"{self._tag()}{ln}" for ln in f"{exc_type}: {message}".split("\n"))
        _write(sys.stderr, "\n".join(out) + "\n")


bare = Logger(None)
api = Logger("APIServer")


def engine_logger(dp_rank: int) -> Logger:
    return Logger(f"EngineCore_DP{dp_rank}")


def fatal_exit(log: Logger, lines: list[str], code: int = 1) -> None:
    """EngineCore's last words, then the process ends at once (as a dead engine takes its server down)."""
    for line in lines:
        log.error("core.py:719", "%s", line)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
