"""How the kit reaches one node: a Docker client for that node's own endpoint, and a host object.

Modelled on testinfra's split between *how to reach a host* (a backend) and *what to check*
(modules on the host). Every lab node has its own Docker endpoint (``unix://``, ``tcp://`` or
``ssh://``) and the guides give the container the same name on every node, so a host is always
the pair (endpoint, container name), never a container name alone on the local engine.

* :func:`docker_client` builds a client for an endpoint. ``ssh://`` goes through paramiko with
  host keys checked against a known_hosts file (the kit's, when the inventory names one, else
  ``~/.ssh/known_hosts``) and an unknown key refused, never added. Proxy variables of the kit
  host never apply (``trust_env`` off): a ``tcp://`` endpoint is a deployment address.
* Every per-host call has a deadline: SSH connect, banner, auth and channel open are bounded
  (paramiko's own timeouts), an engine is asked ``/_ping`` within $K3LAB_ANSWER_TIMEOUT before a
  pool hands its client out, and an endpoint that failed once is remembered as unreachable, so the
  next call fails at once (:class:`HostUnreachable`) instead of waiting again. :func:`each_host`
  runs one operation on several hosts at once under one deadline (a SIGSTOPped dockerd accepts
  TCP and never answers) and names each host that failed or did not answer.
* :class:`NodeHost` runs commands in the node's container through that client (``docker exec``)
  and answers like testinfra: ``run`` returns a :class:`CommandResult` (``rc``, ``stdout``,
  ``stderr``), ``check_output`` fails naming the host, ``file(path)`` reads a file.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar
from urllib.parse import urlparse

import docker
import paramiko
import requests
from docker.transport import SSHHTTPAdapter

from k3lab import settings
from k3lab.errors import CommandFailed, EnvError
from k3lab.model.runs import RunState

LOCAL_ENDPOINT = "unix:///var/run/docker.sock"
API_VERSION = "1.41"  # Docker 20.10+, the oldest engine the kit supports; avoids a version probe
# First contact with a host: SSH connect, banner, auth and channel open, then the engine's /_ping.
# A loaded lab engine answers a ping in well under a second; 20 s leaves room for a slow SSH login.
# sshd allows MaxSessions (10 by default) channels per connection, and docker-py keeps one pool of
# connections per request URL, each connection an open channel running docker system dial-stdio
# (docker-py#2246: its own SSH client defaults to 9 pools; a custom adapter gets 25). At most
# SSH_POOLS idle channels stay open, leaving room for requests in flight (an exec's stream, threads).
SSH_POOLS = 4
SSH_POOL_SIZE = 2
TIMED_OUT = 124  # coreutils timeout's exit status: the kit's docker exec ran past its bound
T = TypeVar("T")
# paramiko's transport thread logs a host that vanishes with a traceback (Python's last-resort handler);
# the kit names the host and the reason itself
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostUnreachable(EnvError):
    """A node's endpoint failed or did not answer in time (exit 3); callers name the node beside it."""


def unreachable_error(exc: BaseException) -> bool:
    """An error that says the host did not answer, not that the engine answered no (an HTTP error)."""
    if isinstance(exc, docker.errors.APIError):
        return False
    return isinstance(exc, (OSError, EOFError, paramiko.SSHException, HostUnreachable,
                            docker.errors.DockerException))


@dataclass(frozen=True)
class SshOptions:
    """SSH settings the kit uses for ssh:// endpoints (from the inventory's ``lab`` section)."""

    known_hosts: str | None = None
    identity_file: str | None = None

    @classmethod
    def from_dict(cls, raw: dict | None) -> "SshOptions":
        raw = raw or {}
        return cls(known_hosts=raw.get("known_hosts"), identity_file=raw.get("identity_file"))

    def as_dict(self) -> dict[str, str | None]:
        """As run-state.json keeps them (RunState.ssh)."""
        return {"known_hosts": self.known_hosts, "identity_file": self.identity_file}


class _KitSSHAdapter(SSHHTTPAdapter):
    """docker-py's paramiko adapter with the kit's known_hosts and key instead of ~/.ssh."""

    def __init__(self, base_url: str, ssh: SshOptions, **kwargs) -> None:
        self._kit_ssh = ssh
        super().__init__(base_url, **kwargs)

    def _create_paramiko_client(self, base_url):
        super()._create_paramiko_client(base_url)
        # without these a lost host holds the handshake or a channel open for up to an hour
        answer = settings.current().answer_timeout_s
        self.ssh_params.update(timeout=answer, banner_timeout=answer, auth_timeout=answer, channel_timeout=answer)
        if self._kit_ssh.known_hosts:
            # only the kit's file: a key the operator's ~/.ssh/known_hosts holds does not count
            self.ssh_client._system_host_keys = paramiko.HostKeys()
            self.ssh_client.load_host_keys(self._kit_ssh.known_hosts)
        if self._kit_ssh.identity_file:
            self.ssh_params["key_filename"] = self._kit_ssh.identity_file
            self.ssh_params["look_for_keys"] = False
            self.ssh_params["allow_agent"] = False
        self.ssh_client.set_missing_host_key_policy(paramiko.RejectPolicy())


