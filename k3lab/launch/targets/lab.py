"""The ``lab`` target: real nodes, each its own Docker endpoint (``unix://``, ``tcp://``, ``ssh://``),
running the documented ``docker run``. Before any container it asks every endpoint (the lab preflight)
and proves every host (the host stage); before any engine, the NPUs and HCCN links (the hardware stage).
A host that stops answering is named (node and host) and remembered, so gates, liveness and evidence
fail at once on it instead of waiting out a timeout each."""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Self

import docker
from docker.types import Mount

from k3lab import outputs, settings
from k3lab.errors import ChecksFailed
from k3lab.launch.endpoints import (
    ClientPool,
    CommandResult,
    HostUnreachable,
    SshOptions,
    describe,
    reason,
    unreachable_error,
)
from k3lab.launch.pipeline import Phase
from k3lab.launch.scope import RunScope
from k3lab.launch.targets.base import DockerTarget
from k3lab.launch.targets.registry import register
from k3lab.model.plan import NodePlan, Plan


@register
class LabTarget(DockerTarget):
    """Real nodes: each node's own Docker endpoint, the documented docker run."""

    name = "lab"
    @property
    def host_deadline(self) -> float:
        return settings.current().host_deadline_s  # $K3LAB_HOST_DEADLINE

    def __init__(self, plan: Plan, run_id: str, scope: RunScope, ssh: SshOptions | None = None,
                 pull: str = "never", acceptances: tuple = (), strict: bool = False) -> None:
        super().__init__(plan, run_id, scope, ssh)
        # ssh:// goes through paramiko, which verifies host keys against known_hosts (never auto-adds)
        self._pool = ClientPool(self.ssh)
        self.pull, self.acceptances, self.strict = pull, tuple(acceptances), strict

    @classmethod
    def for_inventory(cls, plan: Plan, run_id: str, inv: Any, scope: RunScope, faults: dict | None = None,
                      pull: str = "never", strict: bool = False) -> Self:
        return cls(plan, run_id, scope, SshOptions(inv.lab.known_hosts, inv.lab.identity_file), pull=pull,
                   acceptances=tuple(inv.accept), strict=strict)

    @property
    def pool(self) -> ClientPool:
        return self._pool

    def client(self, node: NodePlan) -> docker.DockerClient:
        return self._pool.get(node.endpoint)

    def container_kwargs(self, node: NodePlan) -> dict:
        c = node.container
        return dict(image=c.image, name=c.name, command=c.command, shm_size=c.shm_size, privileged=c.privileged,
                    network_mode=c.network_mode, devices=[f"{d}:{d}" for d in c.devices],
                    mounts=[Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                            for m in c.mounts])

    def prepare(self) -> None:
        """Nothing lab-wide: each node's image is on its host (the lab preflight proved it)."""

    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        endpoint = self.plan.node(node).endpoint
        try:
            self._pool.get(endpoint)  # refuses at once a host that failed before
            return super().exec(node, cmd, env, timeout)
        except Exception as exc:
            if not unreachable_error(exc):
                raise
            self._pool.failed(endpoint, exc)
            raise HostUnreachable(f"{node} ({describe(endpoint)}) does not answer: {reason(exc)}") from None

    def process_env(self) -> dict[str, str]:
        # an emulated lab (k3lab labemu, recorded as emu-* deviations) runs the simulator's stand-in engines
        if any(d.id.startswith("emu-") for d in self.plan.deviations):
            from k3lab.launch.targets.sim import standin_env

            return standin_env(self.plan)
        return {}

    # ------------------------------------------------------------------ the stages a lab adds
    def phases_before_containers(self, run: Any) -> list[Phase]:
        return [Phase("lab-preflight", lambda: self._lab_preflight(run), "lab_preflight_s"),
                Phase("host-stage", lambda: self._host_stage(run), "host_stage_s")]

    def phases_after_containers(self, run: Any) -> list[Phase]:
        from k3lab.launch import hwstage

        return [Phase("hardware-stage", lambda: hwstage.gate(run.dir, run.timings), "hardware_stage_s")]

    def _lab_preflight(self, run: Any) -> None:
        """Ask every node's endpoint before anything starts (k3lab.launch.labpreflight); nothing runs on errors."""
        from k3lab.launch import findings as gate
        from k3lab.launch import labpreflight

        t = time.monotonic()
        findings = labpreflight.run(self.plan, self._pool, self.run_id, self.pull)
        seconds = time.monotonic() - t
        outputs.write_run_file(run.dir / "lab-preflight.json", json.dumps([f.__dict__ for f in findings], indent=2))
        try:
            gate.refuse(findings, self.acceptances, self.strict, "lab preflight")
        except ChecksFailed:
            run.save("preflight-failed")
            raise
        print(f"[k3lab {time.strftime('%H:%M:%S')}] lab preflight: {len(self.plan.nodes)} endpoints checked in "
              f"{seconds:.1f}s", file=sys.stderr, flush=True)

    def _host_stage(self, run: Any) -> None:
        """Every node's host proven (k3lab.launch.hoststage) before any container starts. Its helper
        containers carry the run label: registered first, so any end of the run removes them."""
        from k3lab.launch import hoststage

        self.touch(self.plan.nodes)
        try:
            hoststage.gate(self.plan, self._pool, self.run_id, run.dir, run.timings)
        except ChecksFailed:
            run.save("host-stage-failed")
            raise


class AttachedLab(LabTarget):
    """A deployment started by hand: its containers are found, never created, and never removed (only
    the host stage's helpers, which carry this run's label, are)."""

    name = "lab-attached"  # not registered: ``k3lab check`` builds it

    def find(self) -> None:
        def one(node: NodePlan) -> None:
            try:
                self.containers[node.name] = self.client(node).containers.get(node.container.name)
            except docker.errors.NotFound:
                print(f"k3lab: {node.name} ({describe(node.endpoint)}): container {node.container.name} not found",
                      file=sys.stderr, flush=True)

        for why in self.parallel(one, self.plan.nodes, self.host_deadline).values():
            print(f"k3lab: {why}", file=sys.stderr, flush=True)

    def container_names(self) -> dict[str, str]:
        return {n.name: n.container.name for n in self.plan.nodes}
