"""The host stage: each host check's fault (on the sampled node and another), its healthy case, and the
testinfra backends the stage reads hosts through (no Docker, no SSH: fake endpoints)."""
from __future__ import annotations

import json

import paramiko
import pytest

from k3lab.launch import hoststage
from k3lab.launch.endpoints import SshOptions
from k3lab.model import siminventory
from k3lab.preflight import checks
from k3lab.preflight import hostchecks as hc
from k3lab.render import artefacts

CONFIG = {"text_config": {"num_attention_heads": 64, "num_hidden_layers": 93}}


def _plan(scenario: str = "a3_pd_1m"):
    inv = siminventory.default(scenario).model_dump()
    for i, n in enumerate(inv["nodes"]):
        n["endpoint"] = f"ssh://root@10.213.0.{11 + i}"
        n["local_ip"] = f"10.213.0.{11 + i}"
    from k3lab.model.inventory import Inventory

    return artefacts.build(scenario, Inventory.model_validate(inv), {}, "lab").plan


def _healthy(plan) -> dict[str, hc.HostFacts]:
    out = {}
    for node in plan.nodes:
        spans = hc.planned_spans(plan, node.name)
        cks = [hc.Checkpoint(path=p, host_path=hc.host_path(node.container.mounts, p) or "", present=list(hc.CHECKPOINT_FILES),
                             digest="ab" * 64, config=CONFIG) for p in hc.model_paths(plan, node)]
        out[node.name] = hc.HostFacts(
            node.name, node.address, driver={"Version": "25.2.0"}, install={"Driver_Install_Status": "complete"},
            hccn_conf={f"address_{d}": f"29.1.0.{d}" for d in range(node.device_count)}, checkpoints=cks,
            port_range="32768\t60999", reserved_ports=hc.reserve_line([(lo, hi) for lo, hi, _ in spans]),
            free_bytes={"/var/lib/docker": 100 << 30}, mem_available=64 << 30, docker_version="26.1.4")
    return out


@pytest.fixture(scope="module")
def plan():
    return _plan()


def _ids(plan, facts) -> set[tuple[str, tuple[str, ...]]]:
    return {(f.check, f.nodes) for f in hc.evaluate(plan, facts)}


def test_healthy_hosts_pass(plan):
    assert hc.evaluate(plan, _healthy(plan)) == []


@pytest.mark.parametrize("node", ["p1", "d3"])  # on-sample and off-sample
@pytest.mark.parametrize("fault,check", [
    ("older_driver", "HST-DRIVER"), ("no_driver", "HST-DRIVER"), ("no_install", "HST-DRIVER"),
    ("firmware", "HST-FIRMWARE"), ("no_hccn", "HST-HCCN-CONF"), ("hccn_entry", "HST-HCCN-CONF"),
    ("no_config", "HST-CHECKPOINT"), ("other_checkpoint", "HST-CHECKPOINT-SAME"), ("heads", "HST-MODEL"),
    ("ports", "HST-PORTS"), ("disk", "HST-DISK"), ("memory", "HST-MEMORY"), ("docker", "HST-DOCKER"),
    ("unreachable", "HST-REACH"),
])
def test_each_fault_names_its_node(plan, node, fault, check):
    facts = _healthy(plan)
    f = facts[node]
    if fault == "firmware":
        for other in facts.values():
            other.firmware = {"Version": "7.5.0.1"}
    _break(f, fault)
    found = hc.evaluate(plan, facts)
    assert {(x.check, x.nodes) for x in found} == {(check, (node,))}, found
    assert f"{node} ({f.host})" in found[0].message and "Remedy:" in found[0].message


