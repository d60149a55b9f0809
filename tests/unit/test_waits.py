"""The one polling loop: bounded, at least one try, one more at the deadline, failures end it at once."""
from __future__ import annotations

import pytest

from k3lab import waits


def test_returns_as_soon_as_the_step_holds():
    calls = []
    assert waits.poll(lambda: calls.append(1) or len(calls) == 3, timeout=5, interval=0)
    assert len(calls) == 3


def test_times_out_false_after_a_last_try():
    calls = []
    assert not waits.poll(lambda: calls.append(1) or False, timeout=0.05, interval=0.01)
    assert len(calls) >= 2


def test_a_zero_timeout_still_tries_once():
    assert waits.poll(lambda: True, timeout=0, interval=1)


def test_a_failure_in_the_step_ends_the_wait():
    def step():
        raise RuntimeError("p0 exited")

    with pytest.raises(RuntimeError, match="p0 exited"):
        waits.poll(step, timeout=60, interval=1)
