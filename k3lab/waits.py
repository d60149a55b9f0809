"""The one polling loop: every wait in the kit is bounded by a deadline and sleeps between tries."""
from __future__ import annotations

import time
from collections.abc import Callable


def poll(step: Callable[[], bool], timeout: float, interval: float) -> bool:
    """Call ``step`` until it returns True (then True) or ``timeout`` seconds have passed (then False).

    ``step`` runs at least once, and once more at the deadline, so a condition met while the last sleep
    ran is not reported as a timeout. Exceptions from ``step`` propagate (a wait that learns of a failure
    ends at once)."""
    deadline = time.monotonic() + timeout
    while True:
        if step():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval, left))