def _break(f: hc.HostFacts, fault: str) -> None:
    ck = f.checkpoints[0]
    change = {
        "older_driver": lambda: setattr(f, "driver", {"Version": "24.1.0"}),
        "no_driver": lambda: setattr(f, "driver", None),
        "no_install": lambda: setattr(f, "install", None),
        "firmware": lambda: setattr(f, "firmware", {"Version": "7.1.0.3"}),
        "no_hccn": lambda: setattr(f, "hccn_conf", None),
        "hccn_entry": lambda: f.hccn_conf.pop("address_7"),
        "no_config": lambda: (ck.present.remove("config.json"), setattr(ck, "config", None), setattr(ck, "digest", None)),
        "other_checkpoint": lambda: setattr(ck, "digest", "cd" * 64),
        "heads": lambda: setattr(ck, "config", {"num_attention_heads": 63, "num_hidden_layers": 93}),
        "ports": lambda: setattr(f, "reserved_ports", ""),
        "disk": lambda: setattr(f, "free_bytes", {"/var/lib/docker": 1 << 30}),
        "memory": lambda: setattr(f, "mem_available", 100 << 20),
        "docker": lambda: setattr(f, "docker_version", "19.03.15"),
        "unreachable": lambda: setattr(f, "error", "NoValidConnectionsError: port 22"),
    }
    change[fault]()


def test_ports_remedy_prints_the_sysctl_line(plan):
    facts = _healthy(plan)
    facts["p0"].reserved_ports = "8000"
    found = hc.evaluate(plan, facts)
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=8000,36000-36015,45000-45511" in found[0].message
    assert "mooncake handshake" in found[0].message


def test_ports_outside_the_range_need_no_reservation(plan):
    facts = _healthy(plan)
    for f in facts.values():
        f.port_range, f.reserved_ports = "61000 65000", ""
    assert hc.evaluate(plan, facts) == []


def test_reserved_port_syntax():
    assert hc.parse_ports("8000,36000-36015, 45000-45511") == [(8000, 8000), (36000, 36015), (45000, 45511)]
    assert hc.parse_ports("") == []
    assert hc.reserve_line([(36016, 36031), (36000, 36015), (8000, 8000)]) == "8000,36000-36031"


def test_host_path_maps_container_paths_through_the_longest_mount(plan):
    mounts = plan.nodes[0].container.mounts
    assert hc.host_path(mounts, "/root/.cache/Kimi-K3.1-Pro-w4a8") == "/root/.cache/Kimi-K3.1-Pro-w4a8"
    assert hc.host_path(mounts, "/mnt/weights/Kimi-K3") is None


def test_model_path_outside_every_mount_is_refused_before_anything():
    from k3lab.tools import faults

    r = faults.m_mount_paths()
    found = [f for f in checks.run(r.plan, r.files) if f.check == "PF-MOUNT-PATHS"]
    assert found and all(f.severity == "error" for f in found)
    assert "/mnt/weights/Kimi-K3" in found[0].message and "/root/.cache" in found[0].message


def test_checkpoint_remedy_never_asks_to_write_into_the_kit():
    chk = next(c for c in checks.CHECKS if c.id == "PF-CHECKPOINT")
    assert "fixtures" not in chk.remedy and "HST-MODEL" in chk.remedy


def test_every_host_check_is_listed():
    from k3lab.cli.main import main

    ids = {c["id"] for c in hc.catalogue()}
    assert {"HST-DRIVER", "HST-HCCN-CONF", "HST-CHECKPOINT", "HST-CHECKPOINT-SAME", "HST-PORTS"} <= ids
    assert callable(main)


# ------------------------------------------------------------------------- testinfra backends


class _Api:
    """A node's host for the helper backend: the real /bin/sh runs each exec, with the host's files
    under a temporary root (their paths rewritten), /proc the test machine's own."""

    def __init__(self, root, files: dict[str, str]) -> None:
        self.root, self.execs, self.paths = root, [], sorted(files, key=len, reverse=True)
        for path, text in files.items():
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).write_text(text)
        (root / "var/lib/docker").mkdir(parents=True, exist_ok=True)
        (root / "root/.cache").mkdir(parents=True, exist_ok=True)

    def exec_create(self, container, argv, **kw):
        assert argv[2:6] == ["chroot", "/host", "/bin/sh", "-c"], argv  # timeout N chroot /host /bin/sh -c CMD
        self.execs.append(argv[-1])
        return {"Id": str(len(self.execs))}

    def exec_start(self, exec_id, demux):
        import subprocess

        script = self.execs[int(exec_id) - 1]
        import re

        # one pass, longest path first: a rewritten path is never rewritten again
        alt = "|".join(re.escape(p) for p in self.paths + ["/var/lib/docker", "/root/.cache"])
        script = re.sub(f"({alt})", lambda m: f"{self.root}{m.group(1)}", script)
        self._last = subprocess.run(["/bin/sh", "-c", script], capture_output=True)
        return self._last.stdout, self._last.stderr

    def exec_inspect(self, exec_id):
        return {"ExitCode": self._last.returncode}


