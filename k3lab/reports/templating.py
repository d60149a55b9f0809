"""The reports' one template engine: jinja2 with autoescape, strict about missing values.

Every value in a report may come from an inventory (node names, addresses, paths), so HTML is
never assembled by hand: templates escape each value, and the secret is redacted from the result
in both its plain and its escaped form.
"""
from __future__ import annotations

import html
from functools import lru_cache

from markupsafe import Markup

from k3lab.model import apikey

__all__ = ["Markup", "render_html"]


@lru_cache(maxsize=None)
def _template(source: str):
    import jinja2  # here: the CLI's light commands import the reports but never render HTML

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(source)


def render_html(source: str, **context: object) -> str:
    """``source`` rendered with ``context`` (mark trusted fragments, e.g. generated SVG, with Markup)."""
    return redact_html(_template(source).render(**context))


def redact_html(text: str) -> str:
    """Values are redacted on load; this also catches the escaped form of the secret."""
    secret = apikey.get()
    if not secret:
        return text
    masked = html.escape(apikey.REDACTED)
    return text.replace(secret, masked).replace(html.escape(secret), masked).replace(
        html.escape(secret, quote=False), masked)
