"""An emulated multi-host lab on this machine: ``k3lab labemu up|down|status``.

Each emulated host is what a lab node is to the kit, built from the kernel's own pieces:

* a network namespace ``k3emu-hN`` with its own address on a private bridge the kit creates
  (``10.213.0.0/24``; the sim uses ``172.28.0.0/24``), and its NPU device addresses on that NIC;
* its own filesystem view (a private mount namespace): its own ``/etc`` (with the driver's
  ``/etc/hccn.conf``, ``/etc/ascend_install.info`` and the emulated device table) and its own
  ``/root/.cache`` holding the model directories (with ``up --weights DIR``: its own ``DIR`` holds them
  instead, as a lab's shared weights outside ``/root/.cache``, and the inventory mounts ``DIR``);
* its own Docker engine (``nsenter --net=/run/netns/NAME dockerd``; own socket, data-root,
  exec-root and pidfile; ``ip netns exec`` would remount ``/sys`` and hide the cgroups);
* its own sshd on the namespace address, with a kit-generated host key and a kit client key;
* its own device-tool service (``k3sim.toolservice``): the image's ``npu-smi``/``hccn_tool`` shims in
  a ``--net=host`` container ask it (port file ``/etc/k3lab-sim/tool-service``) instead of starting
  an interpreter per call, as real tools are small C programs; without it the stage's ~120 calls per
  node cost seconds of CPU each, an emulator cost a hardware lab never has.

``up`` writes a lab inventory whose endpoints mix ``ssh://root@IP`` and ``tcp://IP:2375`` and a
known_hosts file the inventory names (host keys are recorded, never accepted blindly). The
inventory selects the ``emulator`` profile: the one listed set of differences from a hardware
lab run (no ``--privileged``, no ``/dev/davinci*``, the emulated driver instead of the driver
mounts). Everything else (render, preflight, gates, suite, ``--net=host``, container names) is
the lab target unchanged.

``up`` is idempotent; ``down`` removes every engine (by pidfile), sshd, namespace, the bridge and
the data directories, and also cleans up after an ``up`` that was interrupted.
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TypedDict

import yaml

from k3lab import formats, paths, settings, waits
from k3lab.errors import EnvError, InputError
from k3lab.launch.endpoints import docker_client

BRIDGE = "k3emu0"
SUBNET = ipaddress.ip_network("10.213.0.0/24")
GATEWAY = "10.213.0.1"
DEVICE_NET = ipaddress.ip_network("10.214.0.0/16")
NS_PREFIX = "k3emu-"
RUN = Path("/run/k3lab-emu")
TCP_PORT = 2375
ASCEND_DIR = "/usr/local/Ascend"
FIXTURES = paths.FIXTURES


class LabEmuError(EnvError, RuntimeError):
    """The emulated lab cannot be built or reached on this machine (exit code 3)."""


def _log(msg: str) -> None:
    formats.log("k3lab labemu", msg)


def _sh(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=120)
    if check and res.returncode != 0:
        raise LabEmuError(f"{' '.join(argv)}: {(res.stderr or res.stdout).strip()}")
    return res


# ------------------------------------------------------------------------------------ hosts


class Host:
    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"h{index}"
        self.ns = f"{NS_PREFIX}{self.name}"
        self.ip = str(SUBNET.network_address + 11 + index)
        self.veth = f"k3e-{self.name}"
        self.root = _state_dir() / "hosts" / self.name
        self.sock = RUN / f"{self.name}-docker.sock"
        self.docker_pid = RUN / f"{self.name}-docker.pid"
        self.sshd_pid = RUN / f"{self.name}-sshd.pid"
        self.exec_root = RUN / f"{self.name}-exec"
        self.log = _state_dir() / "logs" / f"{self.name}.log"

    @property
    def usr_local(self) -> Path:
        return self.root / "usr-local"

    @property
    def host_key(self) -> Path:
        return self.root / "etc" / "ssh" / "k3emu_host_ed25519_key"

    def endpoint(self, kind: str) -> str:
        return f"tcp://{self.ip}:{TCP_PORT}" if kind == "tcp" else f"ssh://root@{self.ip}"

    def engine_alive(self) -> bool:
        return _pid_alive(self.docker_pid)

    def alive(self) -> bool:
        """Any process of this host still runs (its engine, its sshd, anything in its namespace).
        What a reboot or a killed run leaves (state files, data dirs) is not alive."""
        if _pid_alive(self.docker_pid) or _pid_alive(self.sshd_pid):
            return True
        return bool(_sh("ip", "netns", "pids", self.ns, check=False).stdout.split())


def _state_dir() -> Path:
    """The emulated lab's state directory ($K3LAB_EMU_DIR), read when used."""
    return settings.current().emu_dir