class _Client:
    def version(self):
        return {"Version": "26.1.4"}

    def info(self):
        return {"DockerRootDir": "/var/lib/docker"}


def _files(node, model_dir="/root/.cache/Kimi-K3.1-Pro-w4a8") -> dict[str, str]:
    files = {hc.DRIVER_INFO: "Version=25.2.0\n", hc.INSTALL_INFO: "Driver_Install_Status=complete\n",
             hc.HCCN_CONF: "".join(f"address_{d}=29.1.0.{d}\n" for d in range(node.device_count))}
    for name in hc.CHECKPOINT_FILES:
        files[f"{model_dir}/{name}"] = json.dumps(CONFIG) if name == "config.json" else "{}"
    return files


def test_helper_backend_reads_the_host_through_testinfra(plan, tmp_path):
    node = plan.nodes[1]
    api = _Api(tmp_path, _files(node))
    host = hoststage._host(hoststage.HelperBackend(node.name, api, "helper"))
    facts = hoststage.gather(plan, node, host, _Client())
    assert len(api.execs) == 1  # one round trip per host
    assert facts.driver == {"Version": "25.2.0"} and len(facts.hccn_conf or {}) == node.device_count
    ck = facts.checkpoints[0]
    assert ck.present == sorted(hc.CHECKPOINT_FILES) and len(ck.digest or "") == 128 and ck.config == CONFIG
    assert facts.firmware is None and facts.install == {"Driver_Install_Status": "complete"}
    assert facts.port_range and facts.mem_available and set(facts.free_bytes) == {"/var/lib/docker", "/root/.cache"}
    facts.port_range, facts.reserved_ports = "32768 60999", ""
    found = hc.evaluate(plan.model_copy(update={"nodes": [node]}), {node.name: facts})
    assert [f.check for f in found] == ["HST-PORTS"]  # the kernel's default range, nothing reserved


def test_a_missing_file_is_read_as_missing(plan, tmp_path):
    node = plan.nodes[1]
    files = _files(node)
    del files["/root/.cache/Kimi-K3.1-Pro-w4a8/config.json"], files[hc.HCCN_CONF]
    api = _Api(tmp_path, files)
    facts = hoststage.gather(plan, node, hoststage._host(hoststage.HelperBackend(node.name, api, "helper")), _Client())
    ck = facts.checkpoints[0]
    assert "config.json" not in ck.present and ck.digest is None and ck.config is None and facts.hccn_conf is None


def test_every_path_reaches_the_shell_quoted(plan):
    node = plan.nodes[0].model_copy(deep=True)
    node.container.mounts[-1].source = "/srv/x; touch /tmp/pwned"
    cmds = hoststage._commands(plan, node, "/var/lib/docker")
    assert all("'/srv/x; touch /tmp/pwned" in c for k, c in cmds.items() if k.startswith(("ls ", "sum ", "config ")))


