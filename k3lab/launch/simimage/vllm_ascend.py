"""The real vllm-ascend example programs the simulator runs, fetched once from the package registry.

The registry carries vllm-ascend as sdists only. The simulator takes two files from them and
runs them unchanged: the load-balance proxy
(``examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py``) and
``examples/external_online_dp/launch_online_dp.py``. Nothing from the sdist is committed; it is
downloaded with the ordinary client into the cache (``$K3LAB_CACHE``, default ``~/.cache/k3lab``):

    SOC_VERSION=ascend910_9391 pip download --no-deps --no-build-isolation vllm-ascend==V -d DIR

run from a helper venv that has setuptools, setuptools_scm and wheel. Without ``SOC_VERSION``
the sdist's metadata step calls ``npu-smi``; without ``--no-build-isolation`` pip builds CMake.
"""
from __future__ import annotations

import fcntl
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from k3lab import settings
from k3lab.errors import EnvError
from k3lab.model.deviations import SIM_VLLM_ASCEND_K3, SIM_VLLM_ASCEND_K31, sim_vllm_ascend

# the releases (which one per guide is a deviation of the sim target, listed with the others)
K3, K31, version_for = SIM_VLLM_ASCEND_K3, SIM_VLLM_ASCEND_K31, sim_vllm_ascend
PROXY = "examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
LAUNCHER = "examples/external_online_dp/launch_online_dp.py"
FILES = (PROXY, LAUNCHER)

# The K3 guide is validated on vLLM-Ascend 0.23.0 (0.23.0.post1 is its fix release). The K3.1 Pro
# guide's 0.30.0 is not on the registry: the newest release there stands in (plan deviation).
SOC_VERSION = "ascend910_9391"  # any valid SoC: it only keeps the metadata step away from npu-smi
HELPER_PACKAGES = ("setuptools", "setuptools_scm", "wheel")
DOWNLOAD_TIMEOUT_S = 900


class FetchError(EnvError, RuntimeError):
    """A download from the package registry failed; the message says what to do (exit code 3)."""


def cache_dir() -> Path:
    return settings.current().cache


@contextmanager
def _locked(name: str):
    """One download at a time per cache (parallel test workers and runs share it)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], env: dict[str, str] | None, what: str, where: Path | None = None) -> None:
    import subprocess  # here: render and preflight import this module for version_for() only

    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(f"{what}: no answer within {DOWNLOAD_TIMEOUT_S}s; check access to the package index "
                         "(pip config list) and retry") from None
    except OSError as exc:
        raise FetchError(f"{what}: {exc}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = "\n".join([line for line in lines if line.startswith("ERROR")] or lines[-6:])
        raise FetchError(f"{what} failed (exit {done.returncode}):\n{tail}\n"
                         "remedy: check access to the package index (pip config list, proxy variables) and "
                         f"retry, or download the file elsewhere and put it into {where or cache_dir()}")


def helper_python() -> Path:
    """A venv in the cache with the sdist's metadata requirements (never the kit's own environment)."""
    venv = cache_dir() / "helper-venv"
    python = venv / "bin" / "python"
    marker = venv / ".k3lab-ready"
    if marker.exists():
        return python
    with _locked("helper-venv"):
        if not marker.exists():
            _run([sys.executable, "-m", "venv", "--clear", str(venv)], None, f"creating {venv}")
            _run([str(python), "-m", "pip", "install", "-q", *HELPER_PACKAGES], None,
                 f"pip install {' '.join(HELPER_PACKAGES)} into {venv}")
            marker.write_text("")
    return python


def sdist(version: str) -> Path:
    """The cached ``vllm_ascend-<version>.tar.gz``, downloaded on first use."""
    where = cache_dir() / "sdist" / version
    found = sorted(where.glob("vllm_ascend-*.tar.gz"))
    if found:
        return found[0]
    with _locked("sdist"):
        found = sorted(where.glob("vllm_ascend-*.tar.gz"))
        if found:
            return found[0]
        python = helper_python()
        env = {**os.environ, "SOC_VERSION": SOC_VERSION, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        print(f"k3lab: fetching vllm-ascend=={version} (sdist) from the package index into {where}", file=sys.stderr)
        _run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-build-isolation",
              f"vllm-ascend=={version}", "-d", str(where)], env, f"pip download vllm-ascend=={version}", where)
        found = sorted(where.glob("vllm_ascend-*.tar.gz"))
        if not found:
            raise FetchError(f"pip download vllm-ascend=={version} left no sdist in {where}")
        return found[0]


def examples(version: str) -> dict[str, bytes]:
    """The example files the simulator runs, keyed by their path in the vllm-ascend tree.

    Extraction runs under the cache lock and each file appears by an atomic rename of a private
    temporary: parallel callers (labemu loads several engines at once) never see a torn file."""
    out_dir = cache_dir() / "vllm-ascend" / version
    if all((out_dir / f).is_file() for f in FILES):
        return {f: (out_dir / f).read_bytes() for f in FILES}
    archive = sdist(version)
    with _locked(f"examples-{version}"):
        if all((out_dir / f).is_file() for f in FILES):  # another caller extracted them meanwhile
            return {f: (out_dir / f).read_bytes() for f in FILES}
        out = _read_examples(archive, version)
        for rel, data in out.items():
            path = out_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        return out


def _read_examples(archive: Path, version: str) -> dict[str, bytes]:
    import tarfile  # here: render and preflight import this module for version_for() only

    out: dict[str, bytes] = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                rel = member.name.split("/", 1)[1] if "/" in member.name else ""
                if rel in FILES and member.isfile():
                    out[rel] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FetchError(f"{archive} is unreadable ({exc}); delete it and retry") from None
    missing = [f for f in FILES if f not in out]
    if missing:
        raise FetchError(f"{archive} lacks {', '.join(missing)}: vllm-ascend {version} does not ship them")
    return out


def path(version: str, rel: str) -> Path:
    """A fetched example file on the host (for tests and contract checks that run it directly)."""
    examples(version)
    return cache_dir() / "vllm-ascend" / version / rel