def _pid_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def _client_key() -> Path:
    key = _state_dir() / "client" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3lab-labemu", "-f", str(key))
    return key


def _network(hosts: list[Host]) -> None:
    if _sh("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "addr", "add", f"{GATEWAY}/{SUBNET.prefixlen}", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    existing = set(_sh("ip", "netns", "list").stdout.split())
    for h in hosts:
        if h.ns not in existing:
            _sh("ip", "netns", "add", h.ns)
        if _sh("ip", "link", "show", h.veth, check=False).returncode != 0:
            _sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
            _sh("ip", "link", "set", h.veth, "master", BRIDGE, "up")
        batch = ["link set lo up", "link set eth0 up"]
        addrs = _sh("ip", "-n", h.ns, "-o", "addr", "show", "dev", "eth0").stdout
        if f" {h.ip}/" not in addrs:
            batch.append(f"addr add {h.ip}/{SUBNET.prefixlen} dev eth0")
        for ip, prefix in _device_addresses(h):
            if f" {ip}/" not in addrs:
                batch.append(f"addr add {ip}/{prefix} dev eth0")
        _sh("ip", "-n", h.ns, "-batch", "-", input="\n".join(batch) + "\n")
    _pin_neighbours(hosts)


def _pin_neighbours(hosts: list[Host]) -> None:
    """Every peer host's device addresses as permanent neighbour entries in each host's namespace: the
    kernel's one neighbour table (gc_thresh3, 1024 by default) would overflow with learnt entries for
    every device pair (an 8-host A3 lab: ~4,000), losing pings on a healthy lab; permanent entries are
    not counted (k3lab.launch.simimage.neighbours)."""
    macs = {}
    for h in hosts:
        link = _sh("ip", "-n", h.ns, "-o", "link", "show", "dev", "eth0").stdout
        macs[h.name] = link.split("link/ether", 1)[1].split()[0] if "link/ether" in link else None
    owned = {h.name: [ip for ip, _ in _device_addresses(h) if ip] for h in hosts}
    for h in hosts:
        lines = [f"neigh replace {ip} lladdr {macs[peer]} dev eth0 nud permanent"
                 for peer, ips in owned.items() if peer != h.name and macs[peer] for ip in ips]
        if lines:
            _sh("ip", "-n", h.ns, "-batch", "-", input="\n".join(lines) + "\n")


# ----------------------------------------------------------------------- emulated hardware


def _hardware(h: Host, node: str, platform: str) -> dict:
    from k3lab.model import catalog

    count = catalog.DEVICES[platform]
    base = int(DEVICE_NET.network_address)
    devices = [{"id": d, "ip": str(ipaddress.ip_address(base + ((h.index + 1) << 8) + 10 + d)),
                "netmask": str(DEVICE_NET.netmask),
                "gateway": str(ipaddress.ip_address(base + 1))} for d in range(count)]
    # vNICs are the driver's (192.<server>.<2+die>.<199-device>, server = host index); on A3 they ride
    # on carriers in DEVICE_NET (k3sim.hw.Node.carrier), which node-init puts on the host's NIC
    return {"node": node, "platform": platform, "device_count": count, "host_ip": h.ip, "nic": "eth0",
            "super_pod_id": 0, "server_index": h.index, "hccs_net": str(DEVICE_NET), "devices": devices,
            "faults": {}}


@contextlib.contextmanager
def _k3sim_importable():
    from k3lab.launch.simimage import image

    saved = list(sys.path)
    sys.path[:0] = image.host_pythonpath()
    try:
        yield
    finally:
        sys.path[:] = saved


def _device_addresses(h: Host) -> list[tuple[str, int]]:
    path = h.root / "etc" / "k3lab-sim" / "node.json"
    if not path.exists():
        return []
    with _k3sim_importable():
        from k3sim import hw, node_init  # the driver's view of the emulated devices
    os.environ[hw.NODE_FILE_ENV] = str(path)
    try:
        return node_init.device_addresses(hw.node())
    finally:
        os.environ.pop(hw.NODE_FILE_ENV, None)


def _hccn_conf(h: Host) -> str:
    with _k3sim_importable():
        from k3sim import hw, node_init
    os.environ[hw.NODE_FILE_ENV] = str(h.root / "etc" / "k3lab-sim" / "node.json")
    try:
        return node_init.hccn_conf(hw.node())
    finally:
        os.environ.pop(hw.NODE_FILE_ENV, None)


def _filesystem(h: Host, node: str, platform: str, client_pub: str, weights: str | None = None) -> None:
    """The host's own /etc and /root/.cache (and the weights directory), as a real node has them."""
    etc = h.root / "etc"
    if not etc.exists():
        tmp = h.root / "etc.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        h.root.mkdir(parents=True, exist_ok=True)
        _sh("cp", "-a", "/etc", str(tmp))
        tmp.rename(etc)
    (etc / "k3lab-sim").mkdir(exist_ok=True)
    hw = _hardware(h, node, platform)
    (etc / "k3lab-sim" / "node.json").write_text(json.dumps(hw, indent=2))
    (etc / "hccn.conf").write_text(_hccn_conf(h))
    if Path("/etc/bash.bashrc").exists():  # as installed (the noisy-shell fault edits the host's copy)
        shutil.copyfile("/etc/bash.bashrc", etc / "bash.bashrc")
    _root_dotfiles(h)
    from k3lab.launch.simimage import image

    (etc / "ascend_install.info").write_text((image.ROOTFS / "etc" / "ascend_install.info").read_text())
    driver = h.usr_local / "Ascend" / "driver"
    driver.mkdir(parents=True, exist_ok=True)
    (driver / "version.info").write_text((image.ROOTFS / "usr/local/Ascend/driver/version.info").read_text())
    (h.root / "cache").mkdir(exist_ok=True)
    _checkpoints(checkpoint_root(h, weights))
    if not h.host_key.exists():
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"k3emu-{h.name}", "-f", str(h.host_key))
    (etc / "ssh" / "k3emu_authorized_keys").write_text(client_pub)
    os.chmod(etc / "ssh" / "k3emu_authorized_keys", 0o600)
    (etc / "ssh" / "k3emu_sshd_config").write_text("\n".join([
        f"ListenAddress {h.ip}", "Port 22", f"HostKey /etc/ssh/{h.host_key.name}",
        "AuthorizedKeysFile /etc/ssh/k3emu_authorized_keys", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        f"PidFile {h.sshd_pid}",
        # the docker CLI that docker-py runs over SSH (docker system dial-stdio) talks to this host's engine
        f"SetEnv DOCKER_HOST=unix://{h.sock}", "Subsystem sftp internal-sftp", ""]))


