"""Run the k3lab CLI with one phase of its pipeline made to fail: the failure-path matrix's driver.

``python -m tests.integration.phasefail PHASE MODE -- k3lab-args...`` runs ``k3lab`` in this process
after wrapping :meth:`k3lab.launch.pipeline.Pipeline.run`: when the phase named PHASE has done its
work (so whatever it creates exists), MODE happens, as it would on a real run:

* ``exception``: an unexpected error (RuntimeError) escapes the phase;
* ``gate``: a readiness gate fails (GateFailed, exit 1);
* ``sigint`` / ``sigterm``: the process receives Ctrl-C / a ``kill``.

Nothing here changes what the kit does after the failure: teardown, state and exit code are the kit's.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from k3lab.launch import pipeline


def _fail(phase_name: str, mode: str):
    from k3lab.launch.lifecycle import GateFailed

    def after(phase):
        def fn():
            outcome = phase.fn()
            print(f"phasefail: {phase_name} done, now {mode}", file=sys.stderr, flush=True)
            if mode == "exception":
                raise RuntimeError(f"phasefail: injected error after {phase_name}")
            if mode == "gate":
                raise GateFailed(f"stage {phase_name}: phasefail: injected gate failure", phase_name)
            os.kill(os.getpid(), {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM}[mode])
            time.sleep(5)  # the handler raises here
            return outcome

        return pipeline.Phase(phase.name, fn, phase.timing)

    original = pipeline.Pipeline.run

    def run(self, phases):
        return original(self, [after(p) if p.name == phase_name else p for p in phases])

    pipeline.Pipeline.run = run  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    phase_name, mode, sep, *rest = argv
    assert sep == "--", "usage: phasefail PHASE MODE -- k3lab-args..."
    _fail(phase_name, mode)
    from k3lab.cli.main import main as k3lab

    sys.exit(k3lab(rest))


if __name__ == "__main__":
    main(sys.argv[1:])
