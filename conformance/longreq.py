"""Long requests through the entrypoint, as the K3.1 Pro guide §5.2.2 verifies a 1M deployment.

Runs only with ``--long-requests``. By default one request as long as the configured limit allows
(``max_model_len`` minus 16 output tokens); ``--long-request-tokens``, ``--long-request-output``
and ``--long-request-concurrency`` set the workload. Prompts are token ids (exact lengths without
a tokenizer; the proxy forwards them as they are). What the guide asks to record is written to
``evidence/long-requests.json``: the lengths each engine counted, the concurrency, HBM usage per
chip and node before and after (``npu-smi info``), and each request's completion status.
"""
from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from k3lab.conform import longparse
from k3lab.conform.evidence import check

pytestmark = [pytest.mark.long_requests,
              pytest.mark.conformance(area="long-requests", must="Requests as long as the configured limit MUST "
                                      "complete through the entrypoint, each within the limit")]
KIND = "product"
TIMEOUT_S = 3600  # a 1M-token prefill takes minutes on real nodes


@pytest.fixture(scope="module")
def load(plan, pytestconfig) -> longparse.Workload:
    try:
        return longparse.workload(plan.expect.max_model_len, pytestconfig.getoption("--long-request-tokens"),
                                  pytestconfig.getoption("--long-request-output"),
                                  pytestconfig.getoption("--long-request-concurrency"))
    except ValueError as exc:
        pytest.fail(f"--long-request options: {exc}", pytrace=False)


def _hbm(hosts, plan) -> dict[str, dict]:
    """Per node: HBM used and total (MB) per chip in npu-smi's order and summed, read live (not from
    the node batch); an answer without an HBM column says why instead of reporting 0 chips."""
    def one(node):
        res = hosts[node.name].run("npu-smi info")
        chips = longparse.hbm_usage(res.stdout) if res.rc == 0 else []
        entry: dict = {"chips": len(chips), "used_mb": sum(u for u, _ in chips),
                       "total_mb": sum(t for _, t in chips), "per_chip": [list(c) for c in chips]}
        if not chips:
            entry["error"] = (f"npu-smi info exited {res.rc}" if res.rc != 0 else
                              "unparsed output: no chip row with an HBM column in npu-smi info")
        return node.name, entry

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(pool.map(one, plan.nodes))


def _send(http, plan, load: longparse.Workload, request: int, nonce: int) -> longparse.Outcome:
    body = {"model": plan.expect.served_name, "prompt": longparse.prompt_ids(load.prompt_tokens, request, nonce),
            "max_tokens": load.output_tokens, "temperature": 0}
    t = time.monotonic()
    try:
        r = http.post(f"{plan.expect.entrypoint}/v1/completions", json=body, timeout=TIMEOUT_S)
    except requests.RequestException as exc:
        return longparse.Outcome(request, None, round(time.monotonic() - t, 3), error=f"no answer: {exc}")
    return longparse.parse_reply(request, r.status_code, time.monotonic() - t, r.text)


@pytest.mark.conformance(
    id="long-requests.test_long_requests_complete_through_the_entrypoint",
    remedy="read the engines' logs for an out-of-memory or a timeout on the long prompt; size the deployment (or --max-model-len) for the configured limit.")
def test_long_requests_complete_through_the_entrypoint(plan, http, hosts, run_dir, load, record_property):
    before = _hbm(hosts, plan)
    nonce = random.getrandbits(16)
    with ThreadPoolExecutor(max_workers=load.concurrency) as pool:
        outcomes = list(pool.map(lambda i: _send(http, plan, load, i, nonce), range(load.concurrency)))
    after = _hbm(hosts, plan)
    record = {"guide": "K3.1 Pro §5.2.2", "entrypoint": plan.expect.entrypoint, "workload": load.__dict__,
              "requests": [o.to_json() for o in outcomes], "hbm_before": before, "hbm_after": after}
    evidence = run_dir / "evidence"
    evidence.mkdir(parents=True, exist_ok=True)
    (evidence / "long-requests.json").write_text(json.dumps(record, indent=2) + "\n")
    record_property("long_requests.completed", sum(o.status == 200 and not o.error for o in outcomes))
    bad = longparse.failures(outcomes, load)
    check(not bad, "long requests through the entrypoint", load.describe() + ", every one completed within the limit",
          "; ".join(bad), plan.expect.entrypoint,
          "an engine down or unreachable behind the proxy, an engine started with a smaller --max-model-len "
          "than the plan, a KV pool or HBM too small for the "
          "length, or a proxy/engine timeout on long prefills",
          "compare each engine's 'model length' log line with the plan, read evidence/long-requests.json and "
          "the engine logs of the failed requests")
