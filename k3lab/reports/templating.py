"""The reports' one template engine: jinja2 with autoescape, strict about missing values, every printed value
printable (k3lab.errors.printable) before it is escaped.

Every value in a report may come from an inventory (node names, addresses, paths), so HTML is
never assembled by hand: templates escape each value, and the secret is redacted from each value
before it is rendered.
"""
from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup

from k3lab.errors import printable
from k3lab.model import apikey

__all__ = ["Markup", "render_html"]


@lru_cache(maxsize=None)
def _template(source: str):
    import jinja2  # here: the CLI's light commands import the reports but never render HTML

    # finalize: every {{ value }} printable before autoescape escapes it, attributes of objects too
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             finalize=_printable)
    return env.from_string(source)


def _printable(value: object) -> object:
    """A value as a template prints it: text shown, never run (controls, bidi overrides, lone surrogates
    escaped; :func:`k3lab.errors.printable`); the kit's own Markup (SVG, CSS) as it is."""
    return printable(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def render_html(source: str, **context: object) -> str:
    """``source`` rendered with ``context`` (mark trusted fragments, e.g. generated SVG, with Markup).

    The secret is redacted from the values before they are rendered, never from the finished HTML: a
    replace over markup would rewrite tags and cells that merely contain a short key."""
    return _template(source).render(**{k: redacted(v) for k, v in context.items()})


def redacted(value: object) -> object:
    """``value`` with the secret redacted from every string in it (dicts, lists, tuples); Markup is
    built by the kit from values already redacted (the run's artefacts are redacted on load)."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return apikey.redact(value)
    if isinstance(value, dict):
        return {redacted(k): redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(v) for v in value)
    return value
