"""Inventory mounts (issue #36 item 1): host directories the lab's containers mount beside the guide's,
validated strictly (absolute, normal, one line, no ':' for docker run -v, no target on or above what the
container needs, no duplicate target), a node entry overriding the inventory's of the same target."""
from __future__ import annotations

import pytest

from k3lab import errors
from k3lab.cli import main as cli
from k3lab.model import inventory, siminventory

SID = "a3_pd_1m"


def base(mounts=None, node_mounts=None) -> dict:
    data = siminventory.default(SID).model_dump(mode="json", exclude_defaults=True)
    if mounts is not None:
        data["mounts"] = mounts
    if node_mounts is not None:
        data["nodes"][0]["mounts"] = node_mounts
    return data


def test_a_mount_takes_source_target_and_read_only():
    inv = inventory.parse(base([{"source": "/mnt/weights/", "read_only": True},
                                {"source": "/srv/nfs/ckpt", "target": "/root/.cache/Kimi-K3.1-Pro-w4a8"}]))
    m = inv.mounts_for(inv.nodes[0])
    assert [(x.source, x.container_path, x.read_only) for x in m] == [
        ("/mnt/weights", "/mnt/weights", True),  # trailing '/' dropped, target defaults to source
        ("/srv/nfs/ckpt", "/root/.cache/Kimi-K3.1-Pro-w4a8", False)]  # below /root/.cache is fine


def test_a_node_entry_overrides_the_inventorys_for_the_same_target():
    inv = inventory.parse(base([{"source": "/mnt/weights", "read_only": True}, {"source": "/mnt/tok"}],
                               [{"source": "/scratch/weights", "target": "/mnt/weights"}, {"source": "/mnt/extra"}]))
    first = [(m.source, m.container_path, m.read_only) for m in inv.mounts_for(inv.nodes[0])]
    assert first == [("/scratch/weights", "/mnt/weights", False), ("/mnt/tok", "/mnt/tok", False),
                     ("/mnt/extra", "/mnt/extra", False)]
    assert [m.source for m in inv.mounts_for(inv.nodes[1])] == ["/mnt/weights", "/mnt/tok"]


def test_no_mounts_key_means_none():
    inv = inventory.parse(base())
    assert inv.mounts == [] and all(inv.mounts_for(n) == [] for n in inv.nodes)


@pytest.mark.parametrize("mount, words", [
    pytest.param({"source": "mnt/weights"}, ["mounts.0.source", "absolute"], id="relative"),
    pytest.param({"source": "/mnt/../etc"}, ["mounts.0.source", "'..'"], id="dotdot"),
    pytest.param({"source": "/mnt/./w"}, ["mounts.0.source", "'.'"], id="dot"),
    pytest.param({"source": "/mnt//w"}, ["mounts.0.source", "'//'"], id="double-slash"),
    pytest.param({"source": "/mnt/w\x00"}, ["mounts.0.source", "one line"], id="nul"),
    pytest.param({"source": "/mnt/w\nrm -rf /"}, ["mounts.0.source", "one line"], id="newline"),
    pytest.param({"source": "/mnt/w:/etc"}, ["mounts.0.source", "':'"], id="colon"),
    pytest.param({"source": "/mnt/w", "target": "/root"}, ["target /root", "would hide /root/.cache"], id="above-cache"),
    pytest.param({"source": "/mnt/w", "target": "/root/.cache"}, ["target /root/.cache", "already"], id="on-cache"),
    pytest.param({"source": "/mnt/w", "target": "/"}, ["target /", "would hide"], id="root"),
    pytest.param({"source": "/mnt/w", "target": "/usr/local"}, ["would hide /usr/local/dcmi"], id="driver"),
    pytest.param({"source": "/mnt/w", "target": "/etc/hccn.conf"}, ["/etc/hccn.conf"], id="hccn"),
    pytest.param({"source": "/mnt/w", "target": "/root/k3lab"}, ["paths.workdir"], id="workdir"),
    pytest.param({"source": "/mnt/w", "target": "/vllm-workspace/vllm-ascend/examples"},
                 ["vllm_ascend_source_dir"], id="image-checkout"),
    pytest.param({"source": "/mnt/w", "target": "/proc/w"}, ["/proc"], id="proc"),
    pytest.param({"source": "/mnt/w", "read_only": "yes"}, ["mounts.0.read_only", "boolean"], id="ro-string"),
    pytest.param({"source": "/mnt/w", "read_only": 1}, ["mounts.0.read_only", "boolean"], id="ro-int"),
    pytest.param({"source": "/mnt/w", "readonly": True}, ["mounts.0.readonly", "read_only"], id="misspelt"),
    pytest.param({"target": "/mnt/w"}, ["mounts.0.source"], id="no-source"),
])
def test_bad_mounts_are_refused_naming_the_field(mount, words):
    with pytest.raises(inventory.InventoryError) as exc:
        inventory.parse(base([mount]))
    for w in words:
        assert w in str(exc.value), str(exc.value)


def test_duplicate_targets_are_refused_per_list():
    with pytest.raises(inventory.InventoryError, match="two entries have target /mnt/w"):
        inventory.parse(base([{"source": "/mnt/w"}, {"source": "/srv/w", "target": "/mnt/w"}]))
    with pytest.raises(inventory.InventoryError, match=r"nodes\.p0\.mounts: two entries have target /mnt/w"):
        inventory.parse(base(None, [{"source": "/mnt/w"}, {"source": "/mnt/w"}]))


def test_a_bad_mount_is_one_line_exit_2_on_the_cli(tmp_path, capsys):
    import yaml

    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(base([{"source": "/mnt/w", "target": "/root"}])))
    code = cli.main(["preflight", SID, "-i", str(path)])
    err = capsys.readouterr().err
    assert code == errors.USAGE and "Traceback" not in err and "would hide /root/.cache" in err


def test_the_schema_describes_mounts():
    schema = inventory.json_schema()
    mount = schema["$defs"]["HostMount"]["properties"]
    assert set(mount) == {"source", "target", "read_only"} and mount["source"]["pattern"].startswith("^")
    assert "mounts" in schema["properties"] and "mounts" in schema["$defs"]["Node"]["properties"]
