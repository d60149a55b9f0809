"""One error model for every k3lab command, and the exit codes it maps to.

=====  =========================================================================
code   meaning
=====  =========================================================================
0      ok
1      checks failed (preflight errors, a readiness gate, conformance failures)
2      usage or input error (bad option, unknown scenario, invalid inventory)
3      environment error (Docker engine, SSH, a run still up)
4      internal error: a one-line message; the traceback goes to a log file
130    interrupted (Ctrl-C / SIGTERM), after teardown
141    the reader closed the output pipe (``k3lab list | head``): no message, as with SIGPIPE
=====  =========================================================================

Raise a subclass of :class:`K3labError` with a message that names the file, field or node and
says what to do; ``cli.main`` prints it on one line (plus detail lines) and exits with its code.
This module imports nothing heavy: the CLI loads it before anything else.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

OK = 0
CHECKS_FAILED = 1
USAGE = 2
ENVIRONMENT = 3
INTERNAL = 4
INTERRUPTED = 130
PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a tool that SIGPIPE ended

EXIT_CODES_HELP = """exit codes:
  0  ok
  1  checks failed (preflight errors, a readiness gate, conformance failures)
  2  usage or input error (bad option, unknown scenario, invalid inventory)
  3  environment error (Docker engine, SSH, a run still up)
  4  internal error (one-line message; traceback in a log file under $K3LAB_LOG_DIR
     or ~/.cache/k3lab/logs)
  130 interrupted (teardown still ran)
  141 the reader closed the output pipe (k3lab list | head)"""


class K3labError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = INTERNAL


class UsageError(K3labError):
    """The command line is wrong: unknown scenario or option, missing argument."""

    exit_code = USAGE


class InputError(K3labError):
    """An input file or value is wrong: inventory, policy, output directory."""

    exit_code = USAGE


class EnvError(K3labError):
    """The environment is not usable: Docker engine, SSH, a run still up.

    (Not named ``EnvironmentError``: that is a builtin alias of ``OSError``.)
    """

    exit_code = ENVIRONMENT


class CommandFailed(EnvError):
    """A command the kit runs on a node failed (the node's environment, not the kit)."""


class ChecksFailed(K3labError):
    """Checks ran and some failed: preflight errors, a readiness gate."""

    exit_code = CHECKS_FAILED


class InternalError(K3labError):
    exit_code = INTERNAL


class RunInterrupted(K3labError):
    """Ctrl-C or SIGTERM during a bring-up, raised after its teardown ran (the library never exits itself)."""

    exit_code = INTERRUPTED


# Exceptions of the live half's libraries, recognised by module so that the CLI never imports them.
_ENV_MODULES = ("docker", "paramiko", "requests", "urllib3", "httpx", "socket")


# The characters no text from outside the kit may carry raw to a terminal or a report: C0 but tab and
# newline (ESC starts every ANSI/VT sequence), DEL, C1 (0x9b is a CSI on many terminals), bidi controls,
# lone surrogates (a file name or line that is not UTF-8) and XML's two non-characters
_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                  "\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """``text`` safe for a terminal and for XML 1.0, the one escaping function of everything the kit shows
    from outside itself (evidence, results, versions, log lines, file names, policy and acceptance reasons):
    every control, bidi or lone surrogate character shown as ``\\xNN`` / ``\\uNNNN``, so an escape sequence
    reads ``\\x1b[31m`` (what it is, not what it does); tab and newline stay."""
    return _RAW.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def is_environment_error(exc: BaseException) -> bool:
    mod = type(exc).__module__ or ""
    if mod.split(".")[0] in _ENV_MODULES:
        return True
    return isinstance(exc, (ConnectionError, TimeoutError))


def log_dir() -> Path:
    from k3lab import settings

    try:
        return settings.current().log_dir
    except settings.SettingError:  # a crash log must still land when another variable is bad
        return settings.BY_ENV["K3LAB_LOG_DIR"].default()


def write_crash_log(exc: BaseException, argv: list[str]) -> Path | None:
    """The traceback of an internal error, for a bug report; never shown on the terminal."""
    import datetime  # only on the error path: the CLI's start-up stays small
    import sys
    import tempfile
    import traceback

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = (f"k3lab {' '.join(argv)}\n{stamp}\npython {sys.version.split()[0]}\n\n"
            + "".join(traceback.format_exception(exc)))
    for base in (log_dir(), Path(tempfile.gettempdir())):
        try:
            base.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"k3lab-crash-{stamp}-", suffix=".log", dir=base)
            with os.fdopen(fd, "w", errors="backslashreplace") as fh:  # argv may hold undecodable bytes
                fh.write(text)
            return Path(name)
        except OSError:
            continue
    return None