# what the guides' checkpoint directory holds beside config.json (K3 §2: "the model configuration,
# tokenizer, image processor, and model weight files"): small stand-ins of the Hugging Face files
CHECKPOINT_STANDINS = {
    "tokenizer_config.json": {"tokenizer_class": "TikTokenTokenizer", "k3lab_note": "emulated lab stand-in"},
    "preprocessor_config.json": {"image_processor_type": "KimiVLImageProcessor", "k3lab_note": "emulated lab stand-in"},
    "model.safetensors.index.json": {"metadata": {"total_size": 0}, "weight_map": {},
                                     "k3lab_note": "emulated lab stand-in: no weights"},
}


# root's shell start-up files on a freshly installed Debian host (base-files' copies)
DOTFILES = {".bashrc": Path("/usr/share/base-files/dot.bashrc"), ".profile": Path("/usr/share/base-files/dot.profile")}


def _root_dotfiles(h: Host) -> None:
    """The host's own root start-up files, a fresh install's, over this machine's (``_start`` binds them).

    sshd runs every command through root's bash, which sources ``~/.bashrc`` when started by sshd:
    this machine's could start pyenv or conda, ~0.1 s of CPU on every SSH session of every emulated
    host (a docker exec over ssh:// is one session, testinfra's every command another), a cost of
    the kit host's dotfiles, not of a lab node. Only these files are bound, not all of /root: the
    kit's own checkout and venv may live under it."""
    home = h.root / "root-home"
    home.mkdir(parents=True, exist_ok=True)
    for name in DOTFILES:
        (home / name).write_text(fresh_dotfile(name))


def fresh_dotfile(name: str) -> str:
    fresh = DOTFILES[name]
    return fresh.read_text() if fresh.exists() else "# k3lab labemu: a fresh host's empty start-up file\n"


def checkpoint_root(h: Host, weights: str | None) -> Path:
    """Where the host keeps its checkpoints: its /root/.cache, or its weights directory (``up --weights``)."""
    return h.root / ("weights" if weights else "cache")


def _checkpoints(cache: Path) -> None:
    """The host's checkpoint directories: the kit's config.json fixtures, completed with the other files."""
    cache.mkdir(exist_ok=True)
    for cfg in (FIXTURES / "checkpoints").glob("*/config.json"):
        dest = cache / cfg.parent.name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cfg, dest / "config.json")
        for name, doc in CHECKPOINT_STANDINS.items():
            (dest / name).write_text(json.dumps(doc, indent=2) + "\n")


