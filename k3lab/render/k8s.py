"""The k8s target's manifests: the plan's nodes as pods, for ``kubectl apply -f OUT/k8s/``.

One LeaderWorkerSet per engine role group (``mixed``, or ``prefill`` and ``decode``): size = the group's
nodes, the leader pinned to the group's head (rank 0) and the workers to the group's other hosts, one pod
per host. MetaService and proxy run in plain pods of their own, pinned to their node's host. Every pod uses
host networking, so the per-node scripts are the lab's, byte for byte: a ConfigMap carries every node's
files and one entry script (``_entry.sh``) that finds the pod's node by the Kubernetes node it runs on
(``spec.nodeName``), stages that node's files where the plan puts them and starts its processes in the
plan's order (a provider's log gate awaited before its engine), as ``k3lab up`` does on a lab.

Readiness probes are the plan's gates: the leader's is its head gate (the PP master or DP RPC port accepts
connections), so ``startupPolicy: LeaderReady`` starts the workers after the heads, as the guides order
them; a worker's is its engine's ``/health``; MetaService's its meta_service port; the proxy's its
``/healthcheck``. The shape follows vllm-ascend's nightly ``lws.yaml.jinja2`` (restartPolicy None, the NPU
resource per pod, an in-memory ``/dev/shm``, the weights volume at ``/root/.cache``).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from k3lab.model.inventory import K8S_SUBDOMAIN_RE, Inventory, InventoryError, K8s
from k3lab.model.plan import Container, Gate, NodePlan, Plan, Process

DIR = "k8s"  # OUT/k8s/
FILES_AT = "/k3lab/files"  # where every pod sees the ConfigMap
ENTRY = "_entry.sh"  # its key: node names start with a letter or digit, so no node file collides
CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data
LWS_API = "leaderworkerset.x-k8s.io/v1"
ENGINE_KINDS = ("provider", "engine", "launcher")
HOSTNAME = "kubernetes.io/hostname"
_KEY_RE = re.compile(r"[-._a-zA-Z0-9]+")
API_KEY = "VLLM_API_KEY"  # the Secret's key; the engines read it under this name, the proxy as OPENAI_API_KEY
ENGINE_KEY_VAR, PROXY_KEY_VAR = API_KEY, "OPENAI_API_KEY"  # the variables the pods read the Secret into


@dataclass(frozen=True)
class Manifests:
    files: dict[str, str]  # file name under OUT/k8s/ -> YAML text, in the order to apply them
    runbook: str  # the RUNBOOK's Kubernetes section


def render(plan: Plan, files: dict[str, dict[str, str]], inv: Inventory, run_label: str | None = None) -> Manifests:
    if inv.k8s is None:
        raise InventoryError("k8s: --target k8s needs the inventory's k8s section (context, namespace, weights; "
                             "k3lab schema shows its fields)")
    m = _Manifests(plan, inv, inv.k8s, run_label)
    docs: dict[str, list[dict]] = {"00-files.yaml": [m.configmap(files)]}
    meta = [p for p in plan.processes() if p.kind == "metaservice"]
    if meta:
        docs["10-metaservice.yaml"] = [m.pod("metaservice", plan.node(meta[0].node), ["metaservice"], meta[0])]
    for i, (role, nodes) in enumerate(m.groups().items()):
        docs[f"{20 + i}-{role}.yaml"] = [m.lws(role, nodes)]
    proxy = [p for p in plan.processes() if p.kind == "proxy"]
    if proxy:
        docs["90-proxy.yaml"] = [m.pod("proxy", plan.node(proxy[0].node), ["proxy"], proxy[0])]
    return Manifests({name: dump(objs) for name, objs in docs.items()}, m.runbook(docs))


def dump(objs: list[dict]) -> str:
    import yaml  # render only

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        # scripts as literal blocks (readable with kubectl get -o yaml too); PyYAML quotes what a block cannot hold
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    _Dumper.add_representer(str, _str)
    return yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)


class _Manifests:
    def __init__(self, plan: Plan, inv: Inventory, k8s: K8s, run_label: str | None):
        self.plan, self.inv, self.k8s = plan, inv, k8s
        self.base = "k3lab-" + plan.scenario.replace("_", "-")
        self.labels = _labels(plan, run_label)
        self.hosts = {n.name: self._host(n.name) for n in plan.nodes}
        self.stage_of = {pid: s for s in plan.stages for pid in s.processes}

    def _host(self, node: str) -> str:
        host = self.k8s.node_name(node)
        if not re.fullmatch(K8S_SUBDOMAIN_RE, host):
            raise InventoryError(f"k8s.node_names.{node}: node {node!r} needs its Kubernetes node name here "
                                 f"({host!r} is not one: lower-case letters, digits, '-' and '.')")
        return host

    def groups(self) -> dict[str, list[NodePlan]]:
        """Engine role groups in the plan's order (mixed; or prefill, decode), each by rank."""
        out: dict[str, list[NodePlan]] = {}
        for n in self.plan.nodes:
            if any(p.kind in ("engine", "launcher") for p in n.processes):
                out.setdefault(n.role, []).append(n)
        return {role: sorted(nodes, key=lambda n: n.rank) for role, nodes in out.items()}

    def meta(self, name: str, group: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.k8s.namespace, "labels": {**self.labels, "k3lab.group": group}}

    # ---- the ConfigMap: every node's files and the entry script
    def configmap(self, files: dict[str, dict[str, str]]) -> dict[str, Any]:
        data = {ENTRY: self.entry()}
        for node in self.plan.nodes:
            for a in node.artefacts:
                if a.path.startswith("/"):  # docker_run.sh ("(host)"): the pod replaces it
                    key = f"{node.name}.{a.name}"
                    if not _KEY_RE.fullmatch(key):
                        raise InventoryError(f"nodes.{node.name}.name: {key!r} cannot be a ConfigMap key")
                    data[key] = files[node.name][a.name]
        size = sum(len(k) + len(v.encode()) for k, v in data.items())
        if size > CONFIGMAP_LIMIT:
            raise InventoryError(f"the nodes' scripts ({size} bytes) exceed a ConfigMap's {CONFIGMAP_LIMIT} bytes")
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self.meta(f"{self.base}-files", "files"),
                "data": data}

    def entry(self) -> str:
        q = shlex.quote
        lines = [
            "#!/usr/bin/env bash",
            "# k3lab, k8s target: find this pod's node by its Kubernetes node, stage the node's files where the",
            "# plan puts them, start the processes of the kinds given as arguments in the plan's order.",
            "set -euo pipefail",
            'kinds=" $* "',
            'case "${K3_K8S_NODE:?set from spec.nodeName}" in',
            *(f"  {q(host)}) node={q(node)} ;;" for node, host in self.hosts.items()),
            '  *) echo "k3lab: Kubernetes node $K3_K8S_NODE is none of the inventory'"'"'s" >&2; exit 1 ;;',
            "esac",
            f'stage() {{ install -D -m "$3" {FILES_AT}/"$node.$1" "$2"; }}',
            "logs=()",
            'start() {  # KIND SCRIPT CWD LOG, as k3lab up starts a process (bash SCRIPT >> LOG)',
            '  case "$kinds" in *" $1 "*) ;; *) return 0 ;; esac',
            '  mkdir -p "$3" "$(dirname -- "$4")"',
            '  (cd "$3" && exec bash "$2") >> "$4" 2>&1 &',
            '  logs+=("$4"); echo "k3lab: $node: started $1: $2 (log $4)"',
            "}",
            'await_log() {  # KIND LOG TEXT SECONDS: the plan\'s log gate',
            '  case "$kinds" in *" $1 "*) ;; *) return 0 ;; esac',
            '  for _ in $(seq "$4"); do grep -qF -- "$3" "$2" 2>/dev/null && return 0; sleep 1; done',
            '  echo "k3lab: $node: no \'$3\' in $2 after $4 s" >&2; exit 1',
            "}",
            'case "$node" in',
        ]
        for node in self.plan.nodes:
            lines += [f"  {q(node.name)})", *(f"    {c}" for c in self._node_steps(node)), "    ;;"]
        lines += [
            "esac",
            '[ "${#logs[@]}" -gt 0 ] || { echo "k3lab: $node runs none of:$kinds" >&2; exit 1; }',
            'tail -n +1 -F "${logs[@]}" &  # kubectl logs shows the processes\' logs',
            "wait -n  # the pod's container ends when one of its processes does",
        ]
        return "\n".join(lines) + "\n"

    def _node_steps(self, node: NodePlan) -> list[str]:
        q = shlex.quote
        out = [f"stage {q(a.name)} {q(a.path)} {a.mode:04o}" for a in node.artefacts if a.path.startswith("/")]
        order = {pid: i for i, s in enumerate(self.plan.stages) for pid in s.processes}
        for p in sorted(node.processes, key=lambda p: order.get(p.id, len(order))):
            out.append(f"start {p.kind} {q(p.script or '')} {q(p.cwd)} {q(p.log)}")
            stage = self.stage_of.get(p.id)
            if stage is None:
                continue
            for g in stage.gates:
                if g.kind == "log" and g.process == p.id:
                    out.append(f"await_log {p.kind} {q(p.log)} {q(g.target)} {int(stage.timeout_s)}")
        return out

    # ---- pods
    def pod(self, group: str, node: NodePlan, kinds: list[str], proc: Process) -> dict[str, Any]:
        gate = next((g for s in self.plan.stages for g in s.gates if g.process == proc.id and g.kind != "log"), None)
        spec = self.pod_spec(node.container, kinds, [self.hosts[node.name]], _probe(gate, node.address), npus=0)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": self.meta(f"{self.base}-{group}", group), "spec": spec}

    def lws(self, role: str, nodes: list[NodePlan]) -> dict[str, Any]:
        head, workers = nodes[0], nodes[1:]
        kinds = list(ENGINE_KINDS)
        head_gate = self._gate("heads", head)
        leader = self.pod_spec(head.container, kinds, [self.hosts[head.name]], _probe(head_gate, head.address),
                               npus=head.device_count)
        worker = self.pod_spec(head.container, kinds, [self.hosts[n.name] for n in workers] or [self.hosts[head.name]],
                               self._worker_probe(workers), npus=head.device_count, spread=f"{self.base}-{role}")
        labels = {**self.labels, "k3lab.group": role}
        return {
            "apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": self.meta(f"{self.base}-{role}", role),
            "spec": {"replicas": 1, "startupPolicy": "LeaderReady", "leaderWorkerTemplate": {
                "size": len(nodes), "restartPolicy": "None",
                "leaderTemplate": {"metadata": {"labels": {**labels, "k3lab.pod": "leader"}}, "spec": leader},
                "workerTemplate": {"metadata": {"labels": {**labels, "k3lab.pod": "worker"}}, "spec": worker}}}}

    def _gate(self, stage: str, node: NodePlan, path: str = "") -> Gate | None:
        return next((g for s in self.plan.stages if s.name == stage for g in s.gates
                     if g.node == node.name and g.target.endswith(path)), None)

    def _worker_probe(self, workers: list[NodePlan]) -> dict[str, Any] | None:
        """The workers' /health gate, when every worker has it on one port (a template serves them all);
        headless PP stages have none: Ready once running. The probe reaches the pod's (host's) address."""
        probes = [_probe(self._gate("workers", n, "/health"), None) for n in workers]
        return probes[0] if probes and all(p == probes[0] for p in probes) else None

    def pod_spec(self, c: Container, kinds: list[str], hosts: list[str], probe: dict[str, Any] | None, npus: int,
                 spread: str | None = None) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "node", "image": c.image, "imagePullPolicy": "IfNotPresent",
            # bash -i: the guide's interactive shell (~/.bashrc, set_env.sh), as k3lab up's shell parity gives
            "command": ["bash", "-ic", f"exec bash {FILES_AT}/{ENTRY} {' '.join(kinds)}"],
            "env": [{"name": "K3_K8S_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    *self._api_key_env(kinds)],
            "securityContext": {"privileged": c.privileged},
            "volumeMounts": self._mounts(c)}
        if npus:
            container["resources"] = {"limits": {self.k8s.npu_resource: str(npus)},
                                      "requests": {self.k8s.npu_resource: str(npus)}}
        if probe:
            container["readinessProbe"] = probe
        spec: dict[str, Any] = {
            "hostNetwork": c.network_mode == "host", "dnsPolicy": "ClusterFirstWithHostNet",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": hosts}]}]}}},
            "containers": [container], "volumes": self._volumes(c)}
        if spread:  # one worker per host
            spec["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": spread}},
                 "topologyKey": HOSTNAME}]}
        if self.k8s.node_selector:
            spec["nodeSelector"] = dict(self.k8s.node_selector)
        return spec

    def _api_key_env(self, kinds: list[str]) -> list[dict[str, Any]]:
        """The API key from the run's Secret, as ``k3lab up`` passes it on a lab: ``VLLM_API_KEY`` to the
        engines, ``OPENAI_API_KEY`` to the proxy. Optional: the guides ship without a key, and a pod whose
        Secret is absent starts without the variable (an open API, as ``docker run`` without ``-e``), where a
        required reference would leave it in CreateContainerConfigError."""
        names = ([ENGINE_KEY_VAR] if any(k in ENGINE_KINDS for k in kinds) else []) + \
                ([PROXY_KEY_VAR] if "proxy" in kinds else [])
        return [{"name": n, "valueFrom": {"secretKeyRef": {"name": secret_name(self.plan), "key": API_KEY,
                                                          "optional": True}}} for n in names]

    def _host_mounts(self, c: Container) -> list[tuple[str, str, bool]]:
        """The container's -v mounts but /root/.cache, which the weights volume replaces."""
        return [(m.source, m.target, m.read_only) for m in c.mounts if m.target.rstrip("/") != "/root/.cache"]

    def _mounts(self, c: Container) -> list[dict[str, Any]]:
        w = self.k8s.weights
        out: list[dict[str, Any]] = [{"name": "k3lab-files", "mountPath": FILES_AT, "readOnly": True},
                                     {"name": "dshm", "mountPath": "/dev/shm"},
                                     {"name": "weights", "mountPath": w.mount_path, "readOnly": w.read_only}]
        for i, (_, target, ro) in enumerate(self._host_mounts(c)):
            out.append({"name": f"host-{i}", "mountPath": target, "readOnly": ro})
        return out

    def _volumes(self, c: Container) -> list[dict[str, Any]]:
        w = self.k8s.weights
        weights: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": w.claim, "readOnly": w.read_only}}
                                   if w.claim else {"hostPath": {"path": w.host_path, "type": "Directory"}})
        out: list[dict[str, Any]] = [
            {"name": "k3lab-files", "configMap": {"name": f"{self.base}-files", "defaultMode": 0o555}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": self.k8s.shm_size or _gi(c.shm_size)}},
            {"name": "weights", **weights}]
        for i, (source, _, _) in enumerate(self._host_mounts(c)):
            out.append({"name": f"host-{i}", "hostPath": {"path": source}})
        return out

    # ---- the RUNBOOK's section
    def runbook(self, docs: dict[str, list[dict]]) -> str:
        k = self.k8s
        kc = f"kubectl --context {shlex.quote(k.context)} -n {k.namespace}"
        lines = ["", "## Kubernetes: `kubectl apply -f k8s/`", "",
                 "The pods replace step 1's `docker run` and the start commands: each pod stages its node's files "
                 "from the ConfigMap and starts its processes in the order above; step 0 still applies to every "
                 "host. Apply one file at a time, in this order, and wait for what it made to be ready (the "
                 "pods' readiness probes are the stages' gates; a LeaderWorkerSet starts its workers once its "
                 "leader, the group's head, is Ready, and is Available once its group is).", "",
                 "If the deployment requires an API key, create its Secret first, from your shell (no file holds "
                 "it; the pods read it as `VLLM_API_KEY`, the proxy as `OPENAI_API_KEY`; without the Secret "
                 "they start without a key):", "", "```",
                 f'{kc} create secret generic {secret_name(self.plan)} --from-literal={API_KEY}="$VLLM_API_KEY"',
                 f"{kc} label secret {secret_name(self.plan)} "
                 + " ".join(f"{k}={v}" for k, v in {**self.labels, "k3lab.group": "api-key"}.items()),
                 "```", "", "Then the manifests, in order:", "", "```"]
        timeouts = {s.name: int(s.timeout_s) for s in self.plan.stages}
        for name, objs in docs.items():
            lines.append(f"{kc} apply -f k8s/{name}")
            for obj in objs:
                group, what = obj["metadata"]["labels"]["k3lab.group"], obj["metadata"]["name"]
                if obj["kind"] == "Pod":
                    lines.append(f"{kc} wait --for=condition=Ready pod/{what} --timeout={timeouts.get(group, 300)}s")
                elif obj["kind"] == "LeaderWorkerSet":
                    lines.append(f"{kc} wait --for=condition=Available leaderworkerset/{what} "
                                 f"--timeout={timeouts.get('heads', 0) + timeouts.get('workers', 0)}s")
        lines += ["```", "", "Then check the gates of the stages above that no probe covers (every engine's "
                  "`/health` and `/v1/models`, the proxy's instance counts) with their commands (with "
                  "`-H \"Authorization: Bearer $VLLM_API_KEY\"` on `/v1/` when there is a key). To remove "
                  "everything:", "", "```", f"{kc} delete -f k8s/",
                  f"{kc} delete secret {secret_name(self.plan)} --ignore-not-found", "```", "",
                  f"`k3lab up` / `k3lab cycle --target k8s -i INVENTORY` do the same through the Kubernetes API "
                  f"(the `[k8s]` extra, context `{k.context}`): a server-side dry run of every object first, then "
                  "the objects labelled with the run (the Secret too when `K3LAB_API_KEY` is set), the pods awaited Ready, the gates checked, and everything "
                  "with the run's label deleted at the end (`k3lab down RUN` if it was kept)."]
        return "\n".join(lines) + "\n"


def secret_name(plan: Plan) -> str:
    return f"k3lab-{plan.scenario.replace('_', '-')}-api-key"


def api_key_secret(plan: Plan, k8s: K8s, run_label: str, value: str) -> dict[str, Any]:
    """The Secret the k8s target creates when the run has an API key. Never written under OUT/k8s/: a
    manifest without its value would be applied by ``kubectl apply -f k8s/`` as an empty key (an open API
    that looks secured) or invite pasting the key into a file that gets committed; by hand the RUNBOOK's
    ``kubectl create secret`` takes it from the shell, as its ``docker run`` steps take ``$VLLM_API_KEY``."""
    meta = {"name": secret_name(plan), "namespace": k8s.namespace,
            "labels": {**_labels(plan, run_label), "k3lab.group": "api-key"}}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": {API_KEY: value}}


def _labels(plan: Plan, run_label: str | None) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "k3lab", "k3lab.scenario": plan.scenario,
            "k3lab.run": run_label or f"render-{plan.scenario}"}


def _probe(gate: Gate | None, host: str | None) -> dict[str, Any] | None:
    """A gate as a readiness probe; ``host`` when the pod is pinned to the gate's node (its cluster address)."""
    if gate is None or gate.kind not in ("tcp", "http", "proxy_instances"):
        return None
    url = urlsplit(gate.target if "//" in gate.target else f"tcp://{gate.target}")
    port = url.port
    action: dict[str, Any] = ({"tcpSocket": {"port": port}} if gate.kind == "tcp"
                              else {"httpGet": {"path": url.path or "/", "port": port}})
    if host:
        next(iter(action.values()))["host"] = host
    return {**action, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}


def _gi(docker_size: str) -> str:
    """docker run's --shm-size (1g, 512m) as a Kubernetes quantity."""
    m = re.fullmatch(r"([0-9]+)([kmg]?)", docker_size.lower())
    if not m:
        raise InventoryError(f"k8s.shm_size: set it (the container's shm size {docker_size!r} has no Kubernetes form)")
    return m.group(1) + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2)]
