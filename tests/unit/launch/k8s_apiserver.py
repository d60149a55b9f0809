"""A STAND-IN for a Kubernetes API server, at the HTTP level, for the k8s target's unit tests.

It is not Kubernetes. It answers the REST paths and JSON shapes of the Kubernetes API contract that the
k8s target uses, so the real ``kubernetes`` Python client (its request building, serialisation, label
selectors, ``_request_timeout``, error mapping) is exercised end to end:

- ``GET /version`` (https://kubernetes.io/docs/reference/using-api/health-checks/ and the version endpoint);
- core v1 pods: list by ``labelSelector``, get, ``/log`` (``tailLines``), create, delete one, delete collection
  (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/);
- core v1 configmaps, services, secrets: create, delete one, delete collection
  (https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/config-map-v1/);
- LeaderWorkerSet custom objects under ``/apis/leaderworkerset.x-k8s.io/v1/namespaces/NS/leaderworkersets``
  (https://kubernetes.io/docs/reference/using-api/api-concepts/ for the custom-resource paths; the schema is
  the real CRD of tests/fixtures/k8s, checked as tests/unit/render/test_k8s.py checks it, so an unknown field
  with ``fieldValidation=Strict`` is a 400 as on a real server);
- ``dryRun=All`` validates and stores nothing; errors are ``Status`` objects with the real codes (400, 404, 409)
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run).

What it does NOT do: scheduling, kubelets, containers, watches, RBAC, defaulting, resourceVersion semantics.
Its "controller" turns a LeaderWorkerSet into its leader and worker pods at once (names ``NAME-0`` and
``NAME-0-i`` as the LWS controller names them), placed on the hosts their node affinity lists; a pod's
Ready condition is whatever the test says (``ready``), and so is any other part of its status
(``pod_status``: a waiting reason, restarts, a phase, as a kubelet would report them). Pod exec is a
websocket channel protocol this stand-in does not speak: the tests fake it at the ``kubernetes.stream.stream``
boundary (:func:`fake_stream`).
"""
from __future__ import annotations

import copy
import functools
import json
import subprocess
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import yaml

CRD = Path(__file__).resolve().parents[2] / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_PREFIX = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/"
CORE_PREFIX = "/api/v1/namespaces/"
CORE_KINDS = {"pods": "Pod", "configmaps": "ConfigMap", "services": "Service", "secrets": "Secret"}
NOW = "2026-01-01T00:00:00Z"


@functools.cache
def _lws_validator() -> jsonschema.Draft202012Validator:
    from tests.unit.render.test_k8s import _strict  # the same strict reading of the real CRD's schema

    crd = yaml.safe_load(CRD.read_text())
    return jsonschema.Draft202012Validator(
        _strict(next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]))


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def matches(labels: dict[str, str], selector: str | None) -> bool:
    """Equality-based label selectors (``k=v,k2=v2``, ``k``), as the API documents them."""
    for term in filter(None, (selector or "").split(",")):
        key, eq, value = term.partition("=")
        if (eq and labels.get(key) != value) or (not eq and key not in labels):
            return False
    return True


class StandinApiServer:
    """Objects of one namespace by (plural, name); ``requests`` records (method, path, query) of every call."""

    def __init__(self, namespace: str = "k3lab") -> None:
        self.namespace = namespace
        self.objects: dict[tuple[str, str], dict] = {}
        self.logs: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.ready: Callable[[str], bool] = lambda pod: True
        self.pod_status: dict[str, dict] = {}  # pod -> status fields the test sets (a kubelet's report, faked)
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> StandinApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, path: Path, context: str = "ascend-a3") -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "k3lab", "user": {"token": "standin"}}],
            "contexts": [{"name": context, "context": {"cluster": "standin", "user": "k3lab", "namespace": "k3lab"}}]}))
        return path

    def kinds(self) -> list[tuple[str, str]]:
        return sorted(self.objects)

    # ------------------------------------------------------------------ the API's behaviour
    def pod_view(self, pod: dict) -> dict:
        out = copy.deepcopy(pod)
        ready = self.ready(pod["metadata"]["name"])
        out["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": NOW},
                           {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": NOW,
                            **({} if ready else {"reason": "ContainersNotReady",
                                                 "message": "containers with unready status: [node]"})}],
            "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": ready,
                                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": NOW}}}
                                  for c in pod["spec"]["containers"]]}
        out["status"].update(copy.deepcopy(self.pod_status.get(pod["metadata"]["name"], {})))
        return out

    def store(self, plural: str, obj: dict, owner: dict | None = None) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.update(namespace=self.namespace, uid=str(uuid.uuid4()), resourceVersion="1", creationTimestamp=NOW)
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "controller": True,
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
        if plural == "pods":
            hosts = obj["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
            obj["spec"]["nodeName"] = hosts[meta.pop("_host_index", 0) % len(hosts)]
        self.objects[(plural, meta["name"])] = obj
        return obj

    def lws_pods(self, lws: dict) -> None:
        """What the LWS controller makes of one replica: the leader NAME-0 and workers NAME-0-1.. NAME-0-(size-1)."""
        name, tmpl = lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]
        for i in range(tmpl["size"]):
            t = tmpl["leaderTemplate"] if i == 0 else tmpl["workerTemplate"]
            labels = {**t["metadata"]["labels"], "leaderworkerset.sigs.k8s.io/name": name}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{name}-0" if i == 0 else f"{name}-0-{i}", "labels": labels,
                                "_host_index": max(i - 1, 0)},
                   "spec": copy.deepcopy(t["spec"])}
            self.store("pods", pod, owner=lws)

    def delete(self, plural: str, name: str) -> dict | None:
        obj = self.objects.pop((plural, name), None)
        if obj is not None and plural == "leaderworkersets":  # dependents go with their owner
            uid = obj["metadata"]["uid"]
            for key, o in list(self.objects.items()):
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", [])):
                    self.objects.pop(key)
        return obj


