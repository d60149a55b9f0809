"""The k8s target: Kubernetes, through the manifests ``k3lab render --target k8s`` writes and the official
``kubernetes`` client (the ``k8s`` extra; :mod:`.k8sapi` holds the calls).

Before anything is created, every rendered object is sent as a server-side dry run with strict field
validation (the ``k8s-preflight`` phase): a field the API server does not know, or a LeaderWorkerSet CRD it
does not serve, stops the run with nothing made. Then each object is created, its deletion registered with
the run's scope first, and a sweep by the run label (``k3lab.run``) registered before the first one, so
whatever ends the run removes the LeaderWorkerSets, their pods and the rest. The pods stage their node's
files from the ConfigMap and start its processes themselves (:mod:`k3lab.render.k8s`), so this target
starts none: it waits for every pod of the run to be Ready (their readiness probes are the stages' gates),
maps each to its node by the Kubernetes node it runs on, and the lifecycle then checks the stages' gates as
on a lab. Commands run through the exec subresource, liveness is the pods' phase and container states, and
the pods' logs go into the evidence. An API server that does not answer is named by context and server.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k3lab import settings
from k3lab.errors import ChecksFailed, UsageError
from k3lab.launch.endpoints import ClientPool, CommandResult, NodeHost
from k3lab.launch.pipeline import Phase
from k3lab.launch.scope import RunScope
from k3lab.launch.targets.base import Files, Removed, Target
from k3lab.launch.targets.registry import register
from k3lab.model import apikey
from k3lab.model.inventory import K8s
from k3lab.model.plan import NodePlan, Plan, Process
from k3lab.render.k8s import api_key_secret

if TYPE_CHECKING:
    from k3lab.launch.targets.k8sapi import Cluster, Ref
    from k3lab.model.runs import RunState

EXTRA_INSTALL = "pip install 'k3lab[k8s]'"
VERSION_DEADLINE_S = 5.0  # an API server answers /version in milliseconds; one that takes 5 s is not usable
ENGINE_KINDS = ("provider", "engine", "launcher")  # the processes of a LeaderWorkerSet's pods


class PodsNotReady(ChecksFailed):
    """Pods of the run did not become Ready in time, or failed (exit 1); the message names each."""


@dataclass(frozen=True)
class PodOf:
    """A pod of the run, as its node and group (``prefill``, ``mixed``, ``proxy``, ``metaservice``) see it."""

    name: str
    node: str
    group: str
    engine: bool


@register
class K8sTarget(Target):
    name = "k8s"

    def __init__(self, plan: Plan, run_id: str, scope: RunScope, k8s: K8s) -> None:
        super().__init__(plan, run_id, scope)
        self.k8s = k8s
        self.kubeconfig = settings.current().kubeconfig
        self.objects: list[dict[str, Any]] = []  # the rendered objects, in the order they are applied
        self.pods: dict[str, list[PodOf]] = {}  # node -> its pods, the engine's first
        self.removed: dict[str, int] = {}  # kind -> objects the teardown removed
        self.teardown_s = 0.0
        self._hosts = {k8s.node_name(n.name): n.name for n in plan.nodes}

    @classmethod
    def for_inventory(cls, plan: Plan, run_id: str, inv: Any, scope: RunScope, faults: dict | None = None) -> K8sTarget:
        if inv.k8s is None:
            raise UsageError("--target k8s needs the inventory's k8s section (context, namespace, weights)")
        return cls(plan, run_id, scope, inv.k8s)

    @cached_property
    def cluster(self) -> Cluster:
        from k3lab.launch.targets.k8sapi import Cluster

        return Cluster(self.kubeconfig, self.k8s.context, self.k8s.namespace, settings.current().answer_timeout_s)

    @property
    def host_deadline(self) -> float:
        return settings.current().host_deadline_s

    # ------------------------------------------------------------------ before anything is created
    @classmethod
    def prerequisites(cls, scenario: str, inventory: str | None) -> list[Callable[[], str | None]]:
        checks: list[Callable[[], str | None]] = [k8s_extra, kubeconfig]
        if inventory not in (None, "-"):  # standard input is read once, by the run (its preflight asks the API)
            checks.append(lambda: api_answers(scenario, inventory))
        return checks

    def phases_before_containers(self, run: Any) -> list[Phase]:
        return [Phase("k8s-preflight", lambda: self.dry_run(run.rendered.manifests), "k8s_preflight_s")]

    def dry_run(self, manifests: dict[str, str]) -> None:
        """Every object the render made, sent with ``dryRun=All`` and strict field validation: the API server
        answers as it would to the real create, and stores nothing."""
        import yaml

        from k3lab.launch.targets.k8sapi import ApiException, message

        self.objects = [o for text in manifests.values() for o in yaml.safe_load_all(text) if o]
        key = apikey.get()
        if key:  # first: the pods read it when their containers start
            self.objects.insert(0, api_key_secret(self.plan, self.k8s, self.run_id, key))
        refused = []
        for obj in self.objects:
            try:
                self.cluster.create(obj, dry_run=True)
            except ApiException as exc:
                refused.append(f"{obj['kind']} {obj['metadata']['name']}: {exc.status} {message(exc)}")
        if refused:
            raise ChecksFailed(f"k8s preflight: the API server ({self.cluster.where()}) refuses "
                               + "; ".join(refused))

    # ------------------------------------------------------------------ creating
    def prepare(self) -> None:
        """Every rendered object (and the API key's Secret, which no file holds) created in order, its deletion
        registered first; the sweep by label before
        them all (registered first, it runs last: it also waits until the pods are gone)."""
        self.scope.on_close(f"run {self.run_id} on Kubernetes ({self.cluster.where()})", self.teardown, key="k8s")
        for obj in self.objects:
            from k3lab.launch.targets.k8sapi import Ref

            ref = Ref(obj["kind"], obj["metadata"]["name"])
            self.scope.on_close(f"{ref.kind} {ref.name}", functools.partial(self._delete, ref))
            self.cluster.create(obj)

    def _delete(self, ref: Ref) -> dict[str, str]:
        from k3lab.launch.targets.k8sapi import ApiUnreachable

        try:
            self._count(self.cluster.delete(ref))
        except ApiUnreachable:
            return {"k8s": self.cluster.server}
        return {}

    def _count(self, gone: dict[str, int]) -> None:
        for kind, n in gone.items():
            self.removed[kind] = self.removed.get(kind, 0) + n

    def create(self, node: NodePlan) -> None:
        """The node's pod comes from its group's object, created by :meth:`prepare`."""

    def put(self, node: NodePlan, files: Files) -> None:
        """The node's files reach its pod through the ConfigMap (the pod stages them itself)."""

    def start(self, node: NodePlan) -> None:
        """The pod starts itself once scheduled."""

    def after_start(self) -> None:
        # the pods' probes are the stages' gates: they may take as long as all stages together
        self.wait_ready(sum(self.gate_timeout(s) for s in self.plan.stages) or 300.0)

    def exec_detached(self, node: str, cmd: list[str], env: dict[str, str], workdir: str) -> None:
        """Nothing to start: the pod's entry script started the node's processes in the plan's order."""

    # ------------------------------------------------------------------ waiting
    def expected_pods(self) -> int:
        return sum(o["spec"]["leaderWorkerTemplate"]["size"] if o["kind"] == "LeaderWorkerSet" else 1
                   for o in self.objects if o["kind"] in ("LeaderWorkerSet", "Pod"))

    def wait_ready(self, deadline: float) -> None:
        """Every pod of the run Ready (polled by label), each mapped to its node; a pod that fails, or is not
        Ready by the deadline, is named with its phase, conditions and last log lines."""
        end = time.monotonic() + deadline
        want = self.expected_pods()
        while True:
            pods = self.cluster.pods(f"k3lab.run={self.run_id}")
            failed = [p for p in pods if _terminated(p)]
            if failed:
                raise PodsNotReady(f"run {self.run_id}: pod(s) failed before Ready: {self._describe(failed)}")
            if len(pods) >= want and all(_ready(p) for p in pods):
                self._map(pods)
                return
            if time.monotonic() >= end:
                waiting = [p for p in pods if not _ready(p)]
                missing = f"; {want - len(pods)} pod(s) not created" if len(pods) < want else ""
                raise PodsNotReady(f"run {self.run_id}: not Ready after {deadline:g} s ({self.cluster.where()}): "
                                   f"{self._describe(waiting)}{missing}")
            time.sleep(min(2.0, max(0.0, end - time.monotonic())))

    def _describe(self, pods: list[Any]) -> str:
        out = []
        for p in pods:
            host = p.spec.node_name if p.spec else None
            why = "; ".join(f"{c.type} {c.status}" + (f" ({c.reason})" if c.reason else "")
                            for c in (p.status.conditions or [])) if p.status else ""
            tail = self._tail(p.metadata.name)
            out.append(f"{p.metadata.name} (node {self._hosts.get(host or '', '?')}, host {host or 'unscheduled'}): "
                       f"phase {p.status.phase if p.status else '?'}{', ' + why if why else ''}"
                       + (f"; last log lines:\n{tail}" if tail else ""))
        return "\n".join(out)

    def _tail(self, pod: str) -> str:
        try:
            return self.cluster.log(pod, tail=10).rstrip()
        except Exception:  # noqa: BLE001 - a pod that never started has no log; the phase already says why
            return ""

    def _map(self, pods: list[Any]) -> None:
        self.pods = {}
        for p in pods:
            node = self._hosts.get(p.spec.node_name or "")
            if node is None:
                raise PodsNotReady(f"pod {p.metadata.name} runs on {p.spec.node_name}, which is no node of the inventory")
            group = (p.metadata.labels or {}).get("k3lab.group", "")
            engine = group not in ("proxy", "metaservice")
            self.pods.setdefault(node, []).append(PodOf(p.metadata.name, node, group, engine))
        for got in self.pods.values():
            got.sort(key=lambda x: not x.engine)

    # ------------------------------------------------------------------ the nodes
    def pod_of(self, node: str, proc: Process | None = None) -> str:
        """The pod that runs ``proc`` on ``node`` (without one: the node's engine pod, else its only one)."""
        pods = self.pods.get(node)
        if not pods:
            raise KeyError(f"no pod of run {self.run_id} runs node {node}")
        if proc is not None:
            for p in pods:
                if p.engine == (proc.kind in ENGINE_KINDS) and (p.engine or p.group == proc.kind):
                    return p.name
        return pods[0].name

    def exec(self, node: str, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 30) -> CommandResult:
        return self.cluster.exec(self.pod_of(node), cmd, node, env, timeout)

    def liveness(self, procs: list[Process]) -> dict[str, bool]:
        """A process is alive while its pod runs and no container of it has ended (the pod's container ends
        when one of its processes does: its entry script waits on them)."""
        pods = {p.metadata.name: p for p in self.cluster.pods(f"k3lab.run={self.run_id}")}
        out = {}
        for proc in procs:
            pod = pods.get(self.pod_of(proc.node, proc))
            out[proc.id] = pod is not None and not _terminated(pod) and pod.status.phase in ("Pending", "Running")
        return out

    def has(self, node: str) -> bool:
        return node in self.pods

    def inspect(self, node: str) -> dict[str, Any]:
        """The node's pods as the API server describes them."""
        api = self.cluster.api
        return {p.name: api.sanitize_for_serialization(
            self.cluster.call(f"read pod {p.name}", self.cluster.core.read_namespaced_pod, p.name, self.k8s.namespace))
            for p in self.pods.get(node, [])}

    def evidence(self, node: str) -> dict[str, str]:
        """Each pod's log (its processes' logs, tailed by the entry script) as the API server keeps it."""
        return {f"pod-{p.name}.log": self.cluster.log(p.name) for p in self.pods.get(node, [])}

    def container_names(self) -> dict[str, str]:
        return {node: ",".join(p.name for p in pods) for node, pods in self.pods.items()}

    def state(self) -> dict[str, Any]:
        return {"k8s": {"context": self.k8s.context, "namespace": self.k8s.namespace}}

    # ------------------------------------------------------------------ teardown
    def teardown(self) -> dict[str, str]:
        """Everything labelled with the run, waited for until gone; the API server, when it did not answer."""
        from k3lab.launch.targets.k8sapi import ApiUnreachable

        t = time.monotonic()
        try:
            self._count(self.cluster.delete_run(self.run_id, settings.current().teardown_deadline_s))
            self.left = {}
        except (ApiUnreachable, TimeoutError) as exc:
            self.scope.log(f"run {self.run_id}: {exc}")
            self.left = {"k8s": self.cluster.server}
        self.teardown_s += time.monotonic() - t
        return self.left

    @classmethod
    def hosts_from_state(cls, state: RunState) -> dict[str, Any]:
        """The suite's hosts: each node's (engine) pod, its commands through the exec subresource."""
        cluster = _recorded_cluster(state)
        return {node: PodHost(node, cluster.server, pods.split(",")[0], ClientPool(), cluster=cluster)
                for node, pods in state.containers.items() if pods}

    def removed_what(self) -> str:
        from k3lab.launch.targets.k8sapi import removed

        return f"{removed(self.removed, self.run_id)} ({self.cluster.where()})"

    @classmethod
    def container_views(cls, state: RunState) -> dict[str, Any]:
        """Each node's pods for the suite's container checks, read through the API against the run's rendered
        manifests (:mod:`.k8sview`)."""
        from k3lab.launch.targets.k8sview import PodView, pod_templates

        cluster = _recorded_cluster(state)
        templates = pod_templates(Path(state.run_dir) / "rendered" / "k8s")
        return _Views(state.run, {node: PodView(node, pods.split(","), cluster, templates, state.run)
                                  for node, pods in state.containers.items() if pods})

    @classmethod
    def down_recorded(cls, state: RunState) -> Removed:
        """``k3lab down RUN``: the objects labelled with the recorded run, from the recorded context and
        namespace."""
        from k3lab.launch.targets.k8sapi import ApiUnreachable, removed

        cluster = _recorded_cluster(state)
        try:
            counts = cluster.delete_run(state.run, settings.current().teardown_deadline_s)
        except (ApiUnreachable, TimeoutError):
            return Removed("nothing", {"k8s": cluster.server})
        return Removed(f"{removed(counts, state.run)} ({cluster.where()})")

    @classmethod
    def down_all(cls, states: list[RunState]) -> dict[str, Removed]:
        """``k3lab down --all``: each recorded k8s run that is not down, in its own context (there is no
        cluster-wide "every run" without one: a kubeconfig may name many clusters). The runs at once: each
        is bounded by its own calls' deadlines, and one cluster that does not answer holds up no other."""
        from k3lab.launch.endpoints import each_host, reason

        done, failed = each_host(cls.down_recorded, {s.run: s for s in states}, None)
        return {s.run: done[s.run] if s.run in done else Removed("nothing", {"k8s": reason(failed[s.run])})
                for s in states}


class _Views(dict):
    """Node -> its :class:`~.k8sview.PodView`; a node without a recorded pod fails its own checks, named."""

    def __init__(self, run_id: str, views: dict[str, Any]) -> None:
        super().__init__(views)
        self.run_id = run_id

    def __missing__(self, node: str) -> Any:
        raise AssertionError(f"{node}: run {self.run_id} recorded no pod for it (its pods never became Ready?)")


def _recorded_cluster(state: RunState) -> Cluster:
    from k3lab.launch.targets.k8sapi import Cluster

    where = (state.model_extra or {}).get("k8s") or {}
    if not isinstance(where, dict) or not where.get("context") or not where.get("namespace"):
        raise UsageError(f"run {state.run}: its run-state names no k8s context and namespace")
    return Cluster(settings.current().kubeconfig, str(where["context"]), str(where["namespace"]),
                   settings.current().answer_timeout_s)


@dataclass
class PodHost(NodeHost):
    """A node as the suite's checks see it on the k8s target: its pod, reached through the exec subresource
    (``container`` is the pod's name, ``endpoint`` the API server)."""

    cluster: Any = None

    def exec(self, argv: list[str], env: dict[str, str] | None = None, workdir: str | None = None,
             timeout: int | None = None) -> CommandResult:
        from k3lab.launch.targets.k8sapi import ApiException, ApiUnreachable, message

        self.round_trips += 1
        if workdir:  # exec has no working directory of its own
            argv = ["sh", "-c", 'cd -- "$0" && exec "$@"', workdir, *argv]
        try:
            return self.cluster.exec(self.container, argv, self.name, env, timeout or self.timeout)
        except ApiUnreachable as exc:
            raise AssertionError(f"{self.name}: {exc}") from None
        except ApiException as exc:
            raise AssertionError(f"{self.name}: exec in pod {self.container} refused: {exc.status} "
                                 f"{message(exc)}") from None


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def _terminated(pod: Any) -> bool:
    if pod.status is None:
        return False
    return pod.status.phase in ("Failed", "Succeeded") or any(
        c.state is not None and c.state.terminated is not None for c in (pod.status.container_statuses or []))


# --------------------------------------------------------------------------- prerequisites (exit 3, one line)
def k8s_extra() -> str | None:
    import importlib.util

    if importlib.util.find_spec("kubernetes") is None:
        return f"the [k8s] extra (the kubernetes client is not installed): {EXTRA_INSTALL}"
    return None


def kubeconfig() -> str | None:
    path = settings.current().kubeconfig
    if not path.is_file():
        return f"a kubeconfig ({path} not found): set KUBECONFIG or copy the cluster's to ~/.kube/config"
    return None


def api_answers(scenario: str, inventory: str) -> str | None:
    """The inventory's context answers ``GET /version`` within :data:`VERSION_DEADLINE_S`."""
    if k8s_extra() or kubeconfig():
        return None  # named by those checks
    from k3lab.launch.targets.k8sapi import ApiUnreachable, Cluster
    from k3lab.model.select import load_inventory

    inv, _ = load_inventory(scenario, inventory)
    if inv.k8s is None:
        return None  # the render names the missing section (exit 2)
    try:
        Cluster(settings.current().kubeconfig, inv.k8s.context, inv.k8s.namespace).version(VERSION_DEADLINE_S)
    except ApiUnreachable as exc:
        return (f"a Kubernetes API that answers within {VERSION_DEADLINE_S:g} s ({exc}): start the cluster or "
                f"fix k8s.context")
    except Exception as exc:  # noqa: BLE001 - a kubeconfig without the context, a refused answer: one line
        return f"a Kubernetes API for context {inv.k8s.context} ({type(exc).__name__}: {exc})"
    return None


__all__ = ["K8sTarget", "PodsNotReady"]
