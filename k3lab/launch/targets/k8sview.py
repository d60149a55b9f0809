"""The conformance suite's view of a node's pods on the k8s target (conformance/test_containers.py).

On sim and lab the suite reads each node's container on its Docker endpoint; here the same facts come from
the Kubernetes API: the pod's phase and container statuses (running, Ready, restarts, and why a container
waits: ``CrashLoopBackOff``, ``ImagePullBackOff``...), and its spec against the plan as the run rendered it
(``RUN/rendered/k8s/``): image, command and arguments, environment, ``/dev/shm`` as an in-memory emptyDir
of the planned size, host networking, privileges, mounts and the NPU resource limit. A failure names the node, the pod, the
cluster (context and server) and what to do. Secret values are never read, compared or printed: only where
a variable's value comes from.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from k3lab.model.plan import NodePlan, Plan
from k3lab.render.k8s import ENGINE_KEY_VAR, PROXY_KEY_VAR

API_KEY_VARS = (ENGINE_KEY_VAR, PROXY_KEY_VAR)
# why a container waits, and what to do about it (kubectl's words for the reasons the kubelet reports)
WAITING_REMEDY = {
    "CrashLoopBackOff": "it keeps exiting: 'kubectl logs --previous' on the pod says why",
    "ImagePullBackOff": "its image cannot be pulled on that host: load it there or fix k8s.image",
    "ErrImagePull": "its image cannot be pulled on that host: load it there or fix k8s.image",
    "CreateContainerConfigError": "a ConfigMap or Secret it references is missing ('kubectl describe pod')",
    "ContainerCreating": "still being created ('kubectl describe pod' shows the events)",
}


def pod_templates(folder: Path) -> dict[tuple[str, str | None], dict[str, Any]]:
    """The pod specs of a run's rendered manifests, by (``k3lab.group``, ``k3lab.pod``): a LeaderWorkerSet's
    leader and worker templates ("leader", "worker"), a plain pod's spec (None)."""
    out: dict[tuple[str, str | None], dict[str, Any]] = {}
    for path in sorted(folder.glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if not obj:
                continue
            group = obj["metadata"]["labels"].get("k3lab.group", "")
            if obj["kind"] == "Pod":
                out[(group, None)] = obj["spec"]
            elif obj["kind"] == "LeaderWorkerSet":
                tmpl = obj["spec"]["leaderWorkerTemplate"]
                out[(group, "leader")] = tmpl["leaderTemplate"]["spec"]
                out[(group, "worker")] = tmpl["workerTemplate"]["spec"]
    return out


class PodView:
    """One node's pods, read through the API at each check (``cluster``: a :class:`.k8sapi.Cluster`)."""

    def __init__(self, node: str, pods: list[str], cluster: Any, templates: dict, run_id: str) -> None:
        self.node, self.pods, self.cluster, self.templates, self.run_id = node, pods, cluster, templates, run_id
        self.where = f"{node} ({cluster.where()})"

    def read(self) -> list[dict[str, Any]]:
        """The node's pods as the API server describes them (the API's JSON field names)."""
        from k3lab.launch.targets.k8sapi import ApiException, ApiUnreachable

        out = []
        for name in self.pods:
            try:
                pod = self.cluster.call(f"read pod {name}", self.cluster.core.read_namespaced_pod, name,
                                        self.cluster.namespace)
            except ApiUnreachable as exc:
                raise AssertionError(f"{self.node}: {exc}") from None
            except ApiException as exc:
                if exc.status == 404:
                    raise AssertionError(f"{self.where}: pod {name} does not exist (deleted, or evicted and not "
                                         f"replaced): 'k3lab down {self.run_id}', then bring the run up again") from None
                raise
            out.append(self.cluster.api.sanitize_for_serialization(pod))
        return out

    # ------------------------------------------------------------------ containers.test_container_running
    def check_running(self) -> None:
        problems = [p for pod in self.read() for p in running_problems(pod)]
        if problems:
            raise AssertionError(f"{self.where}: " + "; ".join(problems))

    # ------------------------------------------------------------------ containers.test_container_matches_plan
    def check_matches_plan(self, plan: Plan) -> None:
        node = plan.node(self.node)
        problems = []
        for pod in self.read():
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            want = self.templates.get((labels.get("k3lab.group", ""), labels.get("k3lab.pod")))
            name = meta.get("name", "?")
            if want is None:
                problems.append(f"pod {name} matches no pod of the run's manifests (rendered/k8s/): created by hand?")
                continue
            if labels.get("k3lab.run") != self.run_id:
                problems.append(f"pod {name} has label k3lab.run={labels.get('k3lab.run')}, expected {self.run_id}")
            problems += [f"pod {name}: {p}" for p in spec_problems(pod.get("spec") or {}, want, node)]
        if problems:
            raise AssertionError(f"{self.where}: " + "; ".join(problems)
                                 + ": apply the run's manifests only through k3lab up (or rendered/k8s/ as they are)")


def running_problems(pod: dict[str, Any]) -> list[str]:
    """What keeps a pod from running as planned: its phase, and each container's state, readiness, restarts."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    phase = status.get("phase", "Unknown")
    out = []
    if phase != "Running":
        why = ": ".join(filter(None, (status.get("reason"), status.get("message"))))
        out.append(f"pod {name} is {phase}, expected Running" + (f" ({why})" if why else ""))
    statuses = status.get("containerStatuses") or []
    if not statuses:
        out.append(f"pod {name} has no container status ('kubectl describe pod {name}' shows its events)")
    for cs in statuses:
        out += container_problems(name, cs)
    return out


def container_problems(pod: str, cs: dict[str, Any]) -> list[str]:
    who = f"container {cs.get('name', '?')} of pod {pod}"
    out = [f"{who} {why}" for why in [_state_problem(cs)] if why]
    restarts = cs.get("restartCount") or 0
    if restarts:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        before = f" (last: {last.get('reason') or 'exited'}, exit code {last.get('exitCode')})" if last else ""
        out.append(f"{who} restarted {restarts} time(s){before}; 'kubectl logs --previous' on the pod says why")
    return out


def _state_problem(cs: dict[str, Any]) -> str | None:
    """Why a container is not running and Ready (None when it is)."""
    state = cs.get("state") or {}
    if "waiting" in state:
        waiting = state["waiting"] or {}
        reason = waiting.get("reason") or "waiting"
        message = (waiting.get("message") or "").splitlines()
        remedy = WAITING_REMEDY.get(reason, "'kubectl describe pod' shows why")
        return f"is waiting: {reason}" + (f" ({message[0]})" if message else "") + f"; {remedy}"
    if "terminated" in state:
        t = state["terminated"] or {}
        return f"terminated: {t.get('reason') or 'exited'}, exit code {t.get('exitCode')}; 'kubectl logs' on the pod says why"
    if not cs.get("ready"):
        return "runs but is not Ready (its readiness probe, the stage's gate, fails)"
    return None


def spec_problems(spec: dict[str, Any], want: dict[str, Any], node: NodePlan) -> list[str]:
    """The live pod spec against the rendered one and the plan: image, command, environment, shm, host
    network, NPU limit."""
    c, w = _container(spec), _container(want)
    out = []
    if c.get("image") != node.container.image:
        out.append(f"image {c.get('image')}, planned {node.container.image}")
    for field in ("command", "args"):
        if c.get(field) != w.get(field):
            out.append(f"{field} {c.get(field)}, rendered {w.get(field)}")
    out += env_problems(c.get("env") or [], w.get("env") or [])
    out += shm_problems(spec, c, want, w)
    host = node.container.network_mode == "host"
    if bool(spec.get("hostNetwork")) != host:
        out.append(f"hostNetwork {bool(spec.get('hostNetwork'))}, planned {host} (network {node.container.network_mode})")
    out += _privileges_and_mounts(c, w, node)
    limits = (c.get("resources") or {}).get("limits") or {}
    for res, n in ((w.get("resources") or {}).get("limits") or {}).items():
        if str(limits.get(res)) != str(n):
            out.append(f"{res} limit {limits.get(res, 'none')}, planned {n} (the node's NPUs)")
    return out


def _privileges_and_mounts(c: dict[str, Any], w: dict[str, Any], node: NodePlan) -> list[str]:
    privileged = bool((c.get("securityContext") or {}).get("privileged"))
    out = [] if privileged == node.container.privileged else \
        [f"privileged={privileged}, planned {node.container.privileged}"]
    have = {m.get("mountPath", "").rstrip("/") for m in c.get("volumeMounts") or []}
    missing = [m["mountPath"] for m in w.get("volumeMounts") or [] if m["mountPath"].rstrip("/") not in have
               and m["mountPath"].rstrip("/") != "/dev/shm"]  # /dev/shm: said by the shm check
    return out + ([f"missing mounts {missing}"] if missing else [])


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in spec.get("containers") or [] if c.get("name") == "node"), {})


def _source(var: dict[str, Any]) -> tuple[str, ...]:
    """Where a variable's value comes from, without the value itself (a key's must never be printed)."""
    ref = var.get("valueFrom") or {}
    if "secretKeyRef" in ref:
        return ("Secret", ref["secretKeyRef"].get("name", ""), ref["secretKeyRef"].get("key", ""))
    if "fieldRef" in ref:
        return ("field", ref["fieldRef"].get("fieldPath", ""))
    if ref:
        return (next(iter(ref)),)
    return ("literal",)


def env_problems(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> list[str]:
    have = {v["name"]: v for v in got}
    planned = {v["name"]: v for v in want}
    out = []
    for name in API_KEY_VARS:
        if name in have and _source(have[name]) == ("literal",):
            out.append(f"{name} is a literal value in the pod spec (readable by whoever reads pods): it must "
                       f"come from the run's Secret (secretKeyRef)")
    said = {n for n in API_KEY_VARS if n in have and _source(have[n]) == ("literal",)}
    for name, var in planned.items():
        if name not in have:
            out.append(f"environment lacks {name} (rendered from {' '.join(_source(var))})")
        elif name not in said and _source(have[name]) != _source(var):
            out.append(f"{name} from {' '.join(_source(have[name]))}, rendered from {' '.join(_source(var))}")
    extra = sorted(set(have) - set(planned) - said)
    if extra:
        out.append(f"environment has {', '.join(extra)}, which the render does not set")
    return out


def shm_problems(spec: dict[str, Any], c: dict[str, Any], want: dict[str, Any], w: dict[str, Any]) -> list[str]:
    """/dev/shm: an emptyDir of medium Memory with the rendered sizeLimit (the guides' --shm-size)."""
    from kubernetes.utils import parse_quantity

    size = (_shm(want, w) or {}).get("emptyDir", {}).get("sizeLimit")
    vol = _shm(spec, c)
    if vol is None:
        return [f"/dev/shm is not mounted, planned an emptyDir of medium Memory, {size} (the runtime's default "
                f"is 64 MiB)"]
    if "emptyDir" not in vol:
        kind = next((k for k in vol if k != "name"), "missing")
        return [f"/dev/shm is a {kind} volume, planned an emptyDir of medium Memory, {size}"]
    empty = vol["emptyDir"] or {}
    if empty.get("medium") != "Memory":
        return [f"/dev/shm is an emptyDir of medium {empty.get('medium') or 'default (the node disk)'}, "
                f"planned Memory"]
    got = empty.get("sizeLimit")
    if size is not None and (got is None or parse_quantity(str(got)) != parse_quantity(str(size))):
        return [f"/dev/shm sizeLimit {got or 'none'}, planned {size}"]
    return []


def _shm(spec: dict[str, Any], c: dict[str, Any]) -> dict[str, Any] | None:
    """The volume mounted at /dev/shm ({} when the mount names none), None when nothing is mounted there."""
    mount = next((m for m in c.get("volumeMounts") or [] if m.get("mountPath", "").rstrip("/") == "/dev/shm"), None)
    if mount is None:
        return None
    return next((v for v in spec.get("volumes") or [] if v.get("name") == mount.get("name")), {})