def docker_client(endpoint: str, ssh: SshOptions | None = None, timeout: int = 120) -> docker.DockerClient:
    """A Docker client for one node's endpoint; nothing is read from DOCKER_HOST or proxies."""
    ssh = ssh or SshOptions()
    if endpoint.startswith("ssh://"):  # the kit's adapter always: its connect and channel timeouts
        api = docker.APIClient(base_url="tcp://127.0.0.1:9", version=API_VERSION, timeout=timeout)
        # parse_host adds the default port 22, as docker-py's own constructor does
        adapter = _KitSSHAdapter(docker.utils.parse_host(endpoint), ssh, timeout=timeout,
                                 pool_connections=SSH_POOLS, max_pool_size=SSH_POOL_SIZE)
        api._custom_adapter = adapter
        api.mount("http+docker://ssh", adapter)
        api._unmount("http://", "https://")
        api.base_url = "http+docker://ssh"
        client = docker.DockerClient.__new__(docker.DockerClient)
        client.api = api
    else:
        client = docker.DockerClient(base_url=endpoint, version=API_VERSION, timeout=timeout, max_pool_size=32)
    client.api.trust_env = False  # the kit host's HTTP(S)_PROXY never applies to a deployment address
    return client


def local_client(timeout: int = 120) -> docker.DockerClient:
    """The kit host's own engine (the simulator's): ``$DOCKER_HOST`` when set, else the local socket."""
    return docker_client(settings.current().docker_host or LOCAL_ENDPOINT, timeout=timeout)


def describe(endpoint: str) -> str:
    """Short host name for messages: the endpoint's host, or 'local engine'."""
    if endpoint.startswith("unix://"):
        return "local engine"
    return urlparse(endpoint).hostname or endpoint


def ping(client: docker.DockerClient, timeout: float | None = None) -> None:
    """The engine's ``/_ping`` within ``timeout`` (default $K3LAB_ANSWER_TIMEOUT; the SDK's ``ping()``
    waits the client's whole timeout)."""
    api = client.api
    api.get(f"{api.base_url}/_ping", timeout=timeout or settings.current().answer_timeout_s).raise_for_status()


class ClientPool:
    """One client per endpoint, shared by threads (docker-py clients are thread-safe).

    An ssh:// client connects (SSH handshake) when it is built; each endpoint has its own lock so
    the handshakes of several nodes run in parallel, and each happens once per process. A new
    client is handed out only once its engine answered a ping; an endpoint that failed (here or in
    a caller, :meth:`failed`) stays unreachable for this pool: later calls fail at once."""

    def __init__(self, ssh: SshOptions | None = None) -> None:
        self.ssh = ssh or SshOptions()
        self._clients: dict[str, docker.DockerClient] = {}
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self.unreachable: dict[str, str] = {}  # endpoint -> why

    def get(self, endpoint: str) -> docker.DockerClient:
        with self._lock:
            self._refuse_unreachable(endpoint)
            if endpoint in self._clients:
                return self._clients[endpoint]
            lock = self._building.setdefault(endpoint, threading.Lock())
        with lock:
            self._refuse_unreachable(endpoint)
            if endpoint not in self._clients:
                try:
                    client = docker_client(endpoint, self.ssh)
                    ping(client)
                except Exception as exc:
                    self.failed(endpoint, exc)
                    raise
                with self._lock:
                    self._clients[endpoint] = client
            return self._clients[endpoint]

    def failed(self, endpoint: str, exc: BaseException) -> None:
        """Remember that ``endpoint`` did not answer: the pool's later calls to it fail at once."""
        with self._lock:
            self.unreachable.setdefault(endpoint, reason(exc))

    def _refuse_unreachable(self, endpoint: str) -> None:
        if endpoint in self.unreachable:
            raise HostUnreachable(f"{describe(endpoint)} did not answer earlier: {self.unreachable[endpoint]}")

    def close(self) -> None:
        for c in list(self._clients.values()):
            try:
                c.close()
            except Exception:
                pass
        self._clients.clear()