def reserved_ports(inv: dict) -> dict[str, str]:
    """Per node, the planned ports inside the default ephemeral range, as a lab admin reserves them
    (the remedy of HST-PORTS: net.ipv4.ip_local_reserved_ports)."""
    from k3lab.model.inventory import Inventory
    from k3lab.preflight import hostchecks
    from k3lab.render import artefacts

    plan = artefacts.build(inv["scenario"], Inventory.model_validate(inv), {}, "lab").plan
    return {n.name: hostchecks.reserve_line([(lo, hi) for lo, hi, _ in hostchecks.planned_spans(plan, n.name)])
            for n in plan.nodes}


def _reserve_planned(hosts: list[Host], inv: dict) -> None:
    for h, ports in zip(hosts, reserved_ports(inv).values()):
        _sh("nsenter", f"--net=/run/netns/{h.ns}", "sysctl", "-q", "-w", f"net.ipv4.ip_local_reserved_ports={ports}")


def _start(h: Host, tcp: bool, weights: str | None = None) -> None:
    if h.engine_alive() and _pid_alive(h.sshd_pid):
        return
    data_root = h.root / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    h.log.parent.mkdir(parents=True, exist_ok=True)
    RUN.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)
    if not Path(ASCEND_DIR).exists():
        Path(ASCEND_DIR).mkdir(parents=True)
        Path(ASCEND_DIR, ".k3lab-labemu").touch()  # ours: down removes it
    from shlex import quote as q

    from k3lab.launch.simimage import image

    listen = [f"-H unix://{h.sock}"] + ([f"-H tcp://{h.ip}:{TCP_PORT}"] if tcp else [])
    # the host's weights directory at the planned path (up --weights); the mount point is an empty directory on
    # this machine, removed by down when up made it
    bind_weights = [f"mount --bind {q(str(checkpoint_root(h, weights)))} {q(weights)}"] if weights else []
    script = "\n".join([
        "set -e",
        f"mount --bind {h.root / 'etc'} /etc",
        "mkdir -p /root/.cache",
        f"mount --bind {h.root / 'cache'} /root/.cache",
        # the host's own root start-up files (_root_dotfiles), over those of this machine that exist
        *(f"[ ! -f /root/{n} ] || mount --bind {h.root / 'root-home' / n} /root/{n}" for n in DOTFILES),
        # the host's own driver files (version.info) at the real path; the mount point is an empty
        # directory on this machine, removed by down
        f"mount --bind {h.usr_local / 'Ascend'} {ASCEND_DIR}",
        *bind_weights,
        f"/usr/sbin/sshd -f /etc/ssh/k3emu_sshd_config -E {h.root / 'sshd.log'}",
        # the host's tool service (module docstring); the hccn_tool lock is the host's own, not this machine's /tmp
        f"K3SIM_HCCS_PING_S={q(format(settings.current().hccs_ping_s, 'g'))} "
        f"K3SIM_HCCN_LOCK={q(str(h.root / 'hccn_tool.lock'))} PYTHONPATH={q(':'.join(image.host_pythonpath()))} "
        f"{q(sys.executable)} -m k3sim.toolservice /etc/k3lab-sim/tool-service >>{q(str(h.root / 'tool-service.log'))} 2>&1 &",
        f"exec dockerd {' '.join(listen)} --data-root {data_root} --exec-root {h.exec_root} "
        f"--pidfile {h.docker_pid} --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none "
        f"--host-gateway-ip={GATEWAY}",
    ])
    with open(h.log, "ab") as log:
        subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                          "nsenter", f"--net=/run/netns/{h.ns}", "sh", "-c", script],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_ready(h: Host, timeout: float = 60) -> None:

    last = [""]

    def ready() -> bool:
        try:
            docker_client(f"unix://{h.sock}", timeout=10).ping()
            with socket.create_connection((h.ip, 22), timeout=1):
                return True
        except Exception as exc:  # engine or sshd still starting
            last[0] = repr(exc)
            return False

    if waits.poll(ready, timeout, 0.3):
        return
    tail = h.log.read_text(errors="replace")[-1500:] if h.log.exists() else ""
    raise LabEmuError(f"{h.name}: engine or sshd not ready after {timeout:.0f}s ({last[0]}); log:\n{tail}")


def _builds(images: list[str]) -> dict[str, tuple[bytes, str]]:
    """The sim image tar per guide image, built ONCE here so every engine imports the same bytes."""
    from k3lab.launch.simimage import image, vllm_ascend
    from k3lab.model import catalog

    # each guide's image carries its own vllm-ascend release (proxy, launch_online_dp.py)
    seeds = {sc.image: sc.seed for sc in catalog.SCENARIOS.values()}
    versions = {name: vllm_ascend.version_for(seeds.get(name, "")) for name in images}
    tars = {v: image.build_tar(v) for v in sorted(set(versions.values()))}
    return {name: tars[v] for name, v in versions.items()}


