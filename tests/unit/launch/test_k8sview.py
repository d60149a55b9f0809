"""The container checks (conformance/test_containers.py) on a k8s run: each node's pods read through the real
``kubernetes`` client from the HTTP-level STAND-IN API server of tests/unit/launch/k8s_apiserver.py (not
Kubernetes: the pods' status is what a test sets, as a kubelet would report it). The checks get the view the
target provides (``K8sTarget.container_views``), as the suite's ``containers`` fixture hands it over.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

pytest.importorskip("kubernetes")

from k3lab import settings  # noqa: E402
from k3lab.launch import lifecycle  # noqa: E402
from k3lab.launch.scope import RunScope  # noqa: E402
from k3lab.launch.targets import k8sapi  # noqa: E402
from k3lab.launch.targets.k8s import K8sTarget  # noqa: E402
from k3lab.model import runs  # noqa: E402
from tests import suite  # noqa: E402
from tests.unit.launch.k8s_apiserver import StandinApiServer, fake_stream  # noqa: E402
from tests.unit.render.test_k8s import k8s_inventory  # noqa: E402

checks = suite.load("test_containers")
LEADER, WORKER2 = "k3lab-k3-a3-mixed-mixed-0", "k3lab-k3-a3-mixed-mixed-0-2"
KEY = "sk-k3lab-view-0123456789"


@pytest.fixture
def up(tmp_path, monkeypatch):
    """A kept k3_a3_mixed run on the stand-in: (api, run, the views the target gives the suite)."""
    yield from _up("k3_a3_mixed", tmp_path, monkeypatch)


def _up(sid, tmp_path, monkeypatch):
    with StandinApiServer() as api:
        monkeypatch.setattr(k8sapi, "stream", fake_stream(api, []))
        monkeypatch.setattr(lifecycle, "gate_ok", lambda run, gate: True)
        inv = tmp_path / "k8s.yaml"
        inv.write_text(yaml.safe_dump(k8s_inventory(sid).model_dump(mode="json", exclude_defaults=True)))
        with settings.patched(kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"), runs=tmp_path / "runs",
                              teardown_deadline_s=5.0, api_key=KEY):
            scope = RunScope()
            run = lifecycle.up(sid, str(inv), {}, "k8s", scope=scope)
            views = K8sTarget.container_views(runs.run_state(run.dir))
            yield api, run, views
            lifecycle.down(run)


def _check(views, run, node: str, which: str) -> None:
    """One check of conformance/test_containers.py for ``node``, with the view its fixture would give."""
    view = views[node]
    if which == "running":
        checks.test_container_running(run.plan.node(node), view)
    else:
        checks.test_container_matches_plan(run.plan.node(node), run.plan, view)


def _fails(views, run, node: str, which: str) -> str:
    with pytest.raises(AssertionError) as failed:
        _check(views, run, node, which)
    return str(failed.value)


def test_a_healthy_run_passes_both_checks_on_every_node(up):
    _, run, views = up
    for node in run.plan.nodes:
        _check(views, run, node.name, "running")
        _check(views, run, node.name, "plan")


def test_a_healthy_pd_run_passes_on_the_proxy_and_metaservice_pods_too(tmp_path, monkeypatch):
    for _, run, views in _up("k3_a3_pd", tmp_path, monkeypatch):
        pods = {p for v in views.values() for p in v.pods}
        assert {"k3lab-k3-a3-pd-proxy", "k3lab-k3-a3-pd-metaservice"} <= pods
        for node in run.plan.nodes:
            _check(views, run, node.name, "running")
            _check(views, run, node.name, "plan")


def _crash_loop(restarts: int) -> dict:
    return {"containerStatuses": [{
        "name": "node", "image": "img", "imageID": "", "ready": False, "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": "back-off 5m0s restarting failed container=node pod=x"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "startedAt": "2026-01-01T00:00:00Z",
                                     "finishedAt": "2026-01-01T00:01:00Z"}}}]}


def test_a_crash_looping_worker_fails_its_node_only_naming_the_reason_and_what_to_do(up):
    api, run, views = up
    api.pod_status[WORKER2] = _crash_loop(5)
    text = _fails(views, run, "node2", "running")
    assert text.startswith(f"node2 (context ascend-a3, server {api.url}): ")
    assert f"container node of pod {WORKER2} is waiting: CrashLoopBackOff (back-off 5m0s" in text
    assert "restarted 5 time(s) (last: Error, exit code 1); 'kubectl logs --previous'" in text
    _check(views, run, "node1", "running")  # another node of the same set is not blamed


@pytest.mark.parametrize("status, words", [
    ({"containerStatuses": [{"name": "node", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
                             "state": {"waiting": {"reason": "ImagePullBackOff",
                                                   "message": 'Back-off pulling image "quay.io/x:v1"'}}}]},
     ['is waiting: ImagePullBackOff (Back-off pulling image "quay.io/x:v1")', "load it there or fix k8s.image"]),
    ({"phase": "Pending", "reason": "Unschedulable", "message": "0/4 nodes are available: Insufficient huawei.com/ascend-1980",
      "containerStatuses": []},
     [f"pod {LEADER} is Pending, expected Running (Unschedulable: 0/4 nodes are available: Insufficient",
      "has no container status"]),
    ({"containerStatuses": [{"name": "node", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
                             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
     ["runs but is not Ready (its readiness probe, the stage's gate, fails)"]),
    ({"phase": "Failed", "containerStatuses": [{
        "name": "node", "image": "img", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": "2026-01-01T00:00:00Z",
                                 "finishedAt": "2026-01-01T00:01:00Z"}}}]},
     ["is Failed, expected Running", "terminated: OOMKilled, exit code 137"]),
])
def test_a_leader_that_does_not_run_is_named_with_why(up, status, words):
    api, run, views = up
    api.pod_status[LEADER] = status
    text = _fails(views, run, "node0", "running")
    for w in words:
        assert w in text, text


def test_a_deleted_pod_is_named(up):
    api, run, views = up
    del api.objects[("pods", WORKER2)]
    assert f"node2 (context ascend-a3, server {api.url}): pod {WORKER2} does not exist" in \
        _fails(views, run, "node2", "running")


def _spec(api, pod: str) -> dict:
    return api.objects[("pods", pod)]["spec"]


def _shm_volume(spec: dict) -> dict:
    return next(v for v in spec["volumes"] if v["name"] == "dshm")


FAULTS = {
    "image": (lambda s: s["containers"][0].update(image="quay.io/other:v0"), "image quay.io/other:v0, planned "),
    "command": (lambda s: s["containers"][0].update(command=["sleep", "infinity"]),
                "command ['sleep', 'infinity'], rendered ['bash', '-ic', "),
    "shm on disk": (lambda s: _shm_volume(s)["emptyDir"].pop("medium"),
                    "/dev/shm is an emptyDir of medium default (the node disk), planned Memory"),
    "shm size": (lambda s: _shm_volume(s)["emptyDir"].update(sizeLimit="64Mi"), "/dev/shm sizeLimit 64Mi, planned "),
    "shm a hostPath": (lambda s: _shm_volume(s).update(emptyDir=None, hostPath={"path": "/dev/shm"}),
                       "/dev/shm is a hostPath volume, planned an emptyDir of medium Memory"),
    "no shm": (lambda s: s["containers"][0].update(
        volumeMounts=[m for m in s["containers"][0]["volumeMounts"] if m["mountPath"] != "/dev/shm"]),
        "/dev/shm is not mounted, planned an emptyDir of medium Memory"),
    "host network": (lambda s: s.update(hostNetwork=False), "hostNetwork False, planned True (network host)"),
    "NPUs": (lambda s: s["containers"][0]["resources"]["limits"].update({"huawei.com/ascend-1980": "8"}),
             "huawei.com/ascend-1980 limit 8, planned 16 (the node's NPUs)"),
    "unprivileged": (lambda s: s["containers"][0].update(securityContext={"privileged": False}),
                     "privileged=False, planned True"),
    "no weights": (lambda s: s["containers"][0].update(
        volumeMounts=[m for m in s["containers"][0]["volumeMounts"] if m["name"] != "weights"]),
        "missing mounts ['/root/.cache']"),
    "extra env": (lambda s: s["containers"][0]["env"].append({"name": "HCCL_BUFFSIZE", "value": "1"}),
                  "environment has HCCL_BUFFSIZE, which the render does not set"),
    "no node env": (lambda s: s["containers"][0].update(env=s["containers"][0]["env"][1:]),
                    "environment lacks K3_K8S_NODE (rendered from field spec.nodeName)"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_pod_spec_that_is_not_the_plan_fails_naming_the_field(up, fault):
    api, run, views = up
    change, words = FAULTS[fault]
    change(_spec(api, WORKER2))
    text = _fails(views, run, "node2", "plan")
    assert text.startswith(f"node2 (context ascend-a3, server {api.url}): pod {WORKER2}: "), text
    assert words in text, text
    assert text.endswith("apply the run's manifests only through k3lab up (or rendered/k8s/ as they are)")
    _check(views, run, "node1", "plan")  # the other worker, from the same template, is as planned


def test_the_api_key_as_a_literal_value_fails_without_showing_it(up):
    api, run, views = up
    env = _spec(api, LEADER)["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != "VLLM_API_KEY"] + [{"name": "VLLM_API_KEY", "value": KEY}]
    text = _fails(views, run, "node0", "plan")
    assert "VLLM_API_KEY is a literal value in the pod spec" in text and "must come from the run's Secret" in text
    assert KEY not in text


def test_a_node_without_a_recorded_pod_fails_its_own_checks(up):
    _, run, views = up
    state = runs.run_state(run.dir)
    views = K8sTarget.container_views(state.model_copy(update={"containers": {
        k: v for k, v in state.containers.items() if k != "node3"}}))
    with pytest.raises(AssertionError, match=f"node3: run {run.id} recorded no pod for it"):
        _check(views, run, "node3", "running")


def test_the_docker_targets_leave_the_checks_their_docker_reading():
    """conformance/conftest.py's ``containers`` is the target's own view, None for sim and lab: the checks then
    read each node's container on its Docker endpoint, with their messages as before (test_containers.DockerView)."""
    from k3lab.launch import targets

    assert targets.get("sim").container_views(SimpleNamespace(target="sim")) is None
    assert targets.get("lab").container_views(SimpleNamespace(target="lab")) is None
