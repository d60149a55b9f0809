"""k3lab: conformance and acceptance kit for multi-node vLLM-Ascend deployments of Kimi K3.

Layers import one way only (``tests/unit/test_import_graph.py`` enforces it), bottom to top:

``errors`` → ``model`` → ``render`` → ``preflight`` → ``launch`` → ``conform`` → ``reports``
→ ``tools`` → ``cli``.

Every module of the kit lives here, under one path and one name. The design card's top-level folders
hold what is not imported: the live suite (``conformance/``), the simulator image's contents
(``launchers/sim/``), fixtures and golden snapshots; ``k3lab.paths`` finds them.
"""

__version__ = "0.1.0"
