"""The vllm-ascend sdist fetcher: cached files are used as they are, and a failed download is a
FetchError (exit code 3) whose message names the remedy, never a traceback."""
from __future__ import annotations

import io
import tarfile

import pytest

from k3lab.launch.simimage import vllm_ascend


def _sdist(path, version, files):
    path.mkdir(parents=True)
    with tarfile.open(path / f"vllm_ascend-{version}.tar.gz", "w:gz") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(f"vllm_ascend-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_examples_come_from_the_cached_sdist(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_CACHE", str(tmp_path))
    _sdist(tmp_path / "sdist" / "9.9", "9.9", {f: f.encode() for f in vllm_ascend.FILES})
    assert vllm_ascend.examples("9.9") == {f: f.encode() for f in vllm_ascend.FILES}
    assert vllm_ascend.path("9.9", vllm_ascend.PROXY).read_bytes() == vllm_ascend.PROXY.encode()


def test_an_sdist_without_the_examples_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_CACHE", str(tmp_path))
    _sdist(tmp_path / "sdist" / "9.8", "9.8", {vllm_ascend.PROXY: b"x"})
    with pytest.raises(vllm_ascend.FetchError, match="lacks examples/external_online_dp/launch_online_dp.py"):
        vllm_ascend.examples("9.8")


def test_a_failed_download_names_the_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv("K3LAB_CACHE", str(tmp_path))
    (tmp_path / "helper-venv").mkdir()
    (tmp_path / "helper-venv" / ".k3lab-ready").write_text("")
    with pytest.raises(vllm_ascend.FetchError) as exc:
        vllm_ascend.sdist("9.7")  # the helper venv has no python: the download cannot run
    assert exc.value.exit_code == 3
    assert "pip download vllm-ascend==9.7" in str(exc.value)


def test_versions_follow_the_guides():
    assert vllm_ascend.version_for("seeds/000 (Kimi-K3, vLLM-Ascend 0.23.0)") == "0.23.0.post1"
    assert vllm_ascend.version_for("seeds/002 (Kimi K3.1 Pro, vLLM-Ascend 0.30.0)") == "0.30.0rc2"


def test_parallel_first_use_gives_every_caller_the_same_files(tmp_path, monkeypatch):
    """labemu loads the image into several engines at once: on a fresh cache, callers that extract
    the examples while others read them must all get the whole files (a torn read changed the
    image tag on one engine)."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setenv("K3LAB_CACHE", str(tmp_path))
    big = {f: (f.encode() * 400_000) for f in vllm_ascend.FILES}  # large enough for writes to overlap reads
    _sdist(tmp_path / "sdist" / "9.6", "9.6", big)
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda _: vllm_ascend.examples("9.6"), range(48)))
    assert all(g == big for g in got)
    assert not list((tmp_path / "vllm-ascend").rglob("*.tmp*"))
