"""What every Docker-based target shares: the run label, file staging as a tar, and removal by label.

The targets themselves (:mod:`k3lab.launch.targets`) create, exec and stage; removal is by the run
label alone, so ``down RUN`` and ``down --all`` find what a killed run left behind.
"""
from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import PurePosixPath

import docker

from k3lab import paths, settings
from k3lab.launch.endpoints import (
    ClientPool,
    describe,
    each_host,
    reason,
)

LABEL = "k3lab.run"
FIXTURES = paths.FIXTURES


def tar_of(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for path, (data, mode) in sorted(files.items()):
            rel = path.lstrip("/")
            parts = PurePosixPath(rel).parents
            for parent in reversed(list(parts)[:-1]):
                if str(parent) not in dirs:
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                    tar.addfile(info)
                    dirs.add(str(parent))
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def remove_by_label(client: docker.DockerClient, run_id: str | None) -> list[str]:
    """Remove a run's containers, then its networks, on one engine (every k3lab run's when ``run_id``
    is None): the one teardown of up, down RUN and down --all. Nothing without the label is touched."""
    flt = {"label": f"{LABEL}={run_id}" if run_id else LABEL}
    removed = []
    # ignore_removed: a run sharing the engine may remove its containers meanwhile
    for c in client.containers.list(all=True, filters=flt, ignore_removed=True):
        try:
            c.remove(force=True)
            removed.append(c.name)
        except docker.errors.NotFound:
            pass
    for net in client.networks.list(filters=flt):
        try:
            net.remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:  # still in use: say so, the containers are gone already
            print(f"k3lab: network {net.name} not removed: {exc}", file=sys.stderr)
    return removed


def teardown(pool: ClientPool, run_id: str, endpoints: dict[str, str],
             deadline: float | None = None) -> tuple[list[str], dict[str, str]]:
    """Remove a run from every endpoint at once (``endpoints``: node -> endpoint), each within ``deadline``.

    The one teardown of a lab run (up's failure path, cycle, down RUN): returns the containers removed
    and the nodes left behind (node -> endpoint), each named on stderr with its host and why. A host
    that does not answer never keeps the run on the others.

    ``deadline`` defaults to $K3LAB_TEARDOWN_DEADLINE: force-removing a node's container kills its
    processes, seconds on a healthy host; the default 90 s leaves room for a slow one."""
    deadline = settings.current().teardown_deadline_s if deadline is None else deadline
    nodes_of: dict[str, list[str]] = {}
    for node, ep in endpoints.items():
        nodes_of.setdefault(ep, []).append(node)
    answers, failures = each_host(lambda ep: remove_by_label(pool.get(ep), run_id), {ep: ep for ep in nodes_of},
                                  deadline)
    for ep, exc in failures.items():
        pool.failed(ep, exc)
        print(f"k3lab: run {run_id} not removed from {', '.join(nodes_of[ep])} ({describe(ep)}): {reason(exc)}",
              file=sys.stderr, flush=True)
    return ([name for ep in nodes_of if ep in answers for name in answers[ep]],
            {node: ep for ep in failures for node in nodes_of[ep]})
