"""k3lab: conformance and acceptance kit for multi-node vLLM-Ascend deployments of Kimi K3."""

__version__ = "0.1.0"