def _load_image(h: Host, builds: dict[str, tuple[bytes, str]]) -> None:
    """The image that carries the stand-ins, tagged with the guides' image names (checked)."""

    from k3lab.launch.simimage import image

    client = docker_client(f"unix://{h.sock}", timeout=300)
    for name, built in builds.items():
        ref = image.ensure(client, built=built)
        repo, tag = name.rsplit(":", 1)
        client.images.get(ref).tag(repo, tag)
        got = client.images.get(name)
        if ref not in got.tags:
            raise LabEmuError(f"{h.name}: {name} is {got.tags}, expected {ref}")


def guide_images() -> list[str]:
    from k3lab.model import catalog

    return sorted({sc.image for sc in catalog.SCENARIOS.values()})


# ------------------------------------------------------------------------------------ state


def _state() -> dict:
    path = _state_dir() / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _hosts_on_machine() -> list[Host]:
    """Every emulated host that exists in any form (state, namespace, pidfile, data dir)."""
    idx: set[int] = set()
    for ns in _sh("ip", "netns", "list", check=False).stdout.split():
        if ns.startswith(NS_PREFIX + "h") and ns[len(NS_PREFIX) + 1:].isdigit():
            idx.add(int(ns[len(NS_PREFIX) + 1:]))
    for base, pattern in ((RUN, "h*-*"), (_state_dir() / "hosts", "h*")):
        if base.exists():
            for p in base.glob(pattern):
                digits = p.name[1:].split("-")[0]
                if digits.isdigit():
                    idx.add(int(digits))
    idx |= {int(h["index"]) for h in _state().get("hosts", [])}
    return [Host(i) for i in sorted(idx)]


# ------------------------------------------------------------------------------- inventory


def inventory(scenario: str, hosts: list[Host], endpoint_kinds: list[str], known_hosts: Path, key: Path,
              weights: str | None = None) -> dict:
    from k3lab.model import catalog, siminventory

    inv = siminventory.default(scenario).model_dump(mode="json", exclude_defaults=True)
    nodes = inv["nodes"]
    for node, h, kind in zip(nodes, hosts, endpoint_kinds):
        node.update(local_ip=h.ip, nic="eth0", endpoint=h.endpoint(kind))
    inv.pop("sim", None)
    inv["scenario"] = scenario
    inv["lab"] = {"profile": "emulator", "known_hosts": str(known_hosts), "identity_file": str(key)}
    if weights:  # the checkpoints in the hosts' weights directory, which the containers mount read-only
        sc = catalog.get(scenario)
        inv["model_path"] = f"{weights}/{Path(sc.model_path).name}"
        if sc.dspark != "never":  # the draft checkpoint beside it (used when the scenario runs one)
            inv["draft_model_path"] = f"{weights}/{Path(sc.draft_default).name}"
        inv["mounts"] = [{"source": weights, "target": weights, "read_only": True}]
    return inv


def _weights_dir(weights: str | None) -> str | None:
    """``up --weights DIR``: a path an inventory mount takes, made on this machine as an empty mount point."""
    if weights is None:
        return None
    from k3lab.model.inventory import mount_path_problem

    if problem := mount_path_problem(weights):
        raise InputError(f"k3lab labemu: --weights {weights!r} {problem}")
    weights = weights.rstrip("/") or "/"
    if not Path(weights).exists():
        Path(weights).mkdir(parents=True)
        Path(weights, ".k3lab-labemu").touch()  # ours: down removes it
    elif not Path(weights).is_dir():
        raise LabEmuError(f"--weights {weights}: not a directory on this machine")
    return weights


def endpoint_kinds(n: int, mode: str) -> list[str]:
    """'mixed': every fourth host (and at least one when n > 1) over tcp://, the rest over ssh://."""
    if mode in ("ssh", "tcp"):
        return [mode] * n
    return ["tcp" if n > 1 and (i % 4 == 3 or (n < 4 and i == n - 1)) else "ssh" for i in range(n)]


def _clear_beyond(n: int) -> None:
    """Emulated hosts numbered n or more: refused while any of their processes runs (another lab is
    up); removed when only their files are left (a reboot, a killed run), which would otherwise block
    every later 'up' with fewer hosts."""
    stale = [h for h in _hosts_on_machine() if h.index >= n]
    live = [h for h in stale if h.alive()]
    if live:
        raise LabEmuError(f"emulated hosts {', '.join(h.name for h in live)} run beyond "
                          f"--nodes {n}; 'k3lab labemu down' first")
    if stale:
        for h in stale:
            _remove_host(h)
        _log(f"removed what was left of emulated host(s) {', '.join(h.name for h in stale)} (no process runs)")


