"""Stand-ins for the Ascend node software the simulator imitates.

The image builder (``launchers/sim/image.py``) puts this package on ``/opt/k3lab-sim/site``, which is
on ``PYTHONPATH`` inside every simulated node; the rest of the image is ``launchers/sim/rootfs/``.
"""


def run_tool(answer, argv: list[str] | None = None) -> int:
    """A device tool's command line: print what ``answer(args)`` says and return its exit status (the
    node's tool service, k3sim.toolservice, calls the same ``answer`` without a process)."""
    import sys

    out, status = answer(list(sys.argv[1:] if argv is None else argv))
    sys.stdout.write(out)
    return status
