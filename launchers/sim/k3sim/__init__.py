"""Stand-ins for the Ascend node software the simulator imitates.

The image builder (``launchers/sim/image.py``) puts this package on ``/opt/k3lab-sim/site``, which is
on ``PYTHONPATH`` inside every simulated node; the rest of the image is ``launchers/sim/rootfs/``.
"""
