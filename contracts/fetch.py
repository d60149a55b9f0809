"""The real components the contracts compare against, fetched with the ordinary client and cached
outside the repository (``$K3LAB_CACHE``, default ``~/.cache/k3lab``). Nothing here is committed.

* vllm-ascend sdists: ``k3lab.launch.simimage.vllm_ascend`` (the proxy and ``launch_online_dp.py``).
* vLLM 0.33 wheel (336 MB): ``pip download --no-deps vllm==0.33.0``; read with ``zipfile`` only.
* MemCache 1.3.0: ``memcache-hybrid==1.3.0`` and ``memfabric-hybrid==1.3.0`` (x86_64 cp311 wheels)
  installed into their own venv, never into the kit's.
"""
from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

from k3lab.launch.simimage.vllm_ascend import FetchError, _locked, _run, cache_dir, helper_python

VLLM = "0.33.0"
MEMCACHE = "1.3.0"


def vllm_wheel() -> zipfile.ZipFile:
    where = cache_dir() / "wheels" / "vllm"
    with _locked("wheel-vllm"):
        found = sorted(where.glob(f"vllm-{VLLM}-*.whl"))
        if not found:
            print(f"contracts: fetching vllm=={VLLM} (wheel, 336 MB) into {where}", file=sys.stderr)
            _run([str(helper_python()), "-m", "pip", "download", "-q", "--no-deps", f"vllm=={VLLM}", "-d", str(where)],
                 None, f"pip download vllm=={VLLM}", where)
            found = sorted(where.glob(f"vllm-{VLLM}-*.whl"))
    if not found:
        raise FetchError(f"pip download vllm=={VLLM} left no wheel in {where}")
    return zipfile.ZipFile(found[0])


def _python311() -> str:
    """The wheels are cp311: the kit's interpreter when it is 3.11, else a python3.11 on PATH."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if not found:
        raise FetchError("memcache-hybrid 1.3.0 ships cp311 wheels only: install python3.11 (or run the "
                         "contracts from a Python 3.11 environment)")
    return found


def memcache_venv() -> tuple[Path, Path]:
    """(python, site-packages) of a venv with the real MemCache 1.3.0 installed from the registry."""
    venv = cache_dir() / f"memcache-{MEMCACHE}"
    python = venv / "bin" / "python"
    marker = venv / ".k3lab-ready"
    with _locked("memcache"):
        if not marker.exists():
            _run([_python311(), "-m", "venv", "--clear", str(venv)], None, f"creating {venv}")
            _run([str(python), "-m", "pip", "install", "-q", f"memfabric-hybrid=={MEMCACHE}",
                  f"memcache-hybrid=={MEMCACHE}"], None, f"pip install memcache-hybrid=={MEMCACHE}")
            marker.write_text("")
    site = next((venv / "lib").glob("python3.*/site-packages"))
    return python, site
