"""The simulated model's output (raw Kimi K3 XTML) and the kimi_k3 reasoning/tool parsers."""
