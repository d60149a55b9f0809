"""The deployments' API key: read from ``$K3LAB_API_KEY`` in one place, redacted from what the kit writes."""
from __future__ import annotations

from k3lab import settings

ENV = "K3LAB_API_KEY"
REDACTED = "<redacted>"


def get() -> str | None:
    """The key, or None when unset or empty (every API is then open, as the guides ship it)."""
    return settings.current().api_key


def redact(text: str) -> str:
    secret = get()
    return text.replace(secret, REDACTED) if secret else text