def up(nodes: int | None, scenario: str, out: Path, mode: str = "mixed", weights: str | None = None) -> Path:
    from k3lab.model import catalog

    sc = catalog.get(scenario)
    want = len(__import__("k3lab.model.siminventory", fromlist=["default"]).default(scenario).nodes)
    n = nodes or want
    if n != want:
        raise LabEmuError(f"{scenario} needs {want} hosts; got --nodes {n}")
    if n > 200:
        raise LabEmuError("at most 200 emulated hosts")
    hosts = [Host(i) for i in range(n)]
    _clear_beyond(n)
    weights = _weights_dir(weights)
    if _state().get("weights") != weights and any(h.alive() for h in hosts):
        raise LabEmuError(f"the emulated hosts run with --weights {_state().get('weights')}; 'k3lab labemu down' first")
    kinds = endpoint_kinds(n, mode)
    t0 = time.monotonic()
    key = _client_key()
    client_pub = (key.with_suffix(".pub")).read_text()
    from k3lab.model import siminventory

    node_names = [nd.name for nd in siminventory.default(scenario).nodes]
    for h, name in zip(hosts, node_names):
        _filesystem(h, name, sc.platform, client_pub, weights)
    _network(hosts)
    known = _state_dir() / "known_hosts"
    inv = inventory(scenario, hosts, kinds, known, key, weights)
    _reserve_planned(hosts, inv)
    for h, kind in zip(hosts, kinds):
        _start(h, tcp=kind == "tcp", weights=weights)
    for h in hosts:
        _wait_ready(h)
    builds = _builds(guide_images())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda h: _load_image(h, builds), hosts))
    lines = []
    for h in hosts:
        kt, kb64 = h.host_key.with_suffix(".pub").read_text().split()[:2]
        lines.append(f"{h.ip} {kt} {kb64}")
    known.write_text("\n".join(lines) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# k3lab labemu: {n} emulated hosts for {scenario} (profile emulator)\n" +
                   yaml.safe_dump(inv, sort_keys=False))
    (_state_dir() / "state.json").write_text(json.dumps({
        "scenario": scenario, "inventory": str(out.resolve()), "known_hosts": str(known), "weights": weights,
        "hosts": [{"index": h.index, "name": h.name, "node": nm, "ip": h.ip, "ns": h.ns, "endpoint": h.endpoint(k)}
                  for h, nm, k in zip(hosts, node_names, kinds)]}, indent=2))
    _log(f"{n} emulated hosts up in {time.monotonic() - t0:.1f}s; inventory {out}")
    return out


def _kill(pidfile: Path, timeout: float = 20) -> None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    if waits.poll(gone, timeout, 0.1):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _remove_containers(h: Host) -> None:
    """Force-remove every container first, so the engine stops at once (no stop timeouts)."""

    if not h.engine_alive():
        return
    try:
        client = docker_client(f"unix://{h.sock}", timeout=30)
        for c in client.containers.list(all=True):
            c.remove(force=True)
    except Exception:
        pass


def _remove_host(h: Host) -> None:
    """The host's namespace, link, runtime files and filesystem; its engine and sshd are stopped first."""
    # anything left in the namespace (a shim, a container process) goes with it
    for pid in _sh("ip", "netns", "pids", h.ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _sh("ip", "netns", "del", h.ns, check=False)
    _sh("ip", "link", "del", h.veth, check=False)
    for p in (h.sock, h.docker_pid, h.sshd_pid):
        p.unlink(missing_ok=True)
    shutil.rmtree(h.exec_root, ignore_errors=True)
    shutil.rmtree(h.root, ignore_errors=True)
    if h.root.exists():
        _sh("rm", "-rf", "--one-file-system", str(h.root), check=False)


def down() -> int:
    hosts = _hosts_on_machine()
    weights = _state().get("weights")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(_remove_containers, hosts))
        list(pool.map(_kill, [pid for h in hosts for pid in (h.docker_pid, h.sshd_pid)]))
    for h in hosts:
        _remove_host(h)
    _sh("ip", "link", "del", BRIDGE, check=False)
    if Path(ASCEND_DIR, ".k3lab-labemu").exists():
        shutil.rmtree(ASCEND_DIR, ignore_errors=True)
    if weights and Path(weights, ".k3lab-labemu").exists() and [p.name for p in Path(weights).iterdir()] == [".k3lab-labemu"]:
        shutil.rmtree(weights, ignore_errors=True)  # the empty mount point up made, never a directory with files
    for p in (_state_dir() / "state.json", _state_dir() / "known_hosts"):
        p.unlink(missing_ok=True)
    shutil.rmtree(_state_dir() / "logs", ignore_errors=True)
    _log(f"removed {len(hosts)} emulated host(s), their engines, namespaces and the bridge {BRIDGE}")
    return 0