def reason(exc: BaseException) -> str:
    """One line saying why a host call failed (the exception's type when its text is empty)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def each_host(fn: Callable[[T], Any], items: dict[str, T], deadline: float | None) -> tuple[dict[str, Any], dict[str, BaseException]]:
    """``fn(item)`` for every key at once; (answers, failures) per key, all back within ``deadline`` seconds.

    The SDK's timeouts bound each call; the deadline bounds the whole operation on a host, which can
    be several calls. A key that has not answered by then fails with :class:`TimeoutError` and the
    others are not held up. Daemon threads, because a call into a SIGSTOPped engine may block until
    its socket times out: it must not hold the kit's exit."""
    answers: dict[str, Any] = {}
    failures: dict[str, BaseException] = {}

    def one(key: str, item: T) -> None:
        try:
            answers[key] = fn(item)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who names the host
            failures[key] = exc

    threads = [threading.Thread(target=one, args=(k, v), name=f"k3lab-host-{k}", daemon=True) for k, v in items.items()]
    for t in threads:
        t.start()
    end = None if deadline is None else time.monotonic() + deadline
    for t in threads:
        t.join(None if end is None else max(0.0, end - time.monotonic()))
    for key in items:
        if key not in answers and key not in failures:
            failures[key] = TimeoutError(f"no answer within {deadline:.0f} s")
    return dict(answers), dict(failures)


# ------------------------------------------------------------------------------- host access


@dataclass
class CommandResult:
    """The kit's one result of a command run on a node (testinfra's CommandResult, the parts the kit uses).

    Not a tuple: a caller reads ``ok``/``rc`` or calls :meth:`check`, so a failed command is never taken
    for its output by unpacking."""

    command: str
    rc: int
    stdout: str
    stderr: str = ""
    host: str = ""  # the node, as messages name it

    @property
    def exit_status(self) -> int:
        return self.rc

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def output(self) -> str:
        """stdout then stderr, for callers that read both as one text (log tails, probes)."""
        return self.stdout + self.stderr

    def check(self) -> str:
        """The output, or :class:`CommandFailed` naming the node, the command and its last words."""
        if not self.ok:
            raise CommandFailed(f"{self.host}: '{self.command[:200]}' exited {self.rc}"
                                + (" (timed out)" if self.rc == TIMED_OUT else "") + f": {self.output.strip()[-300:]}")
        return self.output

    @property
    def succeeded(self) -> bool:
        return self.rc == 0

    @property
    def failed(self) -> bool:
        return self.rc != 0


def docker_exec(api, container: str, argv: list[str], host: str, env: dict[str, str] | None = None,
                workdir: str | None = None, timeout: float = 120) -> CommandResult:
    """The kit's one ``docker exec``: create, start (stdout and stderr apart), inspect, the command bounded by
    coreutils ``timeout`` (exit 124). Used by the suite's hosts and by the launch side's backends alike."""
    ex = api.exec_create(container, ["timeout", str(int(timeout)), *argv], environment=env or None, workdir=workdir)
    out, err = api.exec_start(ex["Id"], demux=True)
    rc = api.exec_inspect(ex["Id"]).get("ExitCode")
    return CommandResult(command=" ".join(argv), rc=rc if rc is not None else -1,
                         stdout=(out or b"").decode(errors="replace"), stderr=(err or b"").decode(errors="replace"),
                         host=host)


@dataclass
class FileState:
    path: str
    exists: bool
    content_string: str = ""


@dataclass
class NodeHost:
    """One node as checks see it: its container on its own endpoint.

    ``round_trips`` counts docker exec calls (each one an SSH channel on an ssh:// endpoint); when
    ``K3LAB_ROUND_TRIPS`` names a directory, each host appends its count there for ``nox -s bench``.
    """

    node: str
    endpoint: str
    container: str
    pool: ClientPool
    timeout: int = 120
    round_trips: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return f"{self.node} ({describe(self.endpoint)})"

    def exec(self, argv: list[str], env: dict[str, str] | None = None, workdir: str | None = None,
             timeout: int | None = None) -> CommandResult:
        """One docker exec (create, start, inspect), addressed by container name: no extra inspect call."""
        with self._lock:
            self.round_trips += 1
        _record_round_trip(self.node)
        try:
            api = self.pool.get(self.endpoint).api
            return docker_exec(api, self.container, argv, self.name, env, workdir, timeout or self.timeout)
        except docker.errors.NotFound:
            raise AssertionError(f"{self.name}: container {self.container} does not exist on {self.endpoint}") from None
        except docker.errors.APIError as exc:
            raise AssertionError(f"{self.name}: docker exec in {self.container} failed: {exc.explanation or exc}") from None
        except Exception as exc:
            if not unreachable_error(exc):
                raise
            self.pool.failed(self.endpoint, exc)  # the node's other checks fail at once, not after a timeout each
            raise AssertionError(f"{self.name}: endpoint {self.endpoint} does not answer: {reason(exc)}") from None

    def run(self, command: str, *args: str) -> CommandResult:
        """Run a shell command in the container (testinfra: ``/bin/sh -c``)."""
        if args:
            import shlex

            command = command % tuple(shlex.quote(a) for a in args)
        res = self.exec(["/bin/sh", "-c", command])
        res.command = command
        return res

    def check_output(self, command: str, *args: str) -> str:
        res = self.run(command, *args)
        if res.rc != 0:
            raise AssertionError(f"{self.name}: '{res.command}' exited {res.rc}: {(res.stderr or res.stdout).strip()[-500:]}")
        return res.stdout.rstrip("\r\n")

    def file(self, path: str) -> FileState:
        res = self.exec(["cat", path])
        if res.rc != 0:
            return FileState(path, False)
        return FileState(path, True, res.stdout)

    def batch(self, commands: dict[str, str], timeout: int | None = None) -> dict[str, CommandResult]:
        """Several shell commands in ONE docker exec, each answered as if run alone (rc, stdout, stderr).

        On an ``ssh://`` endpoint every exec is an SSH channel and a docker CLI on the node, so the
        suite asks each node's tools in one go (:func:`batch_script`)."""
        answers: dict[str, CommandResult] = {}
        todo = list(commands)
        for _ in range(2):  # commands without an answer (output lost or cut short) are asked again once
            if not todo:
                break
            script, token = batch_script([commands[k] for k in todo])
            res = self.exec(["/bin/sh", "-c", script], timeout=timeout)
            why = (res.stderr or f"batch exited {res.rc}").strip()[-300:]
            for key, got in zip(todo, split_batch(res.stdout, token, len(todo))):
                answers[key] = (CommandResult(command=key, rc=-1, stdout="", stderr=f"no answer: {why}", host=self.name)
                                if got is None else
                                CommandResult(command=key, rc=got[0], stdout=got[1], stderr=got[2], host=self.name))
            todo = [k for k in todo if answers[k].rc == -1 and answers[k].stderr.startswith("no answer")]
        return {k: answers[k] for k in commands}


