"""render --target k8s: every LeaderWorkerSet of the twelve scenarios validates against the real LWS CRD's
schema, strictly (tests/fixtures/k8s/README.md says where it comes from); the core kinds validate with
kubernetes-validate (the test extra; skipped only where it is not installed); the pods run the lab's scripts,
byte for byte. tests/k8sapi/ sends the same LeaderWorkerSets to a real API server."""
from __future__ import annotations

import copy
import functools
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from k3lab.cli import main as cli
from k3lab.model import catalog, inventory, siminventory
from k3lab.render import artefacts
from k3lab.render import k8s as k8s_render

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "tests" / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
K8S_VERSION = "1.33.0"  # the Kubernetes API the core kinds are checked against (kubernetes-validate)
K8S = {"context": "ascend-a3", "namespace": "k3lab", "weights": {"claim": "k3-weights"}}


def k8s_inventory(sid: str, **k8s: Any) -> inventory.Inventory:
    data = siminventory.default(sid).model_dump(mode="json", exclude_defaults=True)
    data["k8s"] = {**K8S, **k8s}
    return inventory.parse(data)


@functools.cache
def rendered(sid: str) -> artefacts.Rendered:
    return artefacts.build(sid, k8s_inventory(sid), {}, "k8s")


def objects(sid: str) -> list[dict]:
    return [o for text in rendered(sid).manifests.values() for o in yaml.safe_load_all(text)]


# ----------------------------------------------------------------------------- the CRD's schema, strictly


def _strict(schema: Any) -> Any:
    """The CRD's structural schema with unknown fields refused: ``additionalProperties: false`` wherever it lists
    properties, has no additionalProperties of its own and does not say x-kubernetes-preserve-unknown-fields.
    The API server prunes such fields (and ``kubectl apply --validate=strict`` refuses them); this emulates
    that on the schema alone. It is the schema, not an API server: no defaulting, CEL rules or webhook."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@functools.cache
def lws_validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    # the schema leaves metadata to the API server (ObjectMeta): the fields the kit writes, and no others
    schema["properties"]["metadata"] = {"type": "object", "additionalProperties": False, "required": ["name"],
                                        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                                                       "labels": {"type": "object",
                                                                  "additionalProperties": {"type": "string"}}}}
    return jsonschema.Draft7Validator(schema)


def lws_errors(obj: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in lws_validator().iter_errors(obj)]


def test_the_fixture_is_the_lws_crd():
    crd = yaml.safe_load(CRD.read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == "LeaderWorkerSet"
    assert crd["spec"]["group"] == "leaderworkerset.x-k8s.io"


@pytest.mark.parametrize("sid", sorted(catalog.SCENARIOS))
def test_every_lws_validates_strictly(sid):
    sc = catalog.SCENARIOS[sid]
    lws = [o for o in objects(sid) if o["kind"] == "LeaderWorkerSet"]
    assert {o["metadata"]["labels"]["k3lab.group"] for o in lws} == {r for r, n in sc.roles.items() if n}
    for obj in lws:
        assert obj["apiVersion"] == k8s_render.LWS_API
        assert lws_errors(obj) == [], obj["metadata"]["name"]


def test_the_strict_check_sees_unknown_and_wrong_fields():
    obj = copy.deepcopy(next(o for o in objects("a3_pd") if o["kind"] == "LeaderWorkerSet"))
    assert lws_errors(obj) == []
    bad = copy.deepcopy(obj)
    bad["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["shmSize"] = "1g"
    assert any("shmSize" in e for e in lws_errors(bad))
    bad = copy.deepcopy(obj)
    bad["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    assert any("restartPolicy" in e for e in lws_errors(bad))
    bad = copy.deepcopy(obj)
    del bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    assert lws_errors(bad)


# ------------------------------------------------------------------------------------- what is rendered


@pytest.mark.parametrize("sid", ["a3_pd_pooled", "k3_a3_mixed", "k3_a2_mixed"])
def test_groups_pods_and_probes_follow_the_plan(sid):
    sc, r = catalog.SCENARIOS[sid], rendered(sid)
    plan = r.plan
    heads = {g.node: g for s in plan.stages if s.name == "heads" for g in s.gates}
    for obj in (o for o in objects(sid) if o["kind"] == "LeaderWorkerSet"):
        role = obj["metadata"]["labels"]["k3lab.group"]
        tpl = obj["spec"]["leaderWorkerTemplate"]
        assert tpl["size"] == sc.roles[role] and obj["spec"]["startupPolicy"] == "LeaderReady"
        for which in ("leaderTemplate", "workerTemplate"):
            spec = tpl[which]["spec"]
            c = spec["containers"][0]
            assert spec["hostNetwork"] is True and c["securityContext"]["privileged"] is True
            assert c["resources"]["limits"] == {inventory.DEFAULT_NPU_RESOURCE: str(sc.devices)}
            shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
            assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}  # the guides' --shm-size=1g
            assert {"name": "weights", "persistentVolumeClaim": {"claimName": "k3-weights", "readOnly": False}} \
                in spec["volumes"]
        head = plan.node([n.name for n in plan.nodes if n.role == role and n.rank == 0][0])
        probe = tpl["leaderTemplate"]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]
        assert f"{probe['host']}:{probe['port']}" == heads[head.name].target == f"{head.address}:{probe['port']}"


def test_the_configmap_carries_the_lab_scripts_byte_for_byte(tmp_path):
    r = rendered("a3_pd_pooled")
    cm = next(o for o in objects("a3_pd_pooled") if o["kind"] == "ConfigMap")
    for node in r.plan.nodes:
        for a in node.artefacts:
            if a.path.startswith("/"):
                assert cm["data"][f"{node.name}.{a.name}"] == r.files[node.name][a.name]
    entry = tmp_path / "entry.sh"
    entry.write_text(cm["data"][k8s_render.ENTRY])
    subprocess.run(["bash", "-n", str(entry)], check=True)
    assert "await_log provider /root/k3lab/logs/provider.log 'Successfully initialized memcache.'" in entry.read_text()


def test_inventory_choices_reach_the_manifests():
    inv = k8s_inventory("a3_pd", npu_resource="huawei.com/ascend-910", shm_size="64Gi",
                        weights={"host_path": "/data/weights", "mount_path": "/root/.cache"},
                        node_names={"p0": "a3-node-01"}, node_selector={"accelerator": "ascend-a3"})
    r = artefacts.build("a3_pd", inv, {}, "k8s")
    docs = [o for t in r.manifests.values() for o in yaml.safe_load_all(t)]
    lws = next(o for o in docs if o["kind"] == "LeaderWorkerSet" and o["metadata"]["name"].endswith("prefill"))
    spec = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert spec["nodeSelector"] == {"accelerator": "ascend-a3"}
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a3-node-01"]
    assert "huawei.com/ascend-910" in spec["containers"][0]["resources"]["limits"]
    assert {"name": "weights", "hostPath": {"path": "/data/weights", "type": "Directory"}} in spec["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in spec["volumes"]
    assert lws_errors(lws) == []


def test_the_k8s_section_is_required_and_strict():
    with pytest.raises(inventory.InventoryError, match="needs the inventory's k8s section"):
        artefacts.build("a3_pd", siminventory.default("a3_pd"), {}, "k8s")
    with pytest.raises(inventory.InventoryError, match="exactly one of claim"):
        k8s_inventory("a3_pd", weights={"claim": "w", "host_path": "/w"})
    with pytest.raises(inventory.InventoryError, match="k8s.node_names: 'p9' is not a node"):
        k8s_inventory("a3_pd", node_names={"p9": "x"})
    with pytest.raises(inventory.InventoryError, match="namespace"):
        k8s_inventory("a3_pd", namespace="Not_A_Label")
    with pytest.raises(inventory.InventoryError, match="k8s.node_names.p0 'UPPER'"):
        k8s_inventory("a3_pd", node_names={"p0": "UPPER"})


def test_sim_and_lab_render_no_manifests():
    assert artefacts.build("a3_pd", siminventory.default("a3_pd"), {}, "sim").manifests == {}


def test_render_writes_the_manifests_and_the_runbook_section(tmp_path, capsys):
    inv = tmp_path / "k8s.yaml"
    inv.write_text(yaml.safe_dump(k8s_inventory("a3_pd").model_dump(mode="json", exclude_defaults=True)))
    out = tmp_path / "out"
    assert cli.main(["render", "a3_pd", "-i", str(inv), "--target", "k8s", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "k8s").iterdir()) == ["00-files.yaml", "20-prefill.yaml", "21-decode.yaml",
                                                                "90-proxy.yaml"]
    runbook = (out / "RUNBOOK.md").read_text()
    assert "## Kubernetes: `kubectl apply -f k8s/`" in runbook
    assert runbook.index("apply -f k8s/20-prefill.yaml") < runbook.index("apply -f k8s/90-proxy.yaml")
    assert (out / "plan.json").exists() and (out / "p0" / "launch.sh").exists()


@pytest.mark.parametrize("cmd", ["up", "cycle"])
def test_bring_up_on_k8s_needs_a_kubeconfig(tmp_path, capsys, cmd):
    """The bring-up itself is tests/unit/launch/test_k8s_target.py's; without a kubeconfig it is exit 3."""
    from k3lab import settings

    inv = tmp_path / "k8s.yaml"
    inv.write_text(yaml.safe_dump(k8s_inventory("a3_pd").model_dump(mode="json", exclude_defaults=True)))
    with settings.patched(kubeconfig=tmp_path / "none"):
        assert cli.main([cmd, "a3_pd", "-i", str(inv), "--target", "k8s"]) == 3
    assert f"a kubeconfig ({tmp_path / 'none'} not found)" in capsys.readouterr().err


