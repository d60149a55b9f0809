"""Stand-ins for the Ascend node software the simulator imitates.

Everything under ``rootfs/`` is copied verbatim into the sim node image; this package is on
``PYTHONPATH`` inside every simulated node (see ``launchers/sim/image.py``).
"""
