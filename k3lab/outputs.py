"""The one guard for files and directories a command is told to write (``--out``, ``--json``).

Every command that writes where the operator points checks the target here first and writes it the
same way: never under a kernel pseudo-filesystem, never through a symlink, never over an existing
file or a non-empty directory without ``--force``, and atomically (a temporary file beside the target,
then a rename), so an interrupted write or a full disk (exit 3, naming the file) leaves the old file
or nothing. A whole tree (a render, a release) is built in a fresh directory beside its target and swapped
in at the end. Files the kit writes into a run directory while it runs go through :func:`write_run_file`:
atomic too, and never through a symlink placed in the run directory.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from k3lab.errors import EnvError, InputError, K3labError

# Output must never land in kernel pseudo-filesystems, whatever symlinks or bind mounts say.
FORBIDDEN = (Path("/proc"), Path("/sys"), Path("/dev"))


def _target(out: str | Path, what: str, flag: str) -> Path:
    if str(out).strip() == "":
        raise InputError(f"{flag}: empty path; give the {what} to write")
    path = Path(out)
    real = path.resolve()
    for bad in FORBIDDEN:
        if real == bad or bad in real.parents:
            raise InputError(f"{flag} {out}: refusing to write under {bad}")
    return path


def _writable_ancestor(path: Path, out: str | Path, flag: str) -> None:
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {out}: {ancestor} is not a writable directory")


def check_dir(out: str | Path, force: bool = False, flag: str = "--out") -> Path:
    """A directory to write into: absent, or empty (any directory with ``force``), never a symlink."""
    path = _target(out, "directory", flag)
    if path.is_symlink():
        raise InputError(f"{flag} {out}: is a symlink (to {os.readlink(path)}); give a real directory")
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{flag} {out}: exists and is not a directory")
        try:
            non_empty = any(path.iterdir())
        except OSError as exc:
            raise InputError(f"{flag} {out}: cannot read the directory ({exc.strerror})") from None
        if non_empty and not force:
            raise InputError(f"{flag} {out}: directory is not empty; choose a new directory or add --force to "
                             f"replace its contents")
    _writable_ancestor(path, out, flag)
    return path


def check_file(out: str | Path, force: bool = False, flag: str = "--out", what: str = "file",
               make_parent: bool = False) -> Path:
    """A file to write: absent (an existing file or symlink only with ``force``), in an existing directory
    (created first with ``make_parent``: a default such as build/bench.json)."""
    path = _target(out, what, flag)
    if make_parent and not path.parent.exists() and not path.parent.is_symlink():
        try:
            path.parent.mkdir(parents=True)
        except OSError as exc:
            raise failed(path.parent, exc, flag) from None
    if path.is_dir() and not path.is_symlink():
        raise InputError(f"{flag} {out}: is a directory; give a file name")
    if (path.exists() or path.is_symlink()) and not force:
        raise InputError(f"{flag} {out}: exists; choose another name or add --force to overwrite it")
    if not path.parent.is_dir():
        raise InputError(f"{flag} {out}: directory {path.parent} does not exist")
    return path


# disk full or over quota: the environment's problem, not the operator's input (exit 3, not 2)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def failed(path: Path, exc: OSError, flag: str = "--out") -> K3labError:
    """The one error for a write that failed: disk full is an EnvError (exit 3), anything else an InputError."""
    why = exc.strerror or str(exc)
    if exc.errno in _FULL:
        return EnvError(f"{flag} {path}: cannot write ({why}); the previous contents are unchanged; "
                        f"free some space and run again")
    return InputError(f"{flag} {path}: cannot write ({why})")


def _encode(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8", "surrogateescape")  # undecodable bytes of argv or a log, as they were
    except UnicodeEncodeError:  # a lone surrogate of no byte: shown, never a crash
        return text.encode("utf-8", "backslashreplace")


def write_file(path: Path, text: str | bytes, mode: int = 0o644, flag: str = "--out") -> Path:
    """Write ``text`` atomically: a fresh temporary file beside ``path`` (O_EXCL, O_NOFOLLOW), then a rename
    that replaces a symlink itself, never its target. Any failure (disk full included) removes the
    temporary file and leaves the old ``path`` as it was."""
    data = _encode(text)
    tmp = path.parent / f".{path.name}.k3lab-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if path.is_dir() and not path.is_symlink():  # os.replace would say "Is a directory" only on some systems
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise failed(path, exc, flag) from None
    return path


def write_run_file(path: str | Path, text: str | bytes, root: str | Path | None = None) -> Path:
    """A file the kit writes into a run directory while it runs: atomic, never through a symlink placed there
    (file or parent folder); a failure names the file (disk full: exit 3)."""
    path = Path(path)
    real_dirs(path.parent, root)
    return write_file(path, text, flag="run file")


def real_dirs(path: str | Path, root: str | Path | None = None) -> Path:
    """``path`` and the folders up to it, created when missing; ``path`` and every folder between ``root``
    (the run directory) and it must be real folders, not symlinks (a link placed in a run directory must
    not carry the kit's files out of it)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise failed(path, exc, "run directory") from None
    below = path.relative_to(root).parts if root is not None else ()
    folders = [Path(root or path).joinpath(*below[:i]) for i in range(1, len(below) + 1)] or [path]
    for folder in folders:
        if folder.is_symlink() or not folder.is_dir():
            raise InputError(f"run directory {folder}: is a symlink or not a directory; the kit writes only into "
                             f"real folders")
    return path


def swap_in(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out``; a previous tree (--force) is moved aside, then deleted. A failure puts the
    previous tree back and leaves no ``.NAME.k3lab-old-*`` directory behind."""
    parent = out.absolute().parent
    old = None
    if out.is_dir() and not out.is_symlink():
        try:
            os.rmdir(out)  # empty: the rename below replaces it
        except OSError:  # not empty (force): move it aside, swap in the new tree, then delete it
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.k3lab-old-", dir=parent))
            try:
                os.rename(out, old / "out")
            except OSError:
                os.rmdir(old)
                raise
    try:
        os.rename(tmp, out)
    except OSError:
        if old is not None:
            os.rename(old / "out", out)
            os.rmdir(old)
        raise
    if old is not None:
        shutil.rmtree(old)  # rmtree removes symlinks, it never follows them


@contextlib.contextmanager
def staged_dir(out: Path, flag: str = "--out", keep_on_error: bool = False) -> Iterator[Path]:
    """A fresh directory beside ``out`` (checked with :func:`check_dir` first) to write a whole tree into;
    it replaces ``out`` when the block ends without error, else it is deleted (kept with ``keep_on_error``:
    hours of a live release's evidence) and ``out`` is left as it was (a forced release keeps the previous
    one until the new one is complete)."""
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.k3lab-", dir=parent))
    except OSError as exc:
        raise failed(parent, exc, flag) from None
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is for the building, not for the result
        swap_in(tmp, out)
    except OSError as exc:
        if not keep_on_error:
            shutil.rmtree(tmp, ignore_errors=True)
        raise failed(out, exc, flag) from None
    except BaseException:
        if not keep_on_error:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
