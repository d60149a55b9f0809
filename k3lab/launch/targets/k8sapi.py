"""The k8s target's calls to the Kubernetes API, through the official ``kubernetes`` client (the ``k8s`` extra).

Imported only by :mod:`k3lab.launch.targets.k8s` when a run needs the cluster, so the kit loads without the
extra. Every call carries a deadline (``_request_timeout``); one the API server does not answer raises
:class:`ApiUnreachable` naming the kubeconfig context and the server, as the lab target names a host. An
answer that says no (an :class:`~kubernetes.client.exceptions.ApiException`) is an answer, not unreachability.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from k3lab.launch.endpoints import CommandResult, HostUnreachable, reason

__all__ = ["ApiException", "ApiUnreachable", "Cluster", "Ref", "Refused"]
T = TypeVar("T")
RUN_LABEL = "k3lab.run"  # the label every object of a run carries (the render's, the containers' on sim/lab)
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")  # group, version, plural
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # the label the LWS controller puts on a set's pods
# core kinds the render may make: kind -> (create, delete one, delete by label, list) of CoreV1Api
CORE = {"ConfigMap": "config_map", "Pod": "pod", "Service": "service", "Secret": "secret"}


def removed(counts: dict[str, int], run_id: str) -> str:
    """``4 pod(s), 1 LeaderWorkerSet(s), 1 ConfigMap(s) labelled k3lab.run=RUN``: what a sweep removed."""
    kinds = ", ".join(f"{n} {kind}(s)" for kind, n in counts.items() if n)
    return f"{kinds or 'nothing'} labelled {RUN_LABEL}={run_id}"


class ApiUnreachable(HostUnreachable):
    """The cluster's API server did not answer in time (exit 3), named by context and server."""


class Refused(ApiException):
    """The API server refused a create (an unknown field, a wrong type, an unserved kind): one line naming the
    object, the server and the server's own message. Still an :class:`ApiException` (``status``, ``body``), but
    not the client's text, which is the response's headers and JSON body over several lines."""

    def __init__(self, exc: ApiException, what: str, where: str) -> None:
        super().__init__(status=exc.status, reason=exc.reason)
        self.body, self.headers = exc.body, exc.headers
        self.line = f"the Kubernetes API ({where}) refuses {what}: {exc.status} {message(exc)}"

    def __str__(self) -> str:
        return self.line


