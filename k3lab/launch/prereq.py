"""What a live command needs on this machine, checked before it creates anything (#33 item 2).

One function per prerequisite; each returns ``None`` when it is there, else one line: what is missing
and the exact install command (Debian's package names). :func:`require` runs a command's checks and
raises one :class:`MissingPrerequisite` (exit 3) naming the command and every missing piece, so an
operator installs them all at once instead of meeting them one failed start at a time.

This module imports only the standard library at load time: the CLI calls it first, and a
missing Docker engine must be reported in well under two seconds (the engine check itself is
bounded by :data:`ENGINE_DEADLINE_S`; a missing unix socket is found without a connect).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from k3lab import settings
from k3lab.errors import EnvError, UsageError

# the sshd labemu starts in each emulated host's namespaces (its path, not whatever PATH finds)
SSHD = Path("/usr/sbin/sshd")
# a local engine answers /_ping in milliseconds; one that takes longer is not one a run can use
ENGINE_DEADLINE_S = 5.0
# What the sim image's interpreter (the kit's own) must import beyond the kit's dependencies: the real
# vllm-ascend proxy's (its header: pip install fastapi<0.124.0 httpx uvicorn). The ``sim`` extra.
SIM_EXTRA = ("fastapi", "uvicorn")
DOCKER_INSTALL = "apt-get install docker.io"
SSHD_INSTALL = "apt-get install openssh-server"
IP_INSTALL = "apt-get install iproute2"
SIM_INSTALL = "pip install 'k3lab[sim]'"

Check = Callable[[], str | None]


class MissingPrerequisite(EnvError):
    """A command needs something this machine lacks (exit 3); nothing was started."""


def require(command: str, *checks: Check) -> None:
    """Every check of ``command`` (e.g. ``"k3lab up"``); one error naming all that is missing."""
    missing = [m for m in (check() for check in checks) if m]
    if missing:
        raise MissingPrerequisite(f"{command} needs what this machine lacks: " + "; ".join(missing))


def sim_extra() -> str | None:
    """The ``[sim]`` extra: the simulator runs the real vllm-ascend proxy on the kit's interpreter."""
    absent = [name for name in SIM_EXTRA if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return (f"the [sim] extra ({', '.join(absent)} not installed; the simulator runs the real vllm-ascend proxy): "
            f"{SIM_INSTALL} (in a checkout: pip install -e '.[sim]')")


def local_endpoint() -> str:
    """The kit host's own engine, the simulator's: ``$DOCKER_HOST`` when set, else the local socket."""
    from k3lab.launch.endpoints import LOCAL_ENDPOINT  # docker and paramiko load only when an engine is asked

    return settings.current().docker_host or LOCAL_ENDPOINT


def unix_socket(endpoint: str) -> Path | None:
    """A ``unix://`` endpoint's socket file (it may not exist); None for any other endpoint."""
    return Path(endpoint.removeprefix("unix://")) if endpoint.startswith("unix://") else None


def docker_engine(endpoint: str | None = None) -> str | None:
    """A Docker engine that answers ``/_ping`` within :data:`ENGINE_DEADLINE_S` (default: the local one)."""
    endpoint = endpoint or local_endpoint()
    where = f"DOCKER_HOST={endpoint}" if endpoint == settings.current().docker_host else endpoint
    remedy = (f"install and start one ({DOCKER_INSTALL}; systemctl start docker) or point DOCKER_HOST at one")
    if (sock := unix_socket(endpoint)) is not None:
        if not sock.exists():  # no engine listens: say so without loading the SDK or connecting
            return f"a Docker engine ({where}: no such socket): {remedy}"
        if not os.access(sock, os.R_OK | os.W_OK):
            return (f"access to the Docker engine ({where}: permission denied): run as root or join the socket's "
                    f"group (usermod -aG docker $USER)")
    from k3lab.launch import endpoints

    def ask(ep: str) -> None:
        client = endpoints.docker_client(ep, timeout=int(ENGINE_DEADLINE_S))
        try:
            endpoints.ping(client, ENGINE_DEADLINE_S)
        finally:
            client.close()

    _, failures = endpoints.each_host(ask, {endpoint: endpoint}, ENGINE_DEADLINE_S)
    if endpoint in failures:
        why = endpoints.reason(failures[endpoint])
        return f"a Docker engine that answers ({where}: no answer within {ENGINE_DEADLINE_S:g} s: {why}): {remedy}"
    return None


def dockerd() -> str | None:
    """The engine binary: labemu starts one engine per emulated host."""
    return None if shutil.which("dockerd") else f"dockerd (not on PATH): {DOCKER_INSTALL}"


def sshd() -> str | None:
    """sshd and ssh-keygen: labemu starts an sshd per emulated host, with keys it generates."""
    if not SSHD.is_file():
        return f"sshd ({SSHD} not found): {SSHD_INSTALL}"
    if not shutil.which("ssh-keygen"):
        return f"ssh-keygen (not on PATH): {SSHD_INSTALL}"
    return None


def ip_netns() -> str | None:
    """iproute2's ``ip`` with network namespaces (busybox's ``ip`` has none)."""
    ip = shutil.which("ip")
    if not ip:
        return f"ip (not on PATH): {IP_INSTALL}"
    try:
        done = subprocess.run([ip, "netns", "list"], capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns ({ip} netns list failed: {exc}): {IP_INSTALL}"
    if done.returncode != 0:
        why = (done.stderr or b"").decode(errors="replace").strip().splitlines()[:1] or [f"exit {done.returncode}"]
        return f"ip with network namespaces ({ip} netns list: {why[0]}): {IP_INSTALL}"
    return None


def root() -> str | None:
    """Namespaces, bridges and engines need root."""
    return None if os.geteuid() == 0 else "root (network namespaces, a bridge, engines): run it with sudo"


def for_target(command: str, scenario: str, target: str | None, inventory: str | None,
               usage: Callable[[str], None] | None = None) -> str:
    """A bring-up's prerequisites: on the sim target the [sim] extra, and the local engine when no
    inventory names the nodes' engine; a lab's engines are its nodes', which its host stage names. The
    target's name: the caller then checks what the target itself asks (``Target.prerequisites``).
    ``usage``: the command's own usage checks on the target's name, run before any prerequisite."""
    from k3lab.model import select, targetkinds

    select.scenario_id(scenario)  # a bad scenario is bad input (exit 2) before a missing engine (exit 3)
    name = select.target(scenario, target, inventory)
    kind = targetkinds.kind(name)
    if usage is not None:
        usage(name)
    if kind.live is not None:  # a render-only target: refused before anything is created
        raise UsageError(f"{command}: {kind.live}")
    if kind.simulated:
        require(command, sim_extra, *([docker_engine] if inventory is None else []))
    return name


def for_endpoints(command: str, endpoints: Iterable[str]) -> None:
    """The kit host's own engines among ``endpoints`` (unix://); a remote host that does not answer is
    named by the command itself, beside its nodes."""
    local = sorted({ep for ep in endpoints if ep.startswith("unix://")})
    require(command, *(functools.partial(docker_engine, ep) for ep in local))


# What each kind of command needs. The sim target: the [sim] extra (cheap, first) and the local engine.
SIM = (sim_extra, docker_engine)
# The emulated lab: root, iproute2, sshd, dockerd, and the [sim] extra (its hosts run the sim image).
LABEMU = (root, ip_netns, sshd, dockerd, sim_extra)
# break and repair stop and start a host's sshd; down and status only remove or read what up made.
LABEMU_ACTION = {"up": LABEMU, "break": (root, ip_netns, sshd), "repair": (root, ip_netns, sshd),
                 "down": (root, ip_netns), "status": (root, ip_netns)}