# ------------------------------------------------------------------------------- core kinds (optional)


@pytest.mark.parametrize("sid", sorted(catalog.SCENARIOS))
def test_core_kinds_validate_with_kubernetes_validate(sid):
    kv = pytest.importorskip("kubernetes_validate")
    for obj in objects(sid):
        if obj["kind"] == "LeaderWorkerSet":  # its pod templates are core PodSpecs: check them as pods
            tpl = obj["spec"]["leaderWorkerTemplate"]
            for which in ("leaderTemplate", "workerTemplate"):
                kv.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", **tpl[which]["metadata"]},
                             "spec": tpl[which]["spec"]}, K8S_VERSION, strict=True)
        else:
            kv.validate(obj, K8S_VERSION, strict=True)


def test_init_writes_a_k8s_section_that_renders(tmp_path):
    inv = tmp_path / "k8s.yaml"
    assert cli.main(["init", "a3_pd_pooled", "--target", "k8s", "--out", str(inv)]) == 0
    text = inv.read_text()
    assert "\nk8s:\n  # kubeconfig context" in text and "  npu_resource: huawei.com/ascend-1980\n" in text
    r = artefacts.build("a3_pd_pooled", inventory.load(inv), {}, "k8s")
    assert "10-metaservice.yaml" in r.manifests
    lab = tmp_path / "lab.yaml"
    assert cli.main(["init", "a3_pd_pooled", "--out", str(lab)]) == 0
    assert "k8s:" not in lab.read_text()
