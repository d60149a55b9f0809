"""Render: every per-node artefact (scripts, MemCache files, plan.json) from a scenario and an inventory."""
