"""The one way the kit runs the conformance suite: ``python -m pytest`` on the shipped suite.

Used by ``k3lab cycle``/``check``, the fault matrix and the benchmarks, so all three run the same
checks with the same plugins.
"""
from __future__ import annotations

import sys
from pathlib import Path

from k3lab import paths

# The kit's own test plugins (Hypothesis, syrupy, ...) are installed beside the suite but unused by
# it; loading them costs about 1 s of CPU in the controller and in each xdist worker.
PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:syrupy", "-p", "no:anyio",
               "-p", "no:platformdirs", "-p", "no:pytest11.testinfra"]
PARALLEL = ["-n", "2", "--dist", "loadgroup"]  # nodes' checks in parallel, one xdist group per node


def command(run_dir: Path | str, *extra: str, junit: Path | str | None = None) -> list[str]:
    """argv of a suite run against the deployment in ``run_dir``; ``extra`` may override ``-n``."""
    parallel = [] if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in extra) else PARALLEL
    argv = [sys.executable, "-m", "pytest", str(paths.CONFORMANCE), f"--run-dir={run_dir}", *PLUGINS_OFF, *parallel]
    if junit is not None:
        argv.append(f"--junitxml={junit}")
    return argv + list(extra)


# The suite's NPU and HCCN checks (npu-smi health rows, links, net health, TLS, addresses, LLDP, netdetect,
# gateway, hccn.conf, spod-info, cross-node reachability): the lab's hardware stage before any engine starts.
HARDWARE = "test_npu.py"


def hardware_command(run_dir: Path | str, junit: Path | str) -> list[str]:
    """argv of the hardware stage: the suite's NPU/HCCN file only, nodes in parallel inside the checks."""
    return [sys.executable, "-m", "pytest", str(paths.CONFORMANCE / HARDWARE), f"--run-dir={run_dir}", *PLUGINS_OFF,
            "-q", "-n", "0", "--hardware-stage", f"--junitxml={junit}"]
