"""Each node's tool output, read in ONE ``docker exec`` per node and shared by the whole suite.

On a lab every ``docker exec`` over ``ssh://`` is an SSH channel plus a docker CLI on the node, and
the guides' checks are loops (``for i in {0..15}; do hccn_tool -i $i -link -g; done``, the same
for ``-net_health``, ``-ip``, ``-vnic``, ``-tls``). The per-node checks therefore read the same real
commands (npu-smi, hccn_tool per device, /proc, the staged files) from one batch per node
(:meth:`k3lab.launch.endpoints.NodeHost.batch`), each command answered with its own rc and output,
so a failure still names the host, the device and the command. A command the batch does not
hold runs live.

The batches start in the background when a worker first asks for node tools, and are shared
across xdist workers: the controller makes a directory (``K3LAB_NODE_TOOLS_DIR``) before the
workers start; the first worker to reach a node runs its batch under a file lock there, the
others read the stored answers.
"""
from __future__ import annotations

import fcntl
import json
import shlex
import threading
from pathlib import Path

from k3lab import outputs, settings
from k3lab.conform.toolparse import BUSY, ipv4
from k3lab.launch.endpoints import CommandResult, FileState
from k3lab.launch.hwstage import BATCH_TIMEOUT_S
from k3lab.model.nodechecks import HCCN_TOOL as HCCN  # one path for the suite and the runbook's step 0
from k3lab.model.nodechecks import SPOD as SPOD

DIR_ENV = "K3LAB_NODE_TOOLS_DIR"
PROC_CMDLINES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"  # ps is absent in slim images
BUSY_PATTERNS = "|".join(f"*{shlex.quote(b)}*" for b in BUSY)  # shell case patterns


def retrying(cmd: str) -> str:
    """Shell: run ``cmd`` until hccn_tool is not busy and says something (20 tries, 0.2 s apart),
    print its output.

    hccn_tool is not re-entrant: a call that answers busy did nothing, so a concurrent user of
    the node's tool must not fail the check. Both busy wordings are retried ("hccn_tool is busy",
    and -hccs_ping's "The device is occupied. Please try again later."). An empty answer is
    retried too: under load one call in a few hundred printed nothing."""
    # case, not grep: a hundred calls per node, and no extra process per call
    return (f"n=0; while out=$({cmd} 2>&1); case \"$out\" in ''|{BUSY_PATTERNS}) [ $n -lt 20 ];; *) false;; esac; "
            f"do n=$((n+1)); sleep 0.2; done; echo \"$out\"")


def hccn(device: int, option: str) -> str:
    return retrying(f"{HCCN} -i {device} {option}")


def ping(device: int, verb: str, address: str) -> str:
    """Shell: ``hccn_tool -i DEVICE VERB -g address ADDRESS`` (verb -ping or -hccs_ping), retried
    while busy. The address, read from another node's tool, is checked (IPv4) and quoted."""
    if verb not in ("-ping", "-hccs_ping"):
        raise ValueError(f"not a ping verb: {verb!r}")
    return hccn(int(device), f"{verb} -g address {shlex.quote(ipv4(address))}")


def hccn_options(node) -> list[str]:
    """The per-device queries every node answers in its batch. A3 devices are addressed by their
    vNIC (HCCS within a super pod); their RoCE ``-ip`` is asked only when a peer is in another
    super pod (test_cross_node_reachability), in one more exec."""
    return (["-link -g", "-net_health -g", "-tls -g", "-lldp -g", "-netdetect -g", "-gateway -g"]
            + (["-vnic -g"] if node.platform == "A3" else ["-ip -g"]))


def commands(node, hardware_only: bool = False) -> list[str]:
    """Every read-only command a per-node check runs on ``node``; ``hardware_only``: those of the NPU
    and HCCN checks (the hardware stage), without the suite's /proc and staged-file reads."""
    cmds = ["npu-smi info", SPOD, cat("/etc/hccn.conf")]
    cmds += [hccn(i, opt) for opt in hccn_options(node) for i in range(node.device_count)]
    if not hardware_only:
        cmds += ["cat /proc/net/tcp", "cat /proc/net/tcp6", PROC_CMDLINES]
        cmds += [cat(a.path) for a in node.artefacts if a.path.startswith("/")]
    return cmds


def cat(path: str) -> str:
    return f"cat {shlex.quote(path)}"


class NodeTools:
    """testinfra-shaped access to one node whose read-only commands come from its batch."""

    def __init__(self, host, node, store: "Store") -> None:
        self.host, self.node, self._store = host, node, store

    @property
    def name(self) -> str:
        return self.host.name

    def prefetch(self) -> None:
        """Run (or load) the node's batch now; a failure is reported by the checks that read it."""
        try:
            self._store.answers(self.host, self.node)
        except AssertionError:
            pass

    def run(self, command: str) -> CommandResult:
        answers = self._store.answers(self.host, self.node)
        if command in answers:
            return answers[command]
        return self.host.run(command)

    def many(self, commands: list[str]) -> dict[str, CommandResult]:
        """Answers for several commands: from the batch, the others together in one more exec."""
        answers = self._store.answers(self.host, self.node)
        missing = [c for c in commands if c not in answers]
        extra = self.host.batch({c: c for c in missing}, timeout=BATCH_TIMEOUT_S) if missing else {}
        return {c: answers[c] if c in answers else extra[c] for c in commands}

    def check_output(self, command: str) -> str:
        res = self.run(command)
        if res.rc != 0:
            raise AssertionError(f"{self.name}: '{command}' exited {res.rc}: {(res.stderr or res.stdout).strip()[-500:]}")
        return res.stdout.rstrip("\r\n")

    def file(self, path: str) -> FileState:
        res = self.run(cat(path))
        return FileState(path, True, res.stdout) if res.rc == 0 else FileState(path, False)


class Store:
    """Batch answers per node: in memory, and in the shared directory for the other workers."""

    def __init__(self, directory: str | None, hardware_only: bool = False) -> None:
        self.dir = Path(directory) if directory else None
        self.hardware_only = hardware_only
        self._mem: dict[str, dict[str, CommandResult]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def answers(self, host, node) -> dict[str, CommandResult]:
        with self._guard:
            lock = self._locks.setdefault(node.name, threading.Lock())
        with lock:
            if node.name not in self._mem:
                self._mem[node.name] = self._load_or_run(host, node)
            got = self._mem[node.name]
        if "__error__" in got:  # the batch itself failed (container gone): every check says so
            raise AssertionError(got["__error__"].stderr)
        return got

    def _load_or_run(self, host, node) -> dict[str, CommandResult]:
        if self.dir is None:
            return self._run(host, node)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{node.name}.json"
        with open(self.dir / f"{node.name}.lock", "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            if path.exists():
                return {k: CommandResult(**v) for k, v in json.loads(path.read_text()).items()}
            got = self._run(host, node)
            outputs.write_run_file(path, json.dumps({k: v.__dict__ for k, v in got.items()}))
            return got

    def _run(self, host, node) -> dict[str, CommandResult]:
        try:
            return host.batch({c: c for c in commands(node, self.hardware_only)}, timeout=BATCH_TIMEOUT_S)
        except AssertionError as exc:
            return {"__error__": CommandResult("batch", -1, "", str(exc), host.name)}


def shared_dir() -> str | None:
    tools = settings.current().node_tools_dir  # $K3LAB_NODE_TOOLS_DIR, inherited from the controller
    return str(tools) if tools else None
