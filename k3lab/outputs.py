"""The one guard for files and directories a command is told to write (``--out``, ``--json``).

Every command that writes where the operator points checks the target here first and writes it the
same way: never under a kernel pseudo-filesystem, never through a symlink, never over an existing
file or a non-empty directory without ``--force``, and atomically (a temporary file beside the target,
then a rename), so an interrupted write leaves the old file or nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

from k3lab.errors import InputError

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


def check_file(out: str | Path, force: bool = False, flag: str = "--out", what: str = "file") -> Path:
    """A file to write: absent (an existing file or symlink only with ``force``), in an existing directory."""
    path = _target(out, what, flag)
    if path.is_dir() and not path.is_symlink():
        raise InputError(f"{flag} {out}: is a directory; give a file name")
    if (path.exists() or path.is_symlink()) and not force:
        raise InputError(f"{flag} {out}: exists; choose another name or add --force to overwrite it")
    if not path.parent.is_dir():
        raise InputError(f"{flag} {out}: directory {path.parent} does not exist")
    return path


def write_file(path: Path, text: str, mode: int = 0o644, flag: str = "--out") -> Path:
    """Write ``text`` atomically: a fresh temporary file beside ``path`` (O_EXCL, O_NOFOLLOW), then a rename
    that replaces a symlink itself, never its target."""
    tmp = path.parent / f".{path.name}.k3lab-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    return path
