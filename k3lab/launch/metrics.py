"""Prometheus text as the engines and the MetaService serve it: one reader for gates and checks."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def total(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0.0 when there are none)."""
    return sum(by_label(text, name, None, **labels).values())


def by_label(text: str, name: str, label: str | None, **labels: str) -> dict[str, float]:
    """``name``'s samples matching ``labels``, summed per value of ``label`` (all under "" when None)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                key = s.labels.get(label, "") if label else ""
                out[key] = out.get(key, 0.0) + s.value
    return out
