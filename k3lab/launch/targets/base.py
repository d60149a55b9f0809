"""The target interface, and its Docker implementation shared by ``sim`` and ``lab``.

A target creates one container (or pod) per planned node, stages files into it, runs commands in it,
reports on it and removes everything the run created. What to run and check is the plan's business,
not the target's (testinfra keeps the same split). Every resource is registered with the run's
:class:`~k3lab.launch.scope.RunScope` before the call that creates it, so removing it is never the
caller's memory to keep.
"""
from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import docker

from k3lab.launch.backends import LABEL, tar_of, teardown
from k3lab.launch.endpoints import (
    ClientPool,
    CommandResult,
    SshOptions,
    describe,
    docker_exec,
    each_host,
    reason,
)
from k3lab.launch.scope import RunScope
from k3lab.model.plan import NodePlan, Plan, Process, Stage

if TYPE_CHECKING:
    from k3lab.launch.pipeline import Phase
    from k3lab.model.runs import RunState

Files = dict[str, tuple[bytes, int]]


@dataclass(frozen=True)
class Removed:
    """What a removal outside a live run did (``k3lab down RUN``, ``--all``): ``what`` it removed, one phrase
    ("3 container(s)", "4 pod(s), 1 LeaderWorkerSet(s)"), and the places it could not reach (name -> where)."""

    what: str
    left: dict[str, str] = field(default_factory=dict)


class Target(ABC):
    """One kind of place a plan runs on. Subclasses register with :func:`k3lab.launch.targets.register`."""

    name: ClassVar[str] = "abstract"
    @property
    def host_deadline(self) -> float | None:
        """Per-host deadline of the kit-side reads (evidence, versions): a lab's hosts can break one by one;
        the sim's one engine is the kit's own (None: as long as it takes)."""
        return None

    def __init__(self, plan: Plan, run_id: str, scope: RunScope) -> None:
        self.plan = plan
        self.run_id = run_id
        self.scope = scope
        self.left: dict[str, str] = {}  # nodes the last teardown could not reach: node -> endpoint

    @classmethod
    @abstractmethod
    def for_inventory(cls, plan: Plan, run_id: str, inv: Any, scope: RunScope, faults: dict | None = None) -> Target:
        """The target for a rendered plan and its inventory."""

    # ------------------------------------------------------------- what the lifecycle asks of it
    def refuse_to_start(self) -> None:
        """Raise (EnvError) when this plan cannot start here now (before anything is created)."""
        return None

    def warnings(self) -> list[str]:
        return []

    def phases_before_containers(self, run: Any) -> list[Phase]:
        """Checks of the place itself, before anything of the run exists there (lab: preflight, hosts)."""
        return []

    def phases_after_containers(self, run: Any) -> list[Phase]:
        """Checks once the containers run, before any engine starts (lab: the hardware stage)."""
        return []

    def process_env(self) -> dict[str, str]:
        """Variables every started process gets from the target (the sim's stand-in settings)."""
        return {}

    def gate_timeout(self, stage: Stage) -> float:
        return float(stage.timeout_s)

    def state(self) -> dict[str, Any]:
        """What run-state.json records of the target, beside the containers and endpoints."""
        return {}

    @classmethod
    def prerequisites(cls, scenario: str, inventory: str | None) -> list[Callable[[], str | None]]:
        """What a bring-up here needs of this machine (:mod:`k3lab.launch.prereq` checks, each one line)."""
        return []

    def liveness(self, procs: list[Process]) -> dict[str, bool] | None:
        """Process id -> alive, when the target knows it without the PID files (None: ask the PID files)."""
        return None

    def evidence(self, node: str) -> dict[str, str]:
        """Files of the node's evidence the target adds (name -> text), beside the logs read through exec."""
        return {}

    @classmethod
    def hosts_from_state(cls, state: RunState) -> dict[str, Any] | None:
        """The suite's hosts (node -> NodeHost-shaped) of a recorded run; None: each node's container on its
        Docker endpoint (:func:`k3lab.launch.endpoints.hosts_from_state`)."""
        return None

    @classmethod
    def down_recorded(cls, state: RunState) -> Removed | None:
        """``k3lab down RUN`` for a recorded run of this target, without its Run: what it removed and the
        places not reached. None: the Docker sweep of the run's endpoints removes it."""
        return None

    @classmethod
    def down_all(cls, states: list[RunState]) -> dict[str, Removed] | None:
        """``k3lab down --all`` on this target: everything of k3lab runs it can find, given its recorded runs
        that are not down; what was removed per run id ("": what no run-state names). Raise when its place
        does not answer (the command names it and asks the other targets all the same). None: nothing to ask."""
        return None

    @classmethod
    def container_views(cls, state: RunState) -> dict[str, Any] | None:
        """Per node, the conformance suite's view of its container(s) (``check_running()``,
        ``check_matches_plan(plan)``); None: each node's container on its Docker endpoint (conformance/conftest.py)."""
        return None

    def removed_what(self) -> str:
        """What this run's teardown removed, one phrase for the run's last log line."""
        return "nothing"

    # ------------------------------------------------------------- the nodes
    @abstractmethod
    def prepare(self) -> None:
        """Target-wide setup before the nodes (image, network)."""

    @abstractmethod
    def create(self, node: NodePlan) -> None: ...

    @abstractmethod
    def put(self, node: NodePlan, files: Files) -> None: ...

    @abstractmethod
    def start(self, node: NodePlan) -> None: ...

    def stage_extra(self, node: NodePlan) -> Files:
        return {}

    def after_start(self) -> None:
        """Once every node runs, before the first stage."""
        return None

    @abstractmethod
    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        ...

    @abstractmethod
    def exec_detached(self, node: str, cmd: list[str], env: dict[str, str], workdir: str) -> None: ...

    @abstractmethod
    def has(self, node: str) -> bool:
        """Whether the run has a container for ``node`` (created or, attached, found)."""

    @abstractmethod
    def inspect(self, node: str) -> dict[str, Any]:
        """The node's container as its runtime describes it (evidence/<node>/inspect.json)."""

    @abstractmethod
    def container_names(self) -> dict[str, str]: ...

    @abstractmethod
    def teardown(self) -> dict[str, str]:
        """Remove everything of this run; the nodes that could not be reached (node -> endpoint)."""

    def parallel(self, fn, nodes: list[NodePlan], deadline: float | None = None) -> dict[str, str]:
        """``fn(node)`` on every node at once. Without a deadline (bring-up) the first error is raised;
        with one, the nodes that failed or did not answer in time are returned, each named with its
        host and why ("p1 (10.0.0.2): no answer within 60 s"), and the others proceed."""
        if deadline is None:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(fn, nodes))
            return {}
        _, failures = each_host(fn, {n.name: n for n in nodes}, deadline)
        return {n.name: f"{n.name} ({describe(n.endpoint)}): {reason(failures[n.name])}"
                for n in nodes if n.name in failures}


