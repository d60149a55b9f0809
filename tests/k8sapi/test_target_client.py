"""The k8s target's own client code (:class:`k3lab.launch.targets.k8sapi.Cluster` through the official
``kubernetes`` client, and :class:`~k3lab.launch.targets.k8s.K8sTarget`'s apply steps: the ``k8s-preflight``
dry run, ``prepare`` and the teardown of its scope) against the real CRD API server of conftest.py, with the
real LWS CRD, for the LeaderWorkerSets of a few rendered scenarios.

Only the LeaderWorkerSets: this server serves no core API, so the rendered ConfigMaps are filtered out here
(a dry run of them is refused with 404, which one test shows; tests/unit/render/test_k8s.py validates them
with kubernetes-validate). Namespaces are not checked: the objects go to the rendered namespace ``k3lab``,
which exists nowhere; the server stores them because NamespaceLifecycle admission is off (conftest.py). Nor
does it run kube-controller-manager's garbage collector: a Foreground delete (the kit's, so a LWS's pods go
first) marks the LWS with a deletionTimestamp and the ``foregroundDeletion`` finalizer, and the collector
would then remove it; here the test asserts the mark and removes the finalizer itself when cleaning up.
Pods, exec and logs are not served: tests/unit/launch/test_k8s_target.py covers them with its stand-in.
"""
from __future__ import annotations

import copy
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kubernetes")

from k3lab import settings  # noqa: E402
from k3lab.errors import ChecksFailed  # noqa: E402
from k3lab.launch.scope import RunScope  # noqa: E402
from k3lab.launch.targets import k8sapi  # noqa: E402
from k3lab.launch.targets.k8s import K8sTarget  # noqa: E402
from k3lab.render import artefacts  # noqa: E402
from tests.unit.render.test_k8s import k8s_inventory  # noqa: E402

from .conftest import Api  # noqa: E402

SCENARIOS = ("a3_pd_1m", "k3_a3_pd", "k3_a3_mixed")
NAMESPACE = "k3lab"  # the rendered objects' own
CONTEXT = "self"  # conftest.py's kubeconfig
COLLECTION = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NAMESPACE}/leaderworkersets"


def manifests(sid: str, run: str, kinds: tuple[str, ...] = ("LeaderWorkerSet",)) -> dict[str, str]:
    """The render's manifests for run ``run``, with only the objects of ``kinds`` in them."""
    built = artefacts.build(sid, k8s_inventory(sid, context=CONTEXT), {}, "k8s", run_label=run)
    out = {}
    for path, text in built.manifests.items():
        kept = [o for o in yaml.safe_load_all(text) if o and o["kind"] in kinds]
        if kept:
            out[path] = yaml.safe_dump_all(kept)
    return out


def lws(sid: str, run: str) -> list[dict[str, Any]]:
    return [o for text in manifests(sid, run).values() for o in yaml.safe_load_all(text)]


def stored(api: Api, run: str | None = None) -> dict[str, dict[str, Any]]:
    """The LeaderWorkerSets the server holds (of run ``run``), by name, read without the kit's client."""
    params = {"labelSelector": f"{k8sapi.RUN_LABEL}={run}"} if run else {}
    r = api.http.get(api.url(COLLECTION), params=params, timeout=30)
    assert r.status_code == 200, r.text
    return {o["metadata"]["name"]: o for o in r.json()["items"]}