def test_paramiko_backend_refuses_unknown_host_keys(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    backend = hoststage.KitParamikoBackend("ssh://root@10.213.0.11", SshOptions(str(known), "/nonexistent/key"))
    seen = {}

    def connect(self, **cfg):
        seen.update(cfg, policy=self._policy, keys=len(self.get_host_keys()))

    orig = paramiko.SSHClient.connect
    paramiko.SSHClient.connect = connect  # type: ignore[method-assign]
    try:
        assert backend.client is not None
    finally:
        paramiko.SSHClient.connect = orig  # type: ignore[method-assign]
    assert isinstance(seen["policy"], paramiko.RejectPolicy)
    assert seen["hostname"] == "10.213.0.11" and seen["username"] == "root" and seen["port"] == 22
    assert seen["key_filename"] == "/nonexistent/key" and seen["look_for_keys"] is False


def test_a_node_past_the_deadline_is_named_and_the_others_proceed(plan, monkeypatch):
    import threading

    release = threading.Event()

    def node_facts(plan, node, pool, run_id):
        if node.name == "d2":
            release.wait(5)
        return _healthy(plan)[node.name]

    monkeypatch.setattr(hoststage, "_node_facts", node_facts)
    got = hoststage.collect(plan, pool=None, run_id="r", deadline=0.5)  # type: ignore[arg-type]
    release.set()
    assert got["d2"].error and "deadline" in got["d2"].error
    assert not any(f.error for n, f in got.items() if n != "d2")
    found = hc.evaluate(plan, got)
    assert {(f.check, f.nodes) for f in found} == {("HST-REACH", ("d2",))}


def test_a_node_whose_shell_prints_is_named_for_that_not_as_unreachable(plan, monkeypatch):
    from types import SimpleNamespace

    import requests

    def node_facts(plan, node, pool, run_id):
        if node.name == "p1":  # docker-py over ssh:// reads the banner where the engine's HTTP should be
            raise requests.exceptions.ConnectionError("('Connection aborted.', BadStatusLine('Welcome\\n'))")
        return _healthy(plan)[node.name]

    monkeypatch.setattr(hoststage, "_node_facts", node_facts)
    monkeypatch.setattr(hoststage, "shell_noise", lambda endpoint, ssh: "Welcome to the lab\n")
    got = hoststage.collect(plan, pool=SimpleNamespace(ssh=None), run_id="r")  # type: ignore[arg-type]
    assert "root's shell prints 19 byte(s)" in got["p1"].error and "'Welcome to the lab'" in got["p1"].error
    assert "LPF-SSH-SHELL" in got["p1"].error and not any(f.error for n, f in got.items() if n != "p1")
    monkeypatch.setattr(hoststage, "shell_noise", lambda endpoint, ssh: "")  # a clean shell: the error as it came
    assert "BadStatusLine" in hoststage.collect(plan, pool=SimpleNamespace(ssh=None), run_id="r")["p1"].error  # type: ignore[arg-type]


def test_a_checkpoint_under_an_inventory_mount_is_read_at_the_mounts_source(tmp_path):
    """Issue #36 item 1: model_path /mnt/weights/... in the container, the weights at the mount's source on the
    host (here another path, as when one node keeps them elsewhere): the host stage reads them there."""
    from k3lab.model.inventory import Inventory

    inv = siminventory.default("a3_pd_1m").model_dump()
    for i, n in enumerate(inv["nodes"]):
        n["endpoint"], n["local_ip"] = f"ssh://root@10.213.0.{11 + i}", f"10.213.0.{11 + i}"
    inv.update(model_path="/mnt/weights/Kimi-K3.1-Pro", mounts=[{"source": "/srv/nfs/weights", "target": "/mnt/weights",
                                                                  "read_only": True}])
    plan = artefacts.build("a3_pd_1m", Inventory.model_validate(inv), {}, "lab").plan
    node = plan.nodes[1]
    assert hc.host_path(node.container.mounts, "/mnt/weights/Kimi-K3.1-Pro") == "/srv/nfs/weights/Kimi-K3.1-Pro"
    api = _Api(tmp_path, _files(node, "/srv/nfs/weights/Kimi-K3.1-Pro"))
    api.paths.append("/srv/nfs/weights")  # the host's directory, rewritten into the temporary root too
    facts = hoststage.gather(plan, node, hoststage._host(hoststage.HelperBackend(node.name, api, "helper")), _Client())
    ck = facts.checkpoints[0]
    assert (ck.path, ck.host_path) == ("/mnt/weights/Kimi-K3.1-Pro", "/srv/nfs/weights/Kimi-K3.1-Pro")
    assert ck.present == sorted(hc.CHECKPOINT_FILES) and ck.config == CONFIG
    api = _Api(tmp_path / "empty", _files(node))  # the weights only in /root/.cache: named with the host path
    api.paths.append("/srv/nfs/weights")
    facts = hoststage.gather(plan, node, hoststage._host(hoststage.HelperBackend(node.name, api, "helper")), _Client())
    found = hc.check_checkpoints([facts])
    assert found and "(host /srv/nfs/weights/Kimi-K3.1-Pro) lacks" in found[0].message
