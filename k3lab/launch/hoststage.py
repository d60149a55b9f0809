"""The host stage: every node's host is proven before any container of the run starts.

Each node's host is a testinfra host object reached through that node's own endpoint:

* ``ssh://`` nodes: testinfra's paramiko backend, with the inventory's known_hosts (an unknown
  host key is refused, never added) and identity file;
* ``tcp://`` and ``unix://`` nodes (no SSH): a short-lived helper container on that node's engine
  (the planned image, ``--net=host``, the host's ``/`` bind-mounted read-only at ``/host``), each
  command run as ``chroot /host /bin/sh -c ...`` through the kit's one ``docker exec`` path. It
  carries the run label, so teardown removes it whatever happens.

The checks read only the host objects (files, sysctls, ``df``) and the endpoint's Docker API
(engine version, root dir) and are judged in :mod:`k3lab.preflight.hostchecks`. Nodes run in
parallel; every node has a deadline, and a node that misses it is named (HST-REACH) while the
others proceed.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import docker
import paramiko
from docker.types import Mount
from testinfra.backend.base import BaseBackend
from testinfra.backend.paramiko import ParamikoBackend
from testinfra.host import Host

from k3lab import outputs, settings
from k3lab.errors import ChecksFailed
from k3lab.launch.endpoints import ClientPool, SshOptions, batch_script, describe, docker_exec, split_batch
from k3lab.model.plan import NodePlan, Plan
from k3lab.preflight import hostchecks as hc
from k3lab.preflight.labchecks import BY_ID

LABEL = "k3lab.run"
COMMAND_TIMEOUT_S = 20


class KitParamikoBackend(ParamikoBackend):
    """testinfra's paramiko backend with the kit's SSH rules: the inventory's known_hosts only (an
    unknown key is refused), its identity file, and a timeout on every channel."""

    NAME = "k3lab-paramiko"

    def __init__(self, endpoint: str, ssh: SshOptions, timeout: int = COMMAND_TIMEOUT_S) -> None:
        url = urlparse(endpoint)
        spec = f"{url.username or 'root'}@{url.hostname}" + (f":{url.port}" if url.port else "")
        super().__init__(spec, ssh_identity_file=ssh.identity_file, timeout=timeout)
        self.kit_ssh = ssh

    @functools.cached_property
    def client(self) -> paramiko.SSHClient:  # type: ignore[override]
        client = paramiko.SSHClient()
        known = self.kit_ssh.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if os.path.exists(known):
            client.load_host_keys(known)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        cfg: dict[str, Any] = {"hostname": self.host.name, "port": int(self.host.port or 22),
                               "username": self.host.user or "root", "timeout": self.timeout,
                               "banner_timeout": self.timeout, "auth_timeout": self.timeout}
        if self.kit_ssh.identity_file:
            cfg.update(key_filename=self.kit_ssh.identity_file, look_for_keys=False, allow_agent=False)
        client.connect(**cfg)
        return client

    def _exec_command(self, command: bytes) -> tuple[int, bytes, bytes]:
        transport = self.client.get_transport()
        assert transport is not None
        chan = transport.open_session(timeout=self.timeout)
        chan.settimeout(self.timeout)
        chan.exec_command(command)
        stdout = b"".join(chan.makefile("rb"))
        stderr = b"".join(chan.makefile_stderr("rb"))
        return chan.recv_exit_status(), stdout, stderr


def shell_noise(endpoint: str, ssh: SshOptions) -> str:
    """What an ssh:// node's shell prints for ``true``: '' when clean, not ssh://, or not reachable over SSH."""
    if not endpoint.startswith("ssh://"):
        return ""
    backend = KitParamikoBackend(endpoint, ssh)
    try:
        return backend.run("true").stdout
    except Exception:  # SSH itself fails: the caller's own error says why
        return ""
    finally:
        if "client" in backend.__dict__:  # a cached_property: only a client that was built is closed
            backend.client.close()


def noisy_shell(noise: str, exc: BaseException) -> str:
    """Why an ssh:// endpoint's Docker API fails when root's shell prints (LPF-SSH-SHELL); the output quoted.

    A known trap: docker/cli#3019 ("malformed HTTP status code \"pid\"", "... \"Succeeded\"" from hosts
    whose shell start-up printed), where docker-py says BadStatusLine and nothing names the shell."""
    first = noise.strip().splitlines()[0] if noise.strip() else noise
    return (f"root's shell prints {len(noise)} byte(s) for a command that prints nothing (first line: "
            f"{first[:80]!r}), so the Docker API over ssh:// reads garbage ({type(exc).__name__})")


class HelperBackend(BaseBackend):
    """A node's host through a helper container on its own Docker endpoint (``chroot /host``)."""

    NAME = "k3lab-helper"

    def __init__(self, node: str, api, container: str, timeout: int = COMMAND_TIMEOUT_S) -> None:
        super().__init__(node)
        self.api, self.container, self.timeout = api, container, timeout

    def run(self, command: str, *args: str, **kwargs: Any):
        command = self.get_command(command, *args)
        res = docker_exec(self.api, self.container, ["chroot", "/host", "/bin/sh", "-c", command], self.hostname,
                          timeout=self.timeout)
        return self.result(res.rc, self.encode(command), res.stdout.encode(), res.stderr.encode())


