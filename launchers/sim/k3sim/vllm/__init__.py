"""Stand-in for ``vllm serve`` (vLLM + vLLM-Ascend) on a simulated node.

It accepts the guides' command lines, validates them like the real engine (same error texts
where the references give them), builds the real topology over TCP (DP handshake, PP master
port, Mooncake handshake ports) and answers the real HTTP API with deterministic output.
Conformance checks only see real interfaces: HTTP, ``/metrics``, log lines, process command lines.
"""
import os

# The image decides which vLLM it imitates; both guides' releases are >= 0.16 (``reasoning`` only).
VLLM_VERSION = os.environ.get("K3SIM_VLLM_VERSION", "0.30.0")
