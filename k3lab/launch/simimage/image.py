"""The sim node image, built with no image registry: ``docker import`` of a small root filesystem.

The image holds the stand-ins (the ``k3sim`` package and ``launchers/sim/rootfs``), mount points, and the real vllm-ascend
proxy and ``launch_online_dp.py`` of one release under ``/vllm-workspace/vllm-ascend``, fetched
from the package registry (``k3lab.launch.simimage.vllm_ascend``; one image per release). Programs come from
the host, mounted read-only: ``/usr`` subtrees for bash and coreutils, and the kit's own Python
(``sys.prefix`` and ``sys.base_prefix``) for the stand-ins. ``python``/``python3`` on the node's
PATH are wrappers around that interpreter with the stand-in packages on ``PYTHONPATH``. The tag
is a hash of everything that goes in, so a rebuild happens only when something changed.
"""
from __future__ import annotations

import hashlib
import io
import sys
import tarfile
import time
from types import ModuleType

import docker
from docker.types import Mount

from k3lab import paths
from k3lab.launch import prereq
from k3lab.launch.endpoints import local_client
from k3lab.launch.simimage import vllm_ascend
from k3lab.render import profiles

HERE = paths.SIM  # launchers/sim: what the image holds (k3lab.paths finds it in a checkout and a wheel)
ROOTFS = HERE / "rootfs"  # files copied verbatim into the image
PACKAGE = HERE / "k3sim"  # the simulator's own package: an ordinary one, put on the image's SITE
REPO = "k3lab-sim"
SITE = "/opt/k3lab-sim/site"


def host_pythonpath() -> list[str]:
    """What makes the stand-ins importable on this host (tests, the lab emulator): k3sim's parent and the
    image's site (the MemCache packages and the dist-info directories the version probes read)."""
    return [str(HERE), str(ROOTFS / SITE.lstrip("/"))]


def sim_hw() -> ModuleType:
    """``k3sim.hw``, the simulated driver (the vNIC address scheme), imported from the image's source."""
    return sim_module("hw")


def sim_module(name: str) -> ModuleType:
    """``k3sim.<name>`` imported from the image's source: the kit computes what the stand-ins compute
    with their own code (addresses, the vNIC scheme), never with a second copy of it."""
    import importlib

    saved = list(sys.path)
    sys.path[:0] = host_pythonpath()
    try:
        return importlib.import_module(f"k3sim.{name}")
    finally:
        sys.path[:] = saved
VLLM_ASCEND_DIR = "vllm-workspace/vllm-ascend"  # the images' source tree (inventory vllm_ascend_source_dir)
SKELETON_DIRS = ["bin", "etc", "tmp", "root", "root/.cache", "run", "var/log", "var/tmp", "dev", "proc", "sys",
                 "home", "mnt", "etc/k3lab-sim", "run/k3lab-sim"]


def host_mounts() -> list[Mount]:
    return [Mount(target=path, source=path, type="bind", read_only=True) for path in profiles.host_paths()]


def _wrapper(python: str) -> bytes:
    return (f'#!/bin/sh\nexport PYTHONPATH="{SITE}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
            f'exec {python} "$@"\n').encode()


class _RootFS:
    """A reproducible tar (mtime 0) whose digest covers every file's name and content."""

    def __init__(self, tar: tarfile.TarFile, digest) -> None:
        self.tar, self.digest, self.dirs = tar, digest, set(SKELETON_DIRS)

    def dir(self, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
        self.tar.addfile(info)

    def dir_once(self, name: str) -> None:
        if name not in self.dirs:
            self.dir(name)
            self.dirs.add(name)

    def file(self, name: str, data: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, 0
        self.tar.addfile(info, io.BytesIO(data))
        self.digest.update(name.encode() + b"\0" + data)

    def link(self, name: str, target: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
        self.tar.addfile(info)


def _stand_ins(fs: _RootFS) -> None:
    """launchers/sim/rootfs as it is, and the k3sim package in the image's site."""
    tree = [(p, p.relative_to(ROOTFS).as_posix()) for p in ROOTFS.rglob("*")]
    tree += [(p, f"{SITE.lstrip('/')}/k3sim/{p.relative_to(PACKAGE).as_posix()}") for p in PACKAGE.rglob("*")]
    tree.append((PACKAGE, f"{SITE.lstrip('/')}/k3sim"))
    for path, rel in sorted(tree, key=lambda t: t[1]):
        if "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        if path.is_dir():
            fs.dir_once(rel)
        else:
            fs.file(rel, path.read_bytes(), path.stat().st_mode & 0o777)


SIM_EXTRA = prereq.SIM_EXTRA  # what the image's interpreter (the kit's own) imports beyond the kit's dependencies


def require_sim_extra() -> None:
    prereq.require("the simulator image", prereq.sim_extra)


def build_tar(vllm_ascend_version: str = vllm_ascend.K3) -> tuple[bytes, str]:
    """The image's root filesystem as a tar (for ``docker import`` on any engine) and its tag."""
    require_sim_extra()
    examples = vllm_ascend.examples(vllm_ascend_version)
    buf = io.BytesIO()
    digest = hashlib.sha256()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        fs = _RootFS(tar, digest)
        for d in SKELETON_DIRS:
            fs.dir(d, 0o1777 if d in ("tmp", "var/tmp") else 0o755)
        for link, target in (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
            fs.link(link, target)
        fs.file("etc/passwd", b"root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644)
        fs.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
        _stand_ins(fs)
        # the real example programs, unchanged, where the vllm-ascend images keep their source tree
        for rel, data in sorted(examples.items()):
            parts = f"{VLLM_ASCEND_DIR}/{rel}".split("/")
            for i in range(1, len(parts)):
                fs.dir_once("/".join(parts[:i]))
            fs.file(f"{VLLM_ASCEND_DIR}/{rel}", data, 0o644)
        # bash lives at /usr/bin/bash on merged-/usr hosts; /bin/bash and /bin/sh are what scripts name
        for name in ("bash", "sh"):
            fs.link(f"bin/{name}", f"/usr/bin/{name}")
        for name in ("python", "python3"):
            fs.file(f"usr/local/bin/{name}", _wrapper(sys.executable), 0o755)
    digest.update(sys.executable.encode())
    return buf.getvalue(), digest.hexdigest()[:12]


def ensure(client: docker.DockerClient | None = None, vllm_ascend_version: str = vllm_ascend.K3,
           built: tuple[bytes, str] | None = None) -> str:
    """Build (or reuse) the image on ``client``'s engine; return its tag (``k3lab-sim:<hash>``).

    ``built``: a ``build_tar`` result to import as it is (one build shared by several engines)."""
    client = client or local_client()
    data, tag = built or build_tar(vllm_ascend_version)
    ref = f"{REPO}:{tag}"
    try:
        client.images.get(ref)
        return ref
    except docker.errors.ImageNotFound:
        pass
    started = time.monotonic()
    client.api.import_image_from_data(
        data, repository=REPO, tag=tag,
        changes=['ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin:/usr/local/Ascend/driver/tools:/opt/k3lab-sim/bin',
                 'ENV LANG=C.UTF-8', 'WORKDIR /root', 'CMD ["/opt/k3lab-sim/bin/node-init"]'])
    client.images.get(ref)
    print(f"built sim image {ref} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return ref
