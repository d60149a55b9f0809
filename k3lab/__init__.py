"""k3lab: conformance and acceptance kit for multi-node vLLM-Ascend deployments of Kimi K3.

Layers import one way only (``tests/unit/test_import_graph.py`` enforces it), bottom to top:

``errors`` → ``model`` → ``render`` → ``preflight`` → ``launchers`` → ``conformance`` → ``reports``
→ ``tools`` → ``cli``.

``k3lab.launchers`` and ``k3lab.conformance`` are the design card's top-level ``launchers/`` and
``conformance/`` folders (symlinked into the package in a checkout, copied into the wheel).
"""

__version__ = "0.1.0"