def message(exc: ApiException) -> str:
    """The server's message from an answer's Status body (the reason phrase when there is none)."""
    try:
        return str(json.loads(exc.body or "").get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


@dataclass(frozen=True)
class Ref:
    """One object a run created: enough to delete it."""

    kind: str
    name: str


class Cluster:
    """One kubeconfig context and namespace; every call bounded by ``timeout`` seconds."""

    def __init__(self, kubeconfig: Path, context: str, namespace: str, timeout: float = 20.0) -> None:
        self.context, self.namespace, self.timeout = context, namespace, timeout
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=cfg)
        cfg.retries = 1  # a refused connection is named at once, not after urllib3's default three retries
        self.server = cfg.host
        self.api = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def where(self) -> str:
        return f"context {self.context}, server {self.server}"

    def call(self, what: str, fn: Callable[..., T], *args: Any, timeout: float | None = None, **kwargs: Any) -> T:
        """``fn(*args, **kwargs, _request_timeout=...)``; no answer in time raises :class:`ApiUnreachable`."""
        try:
            return fn(*args, _request_timeout=timeout or self.timeout, **kwargs)
        except ApiException:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiUnreachable(f"the Kubernetes API ({self.where()}) does not answer {what}: {reason(exc)}") from None

    # ------------------------------------------------------------------ questions
    def version(self, timeout: float) -> str:
        """``GET /version``, the path kubectl and client-go ask. Not ``VersionApi.get_code``: it asks
        ``/version/``, which the Kubernetes apiserver library answers with 404 (the real server of tests/k8sapi)."""
        def get(_request_timeout: float) -> Any:
            req = self.api.param_serialize("GET", "/version", header_params={"Accept": "application/json"},
                                           auth_settings=["BearerToken"])
            resp = self.api.call_api(*req, _request_timeout=_request_timeout)
            resp.read()
            return self.api.response_deserialize(resp, {"200": "VersionInfo"}).data

        return str(self.call("GET /version", get, timeout=timeout).git_version)

    def pods(self, selector: str) -> list[Any]:
        return list(self.call("list pods", self.core.list_namespaced_pod, self.namespace,
                              label_selector=selector).items)

    def log(self, pod: str, tail: int | None = None) -> str:
        kwargs = {"tail_lines": tail} if tail else {}
        return str(self.call(f"log of pod {pod}", self.core.read_namespaced_pod_log, pod, self.namespace, **kwargs))

    def exec(self, pod: str, cmd: list[str], node: str, env: dict[str, str] | None = None,
             timeout: float = 30) -> CommandResult:
        """``cmd`` in the pod's container through the exec subresource (a websocket); the exit code from its
        error channel. The environment is passed as ``env NAME=VALUE ...`` (exec has no environment of its own)."""
        argv = ["env", *(f"{k}={v}" for k, v in (env or {}).items()), *cmd] if env else cmd
        try:
            ws = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, command=argv,
                        stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
                        _request_timeout=timeout)
        except ApiException:
            raise
        except (urllib3.exceptions.HTTPError, OSError, ConnectionError) as exc:
            raise ApiUnreachable(f"the Kubernetes API ({self.where()}) does not answer exec in pod {pod}: "
                                 f"{reason(exc)}") from None
        try:
            ws.run_forever(timeout=timeout)
            out, err = ws.read_stdout(), ws.read_stderr()
            rc = ws.returncode if not ws.is_open() else 124  # still open: the deadline passed (timeout's 124)
        finally:
            ws.close()
        return CommandResult(" ".join(cmd), rc if rc is not None else 124, out or "", err or "", node)

    # ------------------------------------------------------------------ creating and deleting
    def create(self, obj: dict[str, Any], dry_run: bool = False) -> Ref:
        """One rendered object, strictly validated (an unknown field is refused, not dropped)."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        try:
            if kind == "LeaderWorkerSet":
                self.call(f"create {kind} {name}", self.custom.create_namespaced_custom_object, *LWS[:2],
                          self.namespace, LWS[2], obj, field_validation="Strict", **extra)
            elif kind in CORE:
                fn = getattr(self.core, f"create_namespaced_{CORE[kind]}")
                self.call(f"create {kind} {name}", fn, self.namespace, obj, field_validation="Strict", **extra)
            else:
                raise ValueError(f"the k8s target does not create {kind} objects ({name})")
        except ApiException as exc:
            raise Refused(exc, f"{'a dry run of ' if dry_run else ''}{kind} {name}", self.where()) from None
        return Ref(kind, name)

    def delete(self, ref: Ref) -> dict[str, int]:
        """One object, its dependents in the background; one that is gone already is fine. What went, per kind
        (a LeaderWorkerSet's pods, counted by the label its controller gives them, go with it)."""
        gone = {ref.kind: 1}
        try:
            if ref.kind == "LeaderWorkerSet":
                pods = self._served("list pods", self.core.list_namespaced_pod, f"{LWS_NAME_LABEL}={ref.name}")
                self.call(f"delete {ref.kind} {ref.name}", self.custom.delete_namespaced_custom_object, *LWS[:2],
                          self.namespace, LWS[2], ref.name, propagation_policy="Foreground")
                gone = {"Pod": _live(pods), **gone}
            else:
                fn = getattr(self.core, f"delete_namespaced_{CORE[ref.kind]}")
                self.call(f"delete {ref.kind} {ref.name}", fn, ref.name, self.namespace,
                          propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
            return {}
        return gone

    def delete_run(self, run_id: str, deadline: float) -> dict[str, int]:
        """Everything labelled with the run: the LeaderWorkerSets (their pods go with them, Foreground), then
        the pods, services, config maps and secrets; waits until no pod of the run is left. Per kind, how many
        it deleted: counted from lists first (the client reads a delete-collection answer as a Status, without
        items), the pods before the LeaderWorkerSets take theirs, and none already being deleted (a
        Foreground deletion keeps an object listed until its dependents are gone: counted by its deleter)."""
        selector = f"{RUN_LABEL}={run_id}"
        listed = self.call("list LeaderWorkerSets", self.custom.list_namespaced_custom_object, *LWS[:2],
                           self.namespace, LWS[2], label_selector=selector)
        items = listed.get("items", []) if isinstance(listed, dict) else []
        counts = {"Pod": _live(self._served("list pods", self.core.list_namespaced_pod, selector))}
        counts["LeaderWorkerSet"] = sum(not (o.get("metadata") or {}).get("deletionTimestamp") for o in items)
        if items:
            self.call("delete LeaderWorkerSets", self.custom.delete_collection_namespaced_custom_object, *LWS[:2],
                      self.namespace, LWS[2], label_selector=selector, propagation_policy="Foreground")
        for kind in ("Pod", "Service", "ConfigMap", "Secret"):
            plural = CORE[kind]
            there = self._served(f"list {plural}s", getattr(self.core, f"list_namespaced_{plural}"), selector)
            if kind != "Pod":
                counts[kind] = _live(there)
            if there:
                self.call(f"delete {plural}s", getattr(self.core, f"delete_collection_namespaced_{plural}"),
                          self.namespace, label_selector=selector, propagation_policy="Background")
        self.wait_gone(selector, deadline)
        return counts

    def _served(self, what: str, fn: Callable[..., Any], selector: str) -> list[Any]:
        """The objects ``fn`` lists; none where the server does not serve the kind (a 404 on the collection:
        an API server with CustomResourceDefinitions only, tests/k8sapi), so the sweep still removes the rest."""
        try:
            return list(self.call(what, fn, self.namespace, label_selector=selector).items)
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise

    def wait_gone(self, selector: str, deadline: float) -> None:
        end = time.monotonic() + deadline
        while True:
            left = self._served("list pods", self.core.list_namespaced_pod, selector)
            if not left:
                return
            if time.monotonic() >= end:
                names = ", ".join(p.metadata.name for p in left)
                raise TimeoutError(f"pods still there {deadline:g} s after their deletion ({self.where()}): {names}")
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))


def _live(objs: list[Any]) -> int:
    """How many of the listed objects are not being deleted already."""
    return sum(o.metadata is None or o.metadata.deletion_timestamp is None for o in objs)