class HostStatus(TypedDict):
    """One emulated host as ``k3lab labemu status`` shows it."""

    host: str
    node: str  # the plan node it stands in for ("?" when state.json does not say)
    ip: str
    endpoint: str
    engine: str  # its Docker engine: up or down
    sshd: str  # up or down
    containers: str  # name:status,... ("none", "-" when the engine is down, or the error)


def status() -> list[HostStatus]:
    rows = []
    state = {h["index"]: h for h in _state().get("hosts", [])}
    for h in _hosts_on_machine():
        info = state.get(h.index, {})
        containers = "-"
        if h.engine_alive():
            try:

                cl = docker_client(f"unix://{h.sock}", timeout=10)
                containers = ",".join(f"{c.name}:{c.status}" for c in cl.containers.list(all=True)) or "none"
            except Exception as exc:
                containers = f"error {exc!r}"
        rows.append(HostStatus(host=h.name, node=info.get("node", "?"), ip=h.ip, endpoint=info.get("endpoint", "?"),
                               engine="up" if h.engine_alive() else "down",
                               sshd="up" if _pid_alive(h.sshd_pid) else "down", containers=containers))
    return rows


# ------------------------------------------------------------- breaking a host (fault matrix)


def hosts() -> list[tuple[Host, str, str]]:
    """The emulated hosts that are up: (host, its node, its endpoint), from the state ``up`` wrote."""
    return [(Host(int(h["index"])), h["node"], h["endpoint"]) for h in _state().get("hosts", [])]


def stop_sshd(h: Host) -> None:
    """The host's sshd stopped: its ssh:// endpoint refuses connections (a crashed or stopped sshd)."""
    _kill(h.sshd_pid)
    h.sshd_pid.unlink(missing_ok=True)


def start_sshd(h: Host) -> None:
    """The host's sshd started again in the host's own namespaces (those of its engine)."""
    pid = h.docker_pid.read_text().strip()
    _sh("nsenter", f"--target={pid}", "--mount", "--net", "/usr/sbin/sshd", "-f", "/etc/ssh/k3emu_sshd_config",
        "-E", str(h.root / "sshd.log"))
    _wait_ready(h)


def link(h: Host, up: bool) -> None:
    """The host's link to the lab network down (packets vanish, nothing refuses) or up again."""
    _sh("ip", "link", "set", h.veth, "up" if up else "down")


# ---------------------------------------------------------------------------------- commands


# Host faults: a lab host whose own files or kernel settings are wrong before a run starts (issue #21).
HOST_FAULTS = {
    "no-config": "the model's config.json is missing from the host's checkpoint directory",
    "other-checkpoint": "the host holds a different checkpoint (another config.json)",
    "old-driver": "the host's driver is older (version.info Version=24.1.0)",
    "hccn-entry": "/etc/hccn.conf lacks the last device's address",
    "unreserved-ports": "the planned ports are not reserved (the kernel's default)",
    "noisy-shell": "root's shell prints a banner for every SSH command (/etc/bash.bashrc echoes before its "
                   "interactive guard)",
    # hardware faults in the host's device table, which the image's npu-smi / hccn_tool read as the driver
    "link-down": "device 2's link is DOWN (link-down:N: device N)",
    "npu-alarm": "device 3 reports health Alarm (npu-alarm:N: device N)",
    "pair-unreachable": "no device of the next host is reachable from this host",
}


def _host_of(node: str) -> Host:
    for h in _state().get("hosts", []):
        if h["node"] == node:
            return Host(int(h["index"]))
    raise LabEmuError(f"no emulated host holds node {node!r} ('k3lab labemu status')")