def _handler(api: StandinApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any, text: bool = False) -> None:
            data = body.encode() if text else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[str | None, str | None, str | None, dict[str, list[str]]]:
            """(plural, name, subresource, query) of a namespaced path; (None, ...) for anything else."""
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            api.requests.append((self.command, url.path, query))
            for prefix in (CORE_PREFIX, LWS_PREFIX):
                if url.path.startswith(prefix):
                    parts = url.path[len(prefix):].split("/")
                    if parts[0] != api.namespace:
                        return None, None, None, query
                    parts += [None, None, None]  # type: ignore[list-item]
                    plural, name, sub = parts[1], parts[2], parts[3]
                    known = plural in CORE_KINDS if prefix == CORE_PREFIX else plural == "leaderworkersets"
                    return (plural if known else None), name, sub, query
            return None, None, None, query

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/version":
                api.requests.append(("GET", "/version", {}))
                return self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-standin",
                                        "platform": "linux/amd64"})
            plural, name, sub, query = self._route()
            if plural is None:
                return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
            with api.lock:
                if name is None:
                    sel = (query.get("labelSelector") or [None])[0]
                    items = [api.pod_view(o) if p == "pods" else o for (p, _), o in sorted(api.objects.items())
                             if p == plural and matches(o["metadata"].get("labels", {}), sel)]
                    kind = CORE_KINDS.get(plural, "LeaderWorkerSet")
                    return self._send(200, {"kind": f"{kind}List", "apiVersion": "v1" if plural in CORE_KINDS
                                            else "leaderworkerset.x-k8s.io/v1", "metadata": {"resourceVersion": "1"},
                                            "items": items})
                obj = api.objects.get((plural, name))
                if obj is None:
                    return self._send(404, status(404, "NotFound", f'{plural} "{name}" not found'))
                if sub == "log":
                    lines = api.logs.get(name, "").splitlines(keepends=True)
                    tail = int((query.get("tailLines") or ["0"])[0])
                    return self._send(200, "".join(lines[-tail:] if tail else lines), text=True)
                return self._send(200, api.pod_view(obj) if plural == "pods" else obj)

        def do_POST(self) -> None:  # noqa: N802
            plural, name, _, query = self._route()
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if plural is None or name is not None:
                return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
            if plural == "leaderworkersets" and query.get("fieldValidation") == ["Strict"]:
                errors = sorted(_lws_validator().iter_errors(body), key=str)
                if errors:
                    path = ".".join(str(p) for p in errors[0].absolute_path)
                    return self._send(400, status(400, "BadRequest", f".{path}: {errors[0].message}"))
            key = (plural, body["metadata"]["name"])
            with api.lock:
                if key in api.objects:
                    return self._send(409, status(409, "AlreadyExists", f'{plural} "{key[1]}" already exists'))
                if query.get("dryRun") == ["All"]:
                    return self._send(201, body)
                stored = api.store(plural, body)
                if plural == "leaderworkersets":
                    api.lws_pods(stored)
            return self._send(201, api.pod_view(stored) if plural == "pods" else stored)

        def do_DELETE(self) -> None:  # noqa: N802
            plural, name, _, query = self._route()
            if plural is None:
                return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))
            with api.lock:
                if name is not None:
                    gone = api.delete(plural, name)
                    if gone is None:
                        return self._send(404, status(404, "NotFound", f'{plural} "{name}" not found'))
                    return self._send(200, gone)
                sel = (query.get("labelSelector") or [None])[0]
                names = [n for (p, n), o in sorted(api.objects.items())
                         if p == plural and matches(o["metadata"].get("labels", {}), sel)]
                items = [api.delete(plural, n) for n in names]
            return self._send(200, {"kind": "Status" if plural in CORE_KINDS else "LeaderWorkerSetList",
                                    "apiVersion": "v1", "metadata": {}, "status": "Success", "items": items})

    return Handler


# ------------------------------------------------------------------------- exec, faked at the stream boundary
class FakeExec:
    """What ``kubernetes.stream.stream(..., _preload_content=False)`` returns (a WSClient), for a command
    that ran on the test host instead of in a pod: stdout, stderr and the exit code of the error channel."""

    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.done = done

    def run_forever(self, timeout: float | None = None) -> None:
        pass

    def read_stdout(self) -> str:
        return self.done.stdout

    def read_stderr(self) -> str:
        return self.done.stderr

    def is_open(self) -> bool:
        return False

    @property
    def returncode(self) -> int:
        return self.done.returncode

    def close(self) -> None:
        pass


def fake_stream(api: StandinApiServer, calls: list[tuple[str, list[str]]]) -> Callable[..., FakeExec]:
    """A stand-in for ``kubernetes.stream.stream``: refuses a pod the API server does not have (404, as the
    real exec does), records (pod, command) and runs the command on the test host."""
    from kubernetes.client.exceptions import ApiException

    def stream(fn: Callable, name: str, namespace: str, command: list[str], **kwargs: Any) -> FakeExec:
        assert fn.__name__ == "connect_get_namespaced_pod_exec" and kwargs.get("_request_timeout")
        if ("pods", name) not in api.objects or namespace != api.namespace:
            raise ApiException(status=404, reason="Not Found")
        calls.append((name, list(command)))
        return FakeExec(subprocess.run(command, capture_output=True, text=True, timeout=60,
                                       stdin=subprocess.DEVNULL))

    return stream
