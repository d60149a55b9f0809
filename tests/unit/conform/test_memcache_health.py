"""MetaService /health across versions: 1.1+ JSON, 1.0.x plain text (conformance/memcache.py)."""
from k3lab.conform.memcache import health_ok

JSON_130 = ('{"ha_state":"unknown","leader_address":"unknown","role":"unknown","service_ready":true,'
            '"status":"ok","view_version":0}')


def test_json_health_of_1_3():
    assert health_ok(200, JSON_130)


def test_plain_ok_of_1_0():
    assert health_ok(200, "OK") and health_ok(200, "OK\n")


def test_unhealthy_answers():
    assert not health_ok(503, JSON_130)
    assert not health_ok(200, '{"status":"degraded"}')
    assert not health_ok(200, "")
    assert not health_ok(200, "[]")
