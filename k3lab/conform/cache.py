"""Cold prefix caches for checks that need one: ``POST /reset_prefix_cache``.

On a PD deployment the proxy fans the reset out to every Prefill and Decode engine (it answers
500 with ``{"failed": [...]}`` if any engine refuses); elsewhere each engine API is reset. vLLM
serves ``/reset_prefix_cache`` only with ``VLLM_SERVER_DEV_MODE=1``, which the guides do not set,
so a check must treat "not reset" as a normal outcome and fall back to a never-seen prompt.
"""
from __future__ import annotations

import requests

from k3lab.model.plan import Plan


def reset_prefix_cache(http: requests.Session, plan: Plan, external: bool = False) -> tuple[bool, str]:
    """Reset the deployment's prefix caches; ``(done, why not)``."""
    params = {"reset_external": "true"} if external else None
    targets = [plan.expect.proxy] if plan.expect.proxy else [a.url for a in plan.expect.apis]
    failed = []
    for url in targets:
        try:
            r = http.post(f"{url}/reset_prefix_cache", params=params, timeout=30)
        except requests.RequestException as exc:
            failed.append(f"{url}: {exc}")
            continue
        if r.status_code != 200:
            failed.append(f"{url}: HTTP {r.status_code} {r.text[:200]}")
    if failed:
        return False, ("/reset_prefix_cache refused (engines serve it only with VLLM_SERVER_DEV_MODE=1): "
                       + "; ".join(failed))
    return True, ""