def break_host(node: str, fault: str, model_dir: str) -> None:
    """Break one host's facts in place; ``repair`` (or ``up``) puts them back."""
    h = _host_of(node)
    ck = checkpoint_root(h, _state().get("weights")) / model_dir
    if fault == "no-config":
        (ck / "config.json").unlink(missing_ok=True)
    elif fault == "other-checkpoint":
        cfg = json.loads((ck / "config.json").read_text())
        (ck / "config.json").write_text(json.dumps({**cfg, "k3lab_revision": "other"}, indent=2))
    elif fault == "old-driver":
        info = h.usr_local / "Ascend" / "driver" / "version.info"
        info.write_text(re.sub(r"(?m)^Version=.*$", "Version=24.1.0", info.read_text()))
    elif fault == "hccn-entry":
        conf = h.root / "etc" / "hccn.conf"
        lines = conf.read_text().splitlines()
        last = max(int(m.group(1)) for ln in lines if (m := re.match(r"address_(\d+)=", ln)))
        conf.write_text("\n".join(ln for ln in lines if not ln.startswith(f"address_{last}=")) + "\n")
    elif fault.partition(":")[0] in ("link-down", "npu-alarm", "pair-unreachable"):
        _device_fault(h, *fault.partition(":")[::2])
    elif fault == "noisy-shell":  # bash reads /etc/bash.bashrc for every command sshd runs (Debian)
        rc = h.root / "etc" / "bash.bashrc"
        rc.write_text(f'echo "Welcome to {node}, a lab node"\n' + (rc.read_text() if rc.exists() else ""))
    elif fault == "unreserved-ports":
        _sh("nsenter", f"--net=/run/netns/{h.ns}", "sysctl", "-q", "-w", "net.ipv4.ip_local_reserved_ports=")
    else:
        raise LabEmuError(f"unknown host fault {fault!r}; one of {', '.join(HOST_FAULTS)}")


def _device_fault(h: Host, fault: str, device: str = "") -> None:
    """``device`` (``link-down:15``): another device than the default (2 for a link, 3 for an alarm)."""
    table = h.root / "etc" / "k3lab-sim" / "node.json"
    hw = json.loads(table.read_text())
    faults = hw.setdefault("faults", {})
    if device and not (device.isdigit() and int(device) < int(hw.get("device_count", 16))):
        raise LabEmuError(f"{fault}:{device}: no such device on {h.name}")
    if fault == "link-down":
        faults.setdefault("devices", {}).setdefault(device or "2", {})["link"] = "DOWN"
    elif fault == "npu-alarm":
        faults.setdefault("devices", {}).setdefault(device or "3", {})["health"] = "Alarm"
    else:
        hosts = sorted(int(x["index"]) for x in _state().get("hosts", []))
        peer = Host(hosts[(hosts.index(h.index) + 1) % len(hosts)])
        peer_hw = json.loads((peer.root / "etc" / "k3lab-sim" / "node.json").read_text())
        with _k3sim_importable():
            from k3sim import hw as simhw
        server = int(peer_hw.get("server_index", 0))
        faults["unreachable"] = [a for d in peer_hw["devices"]
                                 for a in (d["ip"], simhw.vnic_address(server, int(d["id"])))]
    table.write_text(json.dumps(hw, indent=2))


def repair() -> None:
    """Every host's files and port reservations as ``up`` made them."""
    from k3lab.model import catalog

    state = _state()
    inv = yaml.safe_load(Path(state["inventory"]).read_text())
    platform = catalog.get(state["scenario"]).platform
    client_pub = (_client_key().with_suffix(".pub")).read_text()
    hosts = [Host(int(h["index"])) for h in state["hosts"]]
    for h, info in zip(hosts, state["hosts"]):
        _filesystem(h, info["node"], platform, client_pub, state.get("weights"))
    _reserve_planned(hosts, inv)


def _break_or_repair(args: argparse.Namespace) -> int:
    if args.action == "repair":
        repair()
        _log("every emulated host repaired")
        return 0
    from k3lab.model import siminventory
    from k3lab.render import artefacts

    state = _state()
    if not args.node or not args.fault:
        raise LabEmuError("break needs --node and --fault")
    plan = artefacts.build(state["scenario"], siminventory.default(state["scenario"]), {}, "sim").plan
    break_host(args.node, args.fault, Path(plan.expect.model_path).name)
    _log(f"host of {args.node}: {HOST_FAULTS[args.fault.partition(':')[0]]} ({args.fault})")
    return 0


def _print_status(doc: dict) -> None:
    if not doc["hosts"]:
        print("no emulated hosts")
    for r in doc["hosts"]:
        print(f"{r['host']:4} {r['node']:6} {r['ip']:12} {r['endpoint']:28} engine {r['engine']:4} "
              f"sshd {r['sshd']:4} {r['containers']}")


def cmd_labemu(args: argparse.Namespace) -> int:
    try:
        if args.action == "up":
            up(args.nodes, args.scenario, Path(args.out), args.endpoints, getattr(args, "weights", None))
            return 0
        if args.action == "down":
            return down()
        if args.action in ("break", "repair"):
            return _break_or_repair(args)
        formats.emit(args, {"hosts": status()}, _print_status)
        return 0
    except LabEmuError as exc:
        print(f"k3lab labemu: {exc}", file=sys.stderr)
        return exc.exit_code
