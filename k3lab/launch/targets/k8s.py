"""The k8s target: Kubernetes, through the manifests ``k3lab render --target k8s`` writes (OUT/k8s/).

This version renders only: an operator applies the manifests with kubectl, as RUNBOOK.md says. A bring-up
(``k3lab up --target k8s``) is refused before anything is created (:mod:`k3lab.launch.prereq` asks the
kind's ``live`` fact); this class registers the name so that every kind has its target, and refuses too if
reached some other way. Creating, reaching and tearing down pods through the Kubernetes API comes later.
"""
from __future__ import annotations

from typing import Any

from k3lab.errors import UsageError
from k3lab.launch.scope import RunScope
from k3lab.launch.targets.base import Target
from k3lab.launch.targets.registry import register
from k3lab.model import targetkinds
from k3lab.model.plan import Plan


@register
class K8sTarget(Target):
    name = "k8s"

    @classmethod
    def for_inventory(cls, plan: Plan, run_id: str, inv: Any, scope: RunScope, faults: dict | None = None) -> Target:
        raise UsageError(targetkinds.kind(cls.name).live or "the k8s target cannot bring a plan up")