def batch_script(commands: list[str]) -> tuple[str, str]:
    """A /bin/sh script running each command in its own subshell (stdin closed), and its frame token.

    Each command's stdout, exit status and stderr are framed by markers carrying a random token,
    so no output can forge a frame; :func:`split_batch` takes them apart."""
    token = uuid.uuid4().hex
    lines = ['d=$(mktemp -d 2>/dev/null || { mkdir -p "/tmp/.k3lab-batch-$$" && echo "/tmp/.k3lab-batch-$$"; })']
    for k, cmd in enumerate(commands):
        # stderr is usually empty: test it (a builtin) before a cat, one process fewer per command
        lines.append(f"printf '@@{token} {k} out\\n'; ( {cmd}\n) </dev/null 2>\"$d/e\"; rc=$?; "
                     f"printf '\\n@@{token} {k} rc %d\\n' \"$rc\"; [ ! -s \"$d/e\" ] || cat \"$d/e\" 2>/dev/null; "
                     f"printf '\\n@@{token} {k} end\\n'")
    lines.append('rm -rf "$d"')
    return "\n".join(lines), token


def split_batch(out: str, token: str, n: int) -> list[tuple[int, str, str] | None]:
    """Per command of a :func:`batch_script`: (rc, stdout, stderr), or None when it did not finish."""
    result: list[tuple[int, str, str] | None] = []
    pos = 0
    for k in range(n):
        head = f"@@{token} {k} out\n"
        start = out.find(head, pos)
        rc_m = re.compile(rf"\n@@{token} {k} rc (-?\d+)\n").search(out, start) if start >= 0 else None
        end = out.find(f"\n@@{token} {k} end\n", rc_m.end()) if rc_m else -1
        if rc_m is None or end < 0:
            result.append(None)
            continue
        result.append((int(rc_m.group(1)), out[start + len(head):rc_m.start()], out[rc_m.end():end]))
        pos = end
    return result


def hosts_from_state(state: RunState | dict, pool: ClientPool | None = None) -> dict[str, NodeHost]:
    """Hosts of a run from its run-state.json: per node its endpoint and container name."""
    state = RunState.model_validate(state)
    pool = pool or ClientPool(SshOptions.from_dict(state.ssh))
    return {node: NodeHost(node, state.endpoint_of(node, LOCAL_ENDPOINT), name, pool)
            for node, name in state.containers.items()}


def _record_round_trip(node: str) -> None:
    outdir = settings.current().round_trips
    if not outdir:
        return
    path = outdir / f"{node}.{os.getpid()}"
    try:
        with open(path, "a") as f:
            f.write("1")
    except OSError:
        pass


# The kit host's proxy variables: never applied to deployment addresses (sessions, load generators)
# and reported by the lab preflight. (The guides' scripts unset their own list: render.scripts.)
HOST_PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


def http_session() -> requests.Session:
    """Gates and evidence talk only to deployment addresses: the kit host's proxy variables never apply."""
    session = requests.Session()
    session.trust_env = False
    return session


HTTP = http_session()
