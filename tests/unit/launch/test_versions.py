"""Version probes: parsing of the on-node probe output, version matching, sim stand-in metadata."""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab import paths
from k3lab.launch import versions
from k3lab.launch.endpoints import CommandResult

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "versions"


def test_probe_output_of_a_lab_node():
    got = versions.parse_probe((FIX / "probe-a3-lab.txt").read_text())
    assert got == {"vllm": "0.23.0", "vllm_ascend": "0.23.0.post1", "memcache_hybrid": "1.3.0",
                   "memfabric_hybrid": "1.3.0", "driver": "25.2.0", "cann": "8.3.RC1", "npu_smi": "25.2.0"}


def test_probe_output_with_nothing_installed():
    got = versions.parse_probe((FIX / "probe-missing.txt").read_text())
    assert set(got.values()) == {None}


@pytest.mark.parametrize("actual, expected, ok", [
    ("0.23.0", "0.23.0", True), ("0.23.1", "0.23.0", False), ("0.23.0rc1", "0.23.0", False),
    ("0.30.0rc2", "0.30.0", False), ("1.3.0", "1.3", True), (None, "0.23.0", False), ("anything", "any", True),
    ("8.3.RC1", "8.3.RC1", True), ("8.3.rc1", "8.3.RC1", True),  # PEP 440 normalised: the same version
    # a pin is exact (#35): a patch build, a local fork or another epoch is not the guide's version
    ("0.23.0.post1", "0.23.0", False), ("0.23.0+ascend", "0.23.0", False), ("1!0.23.0", "0.23.0", False),
    ("0.23.0.dev1", "0.23.0", False), ("0.23.0-fork", "0.23.0", False), ("0.23.0.1", "0.23.0", False),
    ("25.2.0-custom", "25.2.0-custom", True), ("25.2.0-custom", "25.2.0", False),  # not PEP 440: exact string
    # a declared range is a specifier set
    ("0.23.0.post1", ">=0.23.0,<0.24", True), ("0.23.5", ">=0.23,<0.24", True), ("0.24.0", ">=0.23,<0.24", False),
    ("0.23.0rc1", ">=0.23,<0.24", False), ("0.23.0.post1", "==0.23.0.*", True), ("0.23.1", "==0.23.0.*", False),
    ("0.23.0.post2", "~=0.23.0", True), ("8.3.RC1x", ">=8", False),  # not a version: outside every range
])
def test_version_matching(actual, expected, ok):
    assert versions.matches(actual, expected) is ok


@pytest.mark.parametrize("expect", [">=0.23,<", "=>0.23", "==", "~=1"])
def test_a_range_that_is_no_specifier_set_is_refused(expect):
    from k3lab.model import policy

    with pytest.raises(policy.PolicyError, match="expect"):
        policy.parse(f"defaults:\n  versions:\n    - {{component: vllm, expect: '{expect}'}}\n")


def test_probe_names_nodes_without_a_container_as_unanswered(tmp_path):
    from types import SimpleNamespace

    out = (FIX / "probe-a3-lab.txt").read_text()
    nodes = [SimpleNamespace(name="node0"), SimpleNamespace(name="node1")]
    run = SimpleNamespace(dir=tmp_path, backend=_Backend({"node0": out}),
                          plan=SimpleNamespace(nodes=nodes, seed="seeds/000_d4c4fad20ac2ebd8.txt (Kimi-K3)"))
    doc = versions.probe(run)
    assert list(doc["nodes"]) == ["node0"] and "node1" in doc["unanswered"]


def test_summary_flags_mixed_versions():
    s = versions.summarise({"p0": {"vllm_ascend": "0.30.0"}, "d0": {"vllm_ascend": "0.23.0"}, "meta": {}})
    assert s["vllm_ascend"] == "mixed: 0.23.0 | 0.30.0" and s["vllm"] is None


def test_guide_versions_and_sim_metadata_agree():
    assert versions.guide_of("k3_a3_mixed")["vllm_ascend"] == "0.23.0"
    assert versions.guide_of("a3_pd")["vllm_ascend"] == "0.30.0"
    files = versions.sim_package_files("seeds/002_6ab7298b1aa1dc3e.txt (Kimi K3.1 Pro, vLLM-Ascend 0.30.0)")
    meta = files["/opt/k3lab-sim/site/vllm_ascend-0.30.0.dist-info/METADATA"][0].decode()
    assert "Name: vllm-ascend\nVersion: 0.30.0" in meta


def test_sim_rootfs_carries_the_real_version_files():
    rootfs = paths.SIM / "rootfs"
    cann = next((rootfs / "usr/local/Ascend/ascend-toolkit/latest").glob("*-linux/ascend_toolkit_install.info"))
    assert "version=" in cann.read_text()
    assert (rootfs / "usr/local/Ascend/driver/version.info").read_text().startswith("Version=")
    assert (rootfs / "opt/k3lab-sim/site/memcache_hybrid-1.3.0.dist-info/METADATA").is_file()


class _Backend:
    def __init__(self, outputs):
        self.outputs = outputs
        self.containers = {n: _Container() for n in outputs}

    def exec(self, node, cmd, timeout=30):
        assert cmd[:2] == ["bash", "-c"] and "importlib" in cmd[2]
        return CommandResult(" ".join(cmd), 0, self.outputs[node], host=node)

    def parallel(self, fn, nodes, deadline=None):
        for n in nodes:
            fn(n)
        return {}


class _Container:
    attrs = {"Image": "sha256:abc", "Config": {"Image": "quay.io/ascend/vllm-ascend:kimi-k3-a3"}}

    class client:
        class images:
            @staticmethod
            def get(_id):
                class Image:
                    attrs = {"RepoDigests": ["quay.io/ascend/vllm-ascend@sha256:0123"]}
                return Image()

    def reload(self):
        pass


def test_probe_writes_versions_json(tmp_path):
    from types import SimpleNamespace

    out = (FIX / "probe-a3-lab.txt").read_text()
    nodes = [SimpleNamespace(name="node0"), SimpleNamespace(name="node1")]
    run = SimpleNamespace(dir=tmp_path, backend=_Backend({"node0": out, "node1": out}),
                          plan=SimpleNamespace(nodes=nodes, seed="seeds/000_d4c4fad20ac2ebd8.txt (Kimi-K3)"))
    doc = versions.probe(run)
    assert versions.load(tmp_path) == doc
    assert doc["summary"]["image"] == "quay.io/ascend/vllm-ascend@sha256:0123"
    assert doc["summary"]["vllm_ascend"] == "0.23.0.post1" and doc["guide"]["vllm_ascend"] == "0.23.0"
