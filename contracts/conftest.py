"""Contract tests: the simulator's stand-ins against the real components (``nox -s contracts``).

Each contract names what it compares; a drift test per contract shows that a deliberate change
in the stand-in fails it. Downloads are cached in ``$K3LAB_CACHE`` (default ``~/.cache/k3lab``).
"""
from __future__ import annotations

import pytest

from k3lab.launch.simimage.vllm_ascend import FetchError


@pytest.fixture(scope="session")
def wheel():
    from contracts.fetch import vllm_wheel

    try:
        return vllm_wheel()
    except FetchError as exc:
        pytest.fail(f"cannot fetch the vLLM wheel: {exc}", pytrace=False)