def _host(backend: BaseBackend) -> Host:
    host = Host(backend)
    backend.set_host(host)
    return host


def helper_name(run_id: str, node: str) -> str:
    return f"k3lab-host-{run_id}-{node}"


def start_helper(client: docker.DockerClient, node: NodePlan, run_id: str):
    """The helper container: the planned image (present: LPF-IMAGE), the host's / read-only at /host.

    The plan's read-only mounts come along: on the emulator profile they are the host programs the
    stand-in image runs (chroot, sleep); on hardware the image has its own."""
    # the host's / read-only; its /tmp a private tmpfs, where the batch of reads keeps each stderr
    mounts = [Mount(target="/host", source="/", type="bind", read_only=True),
              Mount(target="/host/tmp", source=None, type="tmpfs")]
    mounts += [Mount(target=m.target, source=m.source, type="bind", read_only=True)
               for m in node.container.mounts if m.read_only]
    name = helper_name(run_id, node.name)
    try:
        client.containers.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass
    helper = client.containers.create(node.container.image, command=["sleep", "infinity"], mounts=mounts,
                                      network_mode="host", labels={LABEL: run_id, "k3lab.helper": node.name},
                                      name=name, detach=True)
    helper.start()
    return helper


# ------------------------------------------------------------------------------------ facts


def _commands(plan: Plan, node: NodePlan, docker_root: str) -> dict[str, str]:
    """Every read of one node's host, keyed, each path quoted: ONE command on the host (a round trip
    over SSH or the helper's exec), each answer framed with its own exit status (batch_script)."""
    q = shlex.quote
    cmds = {key: f"cat {q(path)}" for key, path in (("driver", hc.DRIVER_INFO), ("firmware", hc.FIRMWARE_INFO),
                                                     ("install", hc.INSTALL_INFO), ("hccn", hc.HCCN_CONF))}
    cmds["port_range"] = "cat /proc/sys/net/ipv4/ip_local_port_range"
    cmds["reserved"] = "cat /proc/sys/net/ipv4/ip_local_reserved_ports"
    cmds["meminfo"] = "cat /proc/meminfo"
    for path in hc.model_paths(plan, node):
        source = hc.host_path(node.container.mounts, path)
        if source:  # a path under no mount is the static preflight's (PF-MOUNT-PATHS)
            cmds[f"ls {path}"] = f"ls -1A -- {q(source)}"
            cmds[f"sum {path}"] = "sha256sum -- " + " ".join(q(f"{source}/{n}") for n in hc.DIGEST_FILES)
            cmds[f"config {path}"] = f"cat -- {q(source + '/config.json')}"
    for path in dict.fromkeys(p for p in (docker_root, hc.host_path(node.container.mounts, "/root/.cache")) if p):
        cmds[f"df {path}"] = f"df -Pk -- {q(path)}"
    return cmds


def _answers(host: Host, cmds: dict[str, str]) -> dict[str, tuple[int, str]]:
    """The commands in one ``host.run``: key -> (exit status, stdout); a lost answer is (-1, '')."""
    script, token = batch_script(list(cmds.values()))
    res = host.run(script)
    parts = split_batch(res.stdout, token, len(cmds))
    if all(p is None for p in parts):
        raise RuntimeError(f"the host answered nothing (exit {res.rc}): {(res.stderr or res.stdout).strip()[-300:]}")
    return {key: (got[0], got[1]) if got else (-1, "") for key, got in zip(cmds, parts)}


def _kv(answer: tuple[int, str]) -> dict[str, str] | None:
    return hc.key_values(answer[1]) if answer[0] == 0 else None


def _checkpoint(plan_path: str, source: str, got: dict[str, tuple[int, str]]) -> hc.Checkpoint:
    ck = hc.Checkpoint(path=plan_path, host_path=source)
    rc, listing = got[f"ls {plan_path}"]
    names = set(listing.split("\n")) if rc == 0 else set()
    ck.present = sorted(n for n in hc.CHECKPOINT_FILES if n in names)
    rc, sums = got[f"sum {plan_path}"]
    if rc == 0 and len(sums.split()) >= 2 * len(hc.DIGEST_FILES):
        ck.digest = "".join(sums.split()[0::2][:len(hc.DIGEST_FILES)])
    rc, text = got[f"config {plan_path}"]
    if rc == 0:
        try:
            ck.config = json.loads(text)
        except ValueError:
            ck.config = None
    return ck


def _free(answer: tuple[int, str]) -> int | None:
    rows = answer[1].strip().splitlines()
    cols = rows[-1].split() if answer[0] == 0 and len(rows) >= 2 else []
    return int(cols[3]) * 1024 if len(cols) >= 4 and cols[3].isdigit() else None


