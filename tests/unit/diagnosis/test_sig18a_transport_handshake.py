"""A KV transport that cannot set up its connection with the peer's endpoint (the handshake that exchanges addresses)
did not reach the peer (#32, pass 18a): mooncake-connect-failure, by meaning; a TLS/SSL handshake is no such one."""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely


def test_the_rdma_handshake_of_a_real_excerpt_is_named(tmp_path):
    # real, heldout15/mooncake-connect-failure--Mooncake-204.log (kvcache-ai/Mooncake#204)
    text = (CORPUS / "heldout15/mooncake-connect-failure--Mooncake-204.log").read_text()
    assert _likely(tmp_path, "mooncake-connect-failure", text) == ["mooncake-connect-failure"]


@pytest.mark.parametrize("line", [
    # BUILT from kvcache-ai/Mooncake docs/source/troubleshooting/troubleshooting.md, which quotes the transfer engine's
    # errors when the two sides cannot establish an RDMA connection path ("Worker: Cannot make connection for endpoint",
    # "Handshake request rejected by peer endpoint: "), under a glog E prefix
    "E0331 12:03:04.222625 56060 worker_pool.cpp:245] Worker: Cannot make connection for endpoint: node2@mlx5_1",
    "E0331 12:03:04.222625 56060 rdma_endpoint.cpp:210] Handshake request rejected by peer endpoint: node2@mlx5_1",
])
def test_other_handshake_wordings_are_named(tmp_path, line):
    assert _likely(tmp_path, "mooncake-connect-failure", line) == ["mooncake-connect-failure"]


@pytest.mark.parametrize("line", [
    # a TLS handshake (a hub over HTTPS, a secure channel): no KV transport (made up, in urllib3/ssl's words)
    "requests.exceptions.SSLError: HTTPSConnectionPool(host='huggingface.co', port=443): [SSL: "
    "SSLV3_ALERT_HANDSHAKE_FAILURE] handshake failed with remote host",
])
def test_a_tls_handshake_is_no_transport_peer(line):
    assert not catalogue.load().get("mooncake-connect-failure").means(line)


@pytest.mark.parametrize("text", [
    # real, heldout4/healthy--sglang-10560.log: Mooncake's healthy start names the P2P handshake it listens with
    "I0917 16:19:42.193420 3936072 transfer_engine.cpp:146] Transfer Engine RPC using P2P handshake, listening on "
    "115.182.224.13:16590\n",
])
def test_a_healthy_handshake_line_stays_clean(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))
