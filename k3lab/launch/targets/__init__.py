"""The targets a run can be brought up on, one module each, behind one interface (:class:`Target`).

``sim`` (:mod:`.sim`): every node a container on the local engine. ``lab`` (:mod:`.lab`): every node its
own Docker endpoint, with the lab's preflight, host stage and hardware stage. ``k8s`` (:mod:`.k8s`): every
node a pod of the rendered manifests, made and removed through the Kubernetes API (the ``k8s`` extra). A new target
is one more module that subclasses :class:`~k3lab.launch.targets.base.Target` and registers itself;
the lifecycle asks the registry, never ``if target == ...``.
"""
from __future__ import annotations

from k3lab.launch.targets.base import DockerTarget, Target
from k3lab.launch.targets.registry import REGISTRY, lookup, register


def get(name: str) -> type[Target]:
    _load()
    return lookup(name)


def names() -> list[str]:
    _load()
    return sorted(REGISTRY)


def _load() -> None:
    # the built-in targets register on import; imported here, not at the top, so that the registry module
    # itself stays importable without docker-py (the CLI lists targets in its help)
    from k3lab.launch.targets import k8s, lab, sim  # noqa: F401


__all__ = ["DockerTarget", "REGISTRY", "Target", "get", "names", "register"]