def gather(plan: Plan, node: NodePlan, host: Host, client: docker.DockerClient) -> hc.HostFacts:
    """One node's host facts: one command through its testinfra host, plus its endpoint's Docker API."""
    f = hc.HostFacts(node.name, describe(node.endpoint))
    f.docker_version = str(client.version().get("Version") or "")
    docker_root = str(client.info().get("DockerRootDir") or "/var/lib/docker")
    cmds = _commands(plan, node, docker_root)
    got = _answers(host, cmds)
    f.driver, f.firmware, f.install, f.hccn_conf = (_kv(got[k]) for k in ("driver", "firmware", "install", "hccn"))
    f.port_range = got["port_range"][1].strip() or None if got["port_range"][0] == 0 else None
    f.reserved_ports = got["reserved"][1].strip()
    m = re.search(r"^MemAvailable:\s+(\d+) kB", got["meminfo"][1], re.M)
    f.mem_available = int(m.group(1)) * 1024 if m else None
    for path in hc.model_paths(plan, node):
        source = hc.host_path(node.container.mounts, path)
        if source:
            f.checkpoints.append(_checkpoint(path, source, got))
    for key in (k for k in cmds if k.startswith("df ")):
        free = _free(got[key])
        if free is not None:
            f.free_bytes[key[3:]] = free
    return f


def _node_facts(plan: Plan, node: NodePlan, pool: ClientPool, run_id: str) -> hc.HostFacts:
    client = pool.get(node.endpoint)
    if node.endpoint.startswith("ssh://"):
        backend: BaseBackend = KitParamikoBackend(node.endpoint, pool.ssh)
        try:
            return gather(plan, node, _host(backend), client)
        finally:
            with_client = backend.__dict__.get("client")
            if with_client is not None:
                with_client.close()
    helper = start_helper(client, node, run_id)
    try:
        return gather(plan, node, _host(HelperBackend(node.name, client.api, helper.id)), client)
    finally:
        try:
            helper.remove(force=True)
        except docker.errors.APIError:
            pass


def collect(plan: Plan, pool: ClientPool, run_id: str, deadline: float | None = None) -> dict[str, hc.HostFacts]:
    """Every node's facts in parallel; a node that fails or misses the deadline (default
    $K3LAB_HOST_STAGE_DEADLINE) carries its error."""
    deadline = settings.current().host_stage_deadline_s if deadline is None else deadline

    def one(node: NodePlan) -> hc.HostFacts:
        try:
            return _node_facts(plan, node, pool, run_id)
        except Exception as exc:  # unreachable, refused host key, helper refused: named, the rest proceed
            if noise := shell_noise(node.endpoint, pool.ssh):
                why = f"{noisy_shell(noise, exc)}; LPF-SSH-SHELL: {BY_ID['LPF-SSH-SHELL'].remedy}"
            else:
                why = f"{type(exc).__name__}: {exc}"
            return hc.HostFacts(node.name, describe(node.endpoint), error=why)

    ex = ThreadPoolExecutor(max_workers=8)
    futures = {ex.submit(one, n): n for n in plan.nodes}
    done, _ = wait(futures, timeout=deadline)
    ex.shutdown(wait=False, cancel_futures=True)
    out = {}
    for fut, node in futures.items():
        out[node.name] = fut.result() if fut in done else hc.HostFacts(
            node.name, describe(node.endpoint), error=f"no answer within the host stage's {deadline:.0f}s deadline")
    return out


def run(plan: Plan, pool: ClientPool, run_id: str, run_dir: Path | None = None) -> list:
    """The host stage: facts from every node, judged; ``host-stage.json`` in the run dir."""
    t = time.monotonic()
    facts = collect(plan, pool, run_id)
    findings = hc.evaluate(plan, facts)
    if run_dir is not None:
        outputs.write_run_file(run_dir / "host-stage.json", json.dumps({
            "seconds": round(time.monotonic() - t, 2), "facts": json.loads(hc.to_json(facts)),
            "findings": [f.__dict__ for f in findings]}, indent=2))
    return findings


class HostStageFailed(ChecksFailed):
    """The host stage found errors (exit 1); ``findings`` name check, node and host."""

    def __init__(self, message: str, findings: list) -> None:
        super().__init__(message)
        self.findings = findings


def gate(plan: Plan, pool: ClientPool, run_id: str, run_dir: Path, timings: dict[str, float]) -> None:
    """The host stage as a gate: on any error nothing starts (exit 1), each finding names node and host."""
    t = time.monotonic()
    findings = run(plan, pool, run_id, run_dir)
    timings["host_stage_s"] = time.monotonic() - t
    for f in findings:
        print(f"ERROR {f.check} [{', '.join(f.nodes)}]: {f.message}", file=sys.stderr)
    if findings:
        raise HostStageFailed(f"host stage failed with {len(findings)} error(s); nothing was started", findings)
    print(f"[k3lab {time.strftime('%H:%M:%S')}] host stage: {len(plan.nodes)} hosts proven in "
          f"{timings['host_stage_s']:.1f}s", flush=True)
