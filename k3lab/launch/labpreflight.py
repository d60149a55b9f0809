"""Lab preflight over the nodes' own endpoints, before anything starts.

The static preflight (``k3lab.preflight.checks``) reads the plan; these checks ask each node's Docker
endpoint what a ``docker run`` there would meet. They only read, except a probe container that
is created (never started) to let the engine validate the bind-mount sources, and an image pull
when ``--pull`` asks for it. A container the kit did not start is never touched.

Each check has an ID, a MUST statement and a remedy (``k3lab preflight --list``), and a fault case
in ``tests/unit/launch/test_labpreflight.py`` / ``tests/integration/test_labemu.py``.
"""
from __future__ import annotations

import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import docker
import paramiko
from docker.types import Mount

from k3lab.launch.endpoints import HOST_PROXY_VARS, HTTP, ClientPool, describe
from k3lab.model.plan import NodePlan, Plan
from k3lab.preflight.checks import Finding
from k3lab.preflight.labchecks import BY_ID

LABEL = "k3lab.run"
PULL_POLICIES = ("never", "missing", "always")


def _finding(check: str, message: str, nodes: tuple[str, ...],
             severity: Literal["error", "warning"] = "error") -> Finding:
    return Finding(check, severity, f"{message} Remedy: {BY_ID[check].remedy}", nodes)


def _where(node: NodePlan) -> str:
    return f"{node.name} ({describe(node.endpoint)})"


# ------------------------------------------------------------------------------------ checks


def check_endpoint(node: NodePlan, pool: ClientPool) -> list[Finding]:
    try:
        pool.get(node.endpoint).ping()
        return []
    except paramiko.SSHException as exc:
        text = str(exc)
        if "known_hosts" in text or "not found" in text or isinstance(exc, paramiko.BadHostKeyException):
            return [_finding("LPF-ENDPOINT", f"{_where(node)}: SSH host key of {describe(node.endpoint)} is not known "
                             f"({text}); the kit does not accept unknown keys.", (node.name,))]
        return [_finding("LPF-ENDPOINT", f"{_where(node)}: SSH to {node.endpoint} failed: {text}.", (node.name,))]
    except Exception as exc:  # connection refused, timeout, TLS, HTTP errors
        from k3lab.launch.hoststage import noisy_shell, shell_noise

        if noise := shell_noise(node.endpoint, pool.ssh):  # the engine's answer came after the shell's output
            return [_finding("LPF-SSH-SHELL", f"{_where(node)}: {noisy_shell(noise, exc)}.", (node.name,))]
        return [_finding("LPF-ENDPOINT", f"{_where(node)}: endpoint {node.endpoint} does not answer: "
                         f"{type(exc).__name__}: {exc}.", (node.name,))]


def check_image(node: NodePlan, pool: ClientPool, pull: str) -> list[Finding]:
    client = pool.get(node.endpoint)
    image = node.container.image
    present = True
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        present = False
    if pull == "always" or (pull == "missing" and not present):
        try:
            repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "latest")
            client.images.pull(repo, tag=tag or "latest")
            return []
        except docker.errors.APIError as exc:
            return [_finding("LPF-IMAGE", f"{_where(node)}: pulling {image} (--pull {pull}) failed: "
                             f"{exc.explanation or exc}.", (node.name,))]
    if not present:
        return [_finding("LPF-IMAGE", f"{_where(node)}: image {image} is not present and --pull is never.", (node.name,))]
    return []


_MISSING_SOURCE = re.compile(r"bind source path does not exist:\s*(\S+)")