@pytest.fixture(autouse=True)
def _clean(api: Api, lws_crd: dict[str, Any]) -> Iterator[None]:
    """Nothing left for the next test, nor for test_lws.py: the finalizer the absent garbage collector would
    have cleared is removed, then the object deleted."""
    yield
    for name in stored(api):
        item = api.url(f"{COLLECTION}/{name}")
        r = api.http.patch(item, json={"metadata": {"finalizers": None}}, timeout=30,
                           headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, r.text
        api.http.delete(item, timeout=30)
    assert stored(api) == {}


@pytest.fixture
def kit(api: Api) -> Iterator[None]:
    """The kit's settings pointed at the server's kubeconfig, as KUBECONFIG would."""
    with settings.patched(kubeconfig=api.kubeconfig):
        yield


def cluster(api: Api) -> k8sapi.Cluster:
    return k8sapi.Cluster(api.kubeconfig, CONTEXT, NAMESPACE, timeout=30)


def target(sid: str, run: str, scope: RunScope) -> K8sTarget:
    inv = k8s_inventory(sid, context=CONTEXT)
    plan = artefacts.build(sid, inv, {}, "k8s", run_label=run).plan
    return K8sTarget.for_inventory(plan, run, inv, scope)


def test_version_is_the_servers(api, kit):
    """The kit's prerequisite question (``GET /version``); the client's ``VersionApi.get_code`` asks
    ``/version/``, which this server answers with 404."""
    want = api.http.get(api.url("/version"), timeout=30).json()["gitVersion"]
    assert cluster(api).version(timeout=10) == want
    assert api.http.get(api.url("/version/"), timeout=30).status_code == 404


@pytest.mark.parametrize("sid", SCENARIOS)
def test_the_preflight_dry_run_passes_and_stores_nothing(api, kit, sid):
    run = f"dry-{sid.replace('_', '-')}"
    t = target(sid, run, RunScope())
    t.dry_run(manifests(sid, run))
    assert [o["kind"] for o in t.objects] and {o["kind"] for o in t.objects} == {"LeaderWorkerSet"}
    assert stored(api) == {}


def test_the_preflight_names_what_the_server_refuses(api, kit):
    """The ConfigMap this server does not serve, and a LWS with an unknown field: one ChecksFailed naming both."""
    run = "dry-refused"
    texts = manifests("a3_pd_1m", run, kinds=("LeaderWorkerSet", "ConfigMap"))
    objs = [o for text in texts.values() for o in yaml.safe_load_all(text)]
    bad = next(o for o in objs if o["kind"] == "LeaderWorkerSet")
    bad["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    t = target("a3_pd_1m", run, RunScope())
    with pytest.raises(ChecksFailed) as err:
        t.dry_run({"all.yaml": yaml.safe_dump_all(objs)})
    text = str(err.value)
    assert f"context {CONTEXT}, server {api.base}" in text
    assert f'LeaderWorkerSet {bad["metadata"]["name"]}: 400' in text
    assert 'unknown field "spec.leaderWorkerTemplate.sizee"' in text
    assert "ConfigMap " in text and ": 404 " in text
    assert stored(api) == {}


@pytest.mark.parametrize("sid", SCENARIOS)
def test_prepare_creates_each_lws_with_the_run_label_and_its_scope_deletes_them(api, kit, sid):
    run = f"run-{sid.replace('_', '-')}"
    scope = RunScope()
    t = target(sid, run, scope)
    t.dry_run(manifests(sid, run))
    t.prepare()
    want = {o["metadata"]["name"] for o in t.objects}
    got = stored(api, run)
    assert set(got) == want and set(stored(api)) == want
    assert all(o["metadata"]["labels"][k8sapi.RUN_LABEL] == run for o in got.values())
    assert all(o["metadata"].get("deletionTimestamp") is None for o in got.values())
    assert scope.close() == {} and scope.errors == []  # the teardown: every object, then the sweep by label, all answered
    assert t.removed.get("LeaderWorkerSet") == len(want) and not t.removed.get("Pod")  # no core API: no pods
    for o in stored(api).values():  # marked for the garbage collector (none here), Foreground
        assert o["metadata"]["deletionTimestamp"] and o["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_a_create_with_an_unknown_field_is_refused_naming_it(api):
    obj = copy.deepcopy(lws("a3_pd_1m", "run-bad")[0])
    obj["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    c = cluster(api)
    for dry_run in (True, False):
        with pytest.raises(k8sapi.Refused) as err:
            c.create(obj, dry_run=dry_run)
        assert err.value.status == 400 and isinstance(err.value, k8sapi.ApiException)
        text = str(err.value)
        assert "\n" not in text, text  # one line, not the client's headers and body
        assert text.startswith(f"the Kubernetes API (context {CONTEXT}, server {api.base}) refuses ")
        assert f"LeaderWorkerSet {obj['metadata']['name']}: 400 " in text
        assert 'unknown field "spec.leaderWorkerTemplate.sizee"' in text
    assert stored(api) == {}


def test_delete_run_removes_exactly_the_runs_lws(api):
    c = cluster(api)
    mine, other = lws("a3_pd_1m", "run-a"), lws("k3_a3_pd", "run-b")
    for obj in mine + other:
        assert c.create(obj) == k8sapi.Ref("LeaderWorkerSet", obj["metadata"]["name"])
    assert c.delete_run("run-a", deadline=10)["LeaderWorkerSet"] == len(mine)
    after = stored(api)
    for obj in mine:
        meta = after[obj["metadata"]["name"]]["metadata"]
        assert meta["deletionTimestamp"] and meta["finalizers"] == ["foregroundDeletion"]
    for obj in other:
        assert after[obj["metadata"]["name"]]["metadata"].get("deletionTimestamp") is None
    assert set(after) == {o["metadata"]["name"] for o in mine + other}
    assert c.delete_run("run-c", deadline=10) == dict.fromkeys(("Pod", "LeaderWorkerSet", "Service", "ConfigMap",
                                                                 "Secret"), 0)  # nothing left: nothing to do, no error
    # those being deleted already (Foreground: kept until their dependents go) are not counted twice
    assert c.delete_run("run-a", deadline=10)["LeaderWorkerSet"] == 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_an_api_server_that_does_not_answer_is_named(api, tmp_path: Path):
    """The same kubeconfig with the server's port replaced by one nothing listens on."""
    server = f"https://127.0.0.1:{_closed_port()}"
    config = yaml.safe_load(api.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = server
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    c = k8sapi.Cluster(path, CONTEXT, NAMESPACE, timeout=5)
    where = f"context {CONTEXT}, server {server}"
    with pytest.raises(k8sapi.ApiUnreachable, match="does not answer GET /version") as err:
        c.version(timeout=5)
    assert where in str(err.value)
    with pytest.raises(k8sapi.ApiUnreachable, match="does not answer create LeaderWorkerSet") as err:
        c.create(lws("a3_pd_1m", "run-x")[0])
    assert where in str(err.value)
    with pytest.raises(k8sapi.ApiUnreachable, match="does not answer list LeaderWorkerSets") as err:
        c.delete_run("run-x", deadline=5)
    assert where in str(err.value)
