"""Every LeaderWorkerSet ``k3lab render --target k8s`` writes, for all twelve scenarios, created on a real API
server with the real LWS CRD (conftest.py), with strict field validation, read back and deleted; the server
refuses unknown fields, wrong types and values outside an enum; the status subresource works. The core kinds
(ConfigMap, Pod) are not served here: tests/unit/render/test_k8s.py validates them with kubernetes-validate."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from k3lab.model import catalog
from tests.unit.render.test_k8s import objects

from .conftest import Api

GROUP_PATH = "/apis/leaderworkerset.x-k8s.io/v1"
STRICT = {"fieldValidation": "Strict"}


def lws_objects(sid: str) -> list[dict[str, Any]]:
    return [o for o in objects(sid) if o["kind"] == "LeaderWorkerSet"]


def collection(obj: dict[str, Any]) -> str:
    return f"{GROUP_PATH}/namespaces/{obj['metadata']['namespace']}/leaderworkersets"


def item(obj: dict[str, Any]) -> str:
    return f"{collection(obj)}/{obj['metadata']['name']}"


def contained(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Where what was sent differs from what the server stored (the server may add defaults, never change or drop)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path}: sent an object, stored {stored!r}"]
        return [d for k, v in sent.items() for d in contained(v, stored.get(k, _MISSING), f"{path}/{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{path}: sent {len(sent)} items, stored {stored!r}"]
        return [d for i, (a, b) in enumerate(zip(sent, stored)) for d in contained(a, b, f"{path}/{i}")]
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


_MISSING = object()


def create(api: Api, obj: dict[str, Any]) -> Any:
    return api.http.post(api.url(collection(obj)), json=obj, params=STRICT, timeout=30)


def delete(api: Api, obj: dict[str, Any]) -> None:
    r = api.http.delete(api.url(item(obj)), timeout=30)
    assert r.status_code == 200, r.text
    assert api.http.get(api.url(item(obj)), timeout=30).status_code == 404


def an_lws() -> dict[str, Any]:
    return copy.deepcopy(lws_objects("a3_pd_1m")[0])


@pytest.fixture(autouse=True)
def _leave_nothing(api):
    """A failed test leaves no LWS behind to make the next one's create a 409."""
    yield
    path = f"{GROUP_PATH}/leaderworkersets"
    for left in api.http.get(api.url(path), timeout=30).json().get("items") or []:
        api.http.delete(api.url(item(left)), timeout=30)


@pytest.mark.parametrize("sid", sorted(catalog.SCENARIOS))
def test_every_rendered_lws_is_stored_with_strict_validation(api, lws_crd, sid):
    objs = lws_objects(sid)
    assert objs, f"{sid}: render wrote no LeaderWorkerSet"
    for obj in objs:
        r = create(api, obj)
        assert r.status_code == 201, f"{obj['metadata']['name']}: {r.status_code} {r.text}"
        # Strict turns unknown and duplicate fields into errors; any warning left would be a defect too
        assert "Warning" not in r.headers, r.headers["Warning"]
        stored = api.http.get(api.url(item(obj)), timeout=30).json()
        assert contained(obj, stored) == []
        assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"]
    for obj in objs:
        delete(api, obj)


def test_an_unknown_field_is_refused_and_named(api, lws_crd):
    obj = an_lws()
    obj["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    r = create(api, obj)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["reason"] == "BadRequest"
    assert 'unknown field "spec.leaderWorkerTemplate.sizee"' in body["message"]
    # without Strict the same object is stored with the field pruned: that is what Strict guards against
    r = api.http.post(api.url(collection(obj)), json=obj, params={"fieldValidation": "Ignore"}, timeout=30)
    assert r.status_code == 201, r.text
    assert "sizee" not in r.json()["spec"]["leaderWorkerTemplate"]
    delete(api, obj)


@pytest.mark.parametrize(("where", "value", "field"), [
    (("spec", "replicas"), "two", "spec.replicas"),
    (("spec", "startupPolicy"), "WhenReady", "spec.startupPolicy"),
    (("spec", "leaderWorkerTemplate", "size"), "4", "spec.leaderWorkerTemplate.size"),
])
def test_a_wrong_type_or_enum_value_is_invalid(api, lws_crd, where, value, field):
    obj = an_lws()
    target = obj
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    r = create(api, obj)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["reason"] == "Invalid"
    assert field in {c.get("field") for c in body["details"]["causes"]}, body


def test_status_is_a_subresource(api, lws_crd):
    obj = an_lws()
    assert create(api, obj).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}
    # the main resource ignores status (the controller's field, written only through /status)
    r = api.http.patch(api.url(item(obj)), data='{"status": {"readyReplicas": 1}}', headers=merge, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json().get("status", {}).get("readyReplicas") is None
    r = api.http.patch(api.url(item(obj) + "/status"), data='{"status": {"readyReplicas": 1, "replicas": 1}}',
                       headers=merge, timeout=30)
    assert r.status_code == 200, r.text
    stored = api.http.get(api.url(item(obj)), timeout=30).json()
    assert stored["status"]["readyReplicas"] == 1 and stored["status"]["replicas"] == 1
    r = api.http.patch(api.url(item(obj) + "/status"), data='{"status": {"readyReplicas": "one"}}',
                       headers=merge, timeout=30)
    assert r.status_code == 422, r.text
    delete(api, obj)