def check_mounts(node: NodePlan, pool: ClientPool, run_id: str) -> list[Finding]:
    """Create (never start) a probe container with the planned mounts: the engine validates each source."""
    client = pool.get(node.endpoint)
    c = node.container
    missing: list[str] = []
    mounts = [Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only) for m in c.mounts]
    for _ in range(len(mounts) + 1):  # the engine names one missing source per attempt
        try:
            probe = client.containers.create(c.image, command=["true"], mounts=mounts, network_mode="none",
                                             labels={LABEL: run_id, "k3lab.probe": node.name},
                                             name=f"k3lab-probe-{run_id}-{node.name}")
            probe.remove(force=True)
            break
        except docker.errors.ImageNotFound:
            return []  # LPF-IMAGE reports it; mounts cannot be probed without the image
        except docker.errors.APIError as exc:
            m = _MISSING_SOURCE.search(str(exc.explanation or exc))
            if not m:
                return [_finding("LPF-MOUNT-SOURCE", f"{_where(node)}: the engine refused the planned mounts: "
                                 f"{exc.explanation or exc}.", (node.name,))]
            path = m.group(1)
            missing.append(path)
            mounts = [x for x in mounts if x["Source"].rstrip("/") != path.rstrip("/")]
    if missing:
        return [_finding("LPF-MOUNT-SOURCE", f"{_where(node)}: bind-mount source(s) missing on the host: "
                         f"{', '.join(missing)}.", (node.name,))]
    return []


def check_name(node: NodePlan, pool: ClientPool, run_id: str) -> list[Finding]:
    client = pool.get(node.endpoint)
    name = node.container.name
    try:
        other = client.containers.get(name)
    except docker.errors.NotFound:
        return []
    owner = (other.labels or {}).get(LABEL)
    if owner == run_id:
        return []
    if owner:
        return [_finding("LPF-NAME", f"{_where(node)}: container {name} is left from k3lab run {owner} "
                         f"({other.status}); 'k3lab down {owner}' removes it.", (node.name,))]
    return [_finding("LPF-NAME", f"{_where(node)}: container {name} ({other.status}, image "
                     f"{other.attrs.get('Config', {}).get('Image', '?')}) was not started by k3lab; the kit will "
                     "not touch it.", (node.name,))]


def _ports(plan: Plan, node: NodePlan) -> list[int]:
    out: set[int] = set()
    for use in plan.expect.ports.get(node.name, []):
        if use.listens:
            lo, hi = use.span
            out.update(range(lo, hi + 1))
    return sorted(out)


def check_ports(plan: Plan, node: NodePlan) -> list[Finding]:
    def taken(port: int) -> bool:
        try:
            with socket.create_connection((node.address, port), timeout=0.5):
                return True
        except OSError:
            return False

    ports = _ports(plan, node)
    with ThreadPoolExecutor(max_workers=16) as ex:
        busy = [p for p, t in zip(ports, ex.map(taken, ports)) if t]
    if busy:
        return [_finding("LPF-PORTS", f"{_where(node)}: planned port(s) {busy} already accept connections on "
                         f"{node.address}.", (node.name,))]
    return []


def check_proxy(pool: ClientPool) -> list[Finding]:
    """Proxy variables may be set for the kit host's other traffic; no deployment client may read them."""
    set_vars = [v for v in HOST_PROXY_VARS if os.environ.get(v)]
    readers = []
    if HTTP.trust_env:
        readers.append("gate/evidence HTTP session")
    for ep, client in list(pool._clients.items()):
        if client.api.trust_env:
            readers.append(f"Docker client of {ep}")
    if readers:
        return [_finding("LPF-PROXY", f"{', '.join(readers)} would read the kit host's proxy variables "
                         f"({', '.join(set_vars) or 'none set now'}).", ())]
    return []


def run(plan: Plan, pool: ClientPool, run_id: str, pull: str = "never") -> list[Finding]:
    """Every live check on every node; nodes in parallel. A node whose endpoint fails gets no other check."""
    if pull not in PULL_POLICIES:
        raise ValueError(f"--pull must be one of {', '.join(PULL_POLICIES)}")

    def per_node(node: NodePlan) -> list[Finding]:
        found = check_endpoint(node, pool)
        if found:
            return found
        found += check_name(node, pool, run_id)
        image = check_image(node, pool, pull)
        found += image
        if not image:
            found += check_mounts(node, pool, run_id)
        found += check_ports(plan, node)
        return found

    with ThreadPoolExecutor(max_workers=8) as ex:
        results = list(ex.map(per_node, plan.nodes))
    findings = [f for r in results for f in r]
    findings += check_proxy(pool)
    return findings
