"""Runtime profiles of the lab target: the ONE listed place where a lab run may differ from hardware.

``hardware`` (default) is the guides' docker run, unchanged. ``emulator`` is for the hosts of
``k3lab labemu``: this machine's container runtime refuses ``--privileged`` and has no NPUs or
Ascend driver, so the profile changes exactly the items in :data:`EMULATOR` and nothing else.
Render, preflight, gates, suite, ``--net=host`` and the guides' container names stay those of a
hardware lab. Each item becomes a ``target`` deviation in the plan.
"""
from __future__ import annotations

import os
import sys

from k3lab.model.plan import Container, Mount

# driver files the guides mount from the host (npu-smi, hccn_tool, dcmi, driver libraries)
DRIVER_MOUNT_PREFIXES = ("/usr/local/dcmi", "/usr/local/Ascend/driver", "/usr/local/bin/npu-smi")
EMULATED_DRIVER = "/etc/k3lab-sim"  # the emulated host's device table, read by the image's npu-smi/hccn_tool

EMULATOR = [
    {"id": "emu-privileged", "what": "no --privileged",
     "why": "the container runtime of the emulated lab refuses privileged containers"},
    {"id": "emu-devices", "what": "no --device /dev/davinci*, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc",
     "why": "emulated hosts have no NPUs"},
    {"id": "emu-driver-mounts", "what": f"the driver and tool mounts ({', '.join(DRIVER_MOUNT_PREFIXES)}) are "
     f"replaced by the emulated host's device table ({EMULATED_DRIVER}) and the host programs the stand-in image "
     "runs (/usr subtrees and the kit's Python, read-only)",
     "why": "emulated hosts have no Ascend driver; the image's npu-smi and hccn_tool stand-ins read the emulated "
     "device table the way the real tools read the driver"},
]


# What the sim image and the emulator profile borrow from this host, read-only: bash and coreutils
# (the image has none of its own) and the kit's own interpreter, which runs the stand-ins.
HOST_DIRS = ["/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share/zoneinfo"]
HOST_FILES = ["/etc/ld.so.cache", "/etc/alternatives"]


def python_dirs() -> list[str]:
    """Host directories the kit's interpreter needs (venv and its base install)."""
    dirs = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), sys.prefix}
    dirs.add(os.path.dirname(os.path.dirname(sys.executable)))
    return sorted(d for d in dirs if os.path.isdir(d))


def host_paths() -> list[str]:
    return [p for p in HOST_DIRS + HOST_FILES + python_dirs() if os.path.exists(p)]


def names() -> list[str]:
    return ["hardware", "emulator"]


def apply(profile: str, container: Container) -> Container:
    if profile == "hardware":
        return container
    if profile != "emulator":
        raise ValueError(f"unknown lab profile {profile!r}")
    mounts = [m for m in container.mounts if not m.source.startswith(DRIVER_MOUNT_PREFIXES)]
    mounts.append(Mount.make(source=EMULATED_DRIVER, target=EMULATED_DRIVER))
    mounts += [Mount.make(source=p, target=p, read_only=True) for p in host_paths()]
    return container.model_copy(update={"privileged": False, "devices": [], "mounts": mounts})


def deviations(profile: str) -> list[dict[str, str]]:
    if profile != "emulator":
        return []
    return [{"scope": "target", **d} for d in EMULATOR]