class DockerTarget(Target):
    """Nodes as containers on Docker engines: created, staged (put_archive), exec'd and removed by label."""

    def __init__(self, plan: Plan, run_id: str, scope: RunScope, ssh: SshOptions | None = None) -> None:
        super().__init__(plan, run_id, scope)
        self.ssh = ssh or SshOptions()
        self.containers: dict[str, docker.models.containers.Container] = {}
        self._touched: dict[str, str] = {}  # node -> endpoint the run created something on
        self.removed = 0  # containers the teardown removed
        self.teardown_s = 0.0

    # --- per target
    @abstractmethod
    def client(self, node: NodePlan) -> docker.DockerClient: ...

    @abstractmethod
    def container_kwargs(self, node: NodePlan) -> dict: ...

    @property
    def pool(self) -> ClientPool:
        raise NotImplementedError

    # --- teardown by construction
    def touch(self, nodes: list[NodePlan]) -> None:
        """The run is about to create something on these nodes' endpoints: register its removal first."""
        self._touched.update({n.name: n.endpoint for n in nodes})
        self.scope.on_close(f"run {self.run_id} on its endpoints", self.teardown, key="sweep")

    def teardown(self) -> dict[str, str]:
        """Every touched endpoint at once, containers and networks carrying this run's label only."""
        if not self._touched:
            return {}
        t = time.monotonic()
        removed, self.left = teardown(self.pool, self.run_id, dict(self._touched))
        self.removed += len(removed)
        self.teardown_s += time.monotonic() - t
        return self.left

    # --- the nodes
    def labels(self, node: NodePlan) -> dict[str, str]:
        return {**node.container.labels, LABEL: self.run_id}

    def create(self, node: NodePlan) -> None:
        self.touch([node])
        self.containers[node.name] = self.client(node).containers.create(detach=True, labels=self.labels(node),
                                                                       **self.container_kwargs(node))

    def start(self, node: NodePlan) -> None:
        self.containers[node.name].start()

    def put(self, node: NodePlan, files: Files) -> None:
        self.containers[node.name].put_archive("/", tar_of(files))

    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        container = self.containers[node]
        return docker_exec(container.client.api, container.id, cmd, node, env, timeout=timeout)

    def exec_detached(self, node: str, cmd: list[str], env: dict[str, str], workdir: str) -> None:
        self.containers[node].exec_run(cmd, environment=env, workdir=workdir, detach=True)

    def has(self, node: str) -> bool:
        return node in self.containers

    def inspect(self, node: str) -> dict[str, Any]:
        container = self.containers[node]
        container.reload()
        return json.loads(json.dumps(container.attrs, default=str))

    def container_names(self) -> dict[str, str]:
        return {n: c.name for n, c in self.containers.items()}

    def state(self) -> dict[str, Any]:
        return {"ssh": self.ssh.as_dict()}

    def removed_what(self) -> str:
        return f"{self.removed} container(s) and the run network"

