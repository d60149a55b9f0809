"""Fail a check with structured evidence that lands in JUnit XML and the acceptance report.

    from k3lab.conform.evidence import check, fail

    check(len(chips) >= want, what="NPUs listed by npu-smi", expected=f">= {want}", actual=len(chips),
          where=f"{node.name}: npu-smi info", cause="a device is missing or its driver did not load",
          remedy="reseat or reset the NPU, then re-run npu-smi info", kind="environment")

The evidence travels on the exception (not on a global "current test"), so it also survives a
module-scoped fixture whose cached failure pytest re-raises for every dependent test. The plugin
(``k3lab.conform.plugin``) copies it into ``item.user_properties`` while building the report.
Without the plugin the message alone still says everything.

``kind`` says who has to act: ``environment`` (hardware, network, driver, lab setup), ``product``
(vLLM, vLLM-Ascend, MemCache behaviour) or ``kit`` (k3lab itself). Left out, it is the test
module's ``KIND`` (default ``product``), the same rule the plugin applies to plain ``assert``.
"""
from __future__ import annotations

import re
from typing import NoReturn

from k3lab.model.apikey import redact

KINDS = ("environment", "product", "kit")
FIELDS = ("what", "expected", "actual", "where", "cause", "remedy", "kind")
DEFAULT_KIND = "product"
_MAX_IN_MESSAGE = 300  # full values stay in the properties; the message must remain one paragraph
# Exceptions that mean the check itself is broken, not the deployment.
KIT_ERRORS: tuple[type[BaseException], ...] = (NameError, AttributeError, TypeError, ImportError, SyntaxError)


def _text(value: object) -> str:
    return redact(value if isinstance(value, str) else str(value))


def _short(value: str) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= _MAX_IN_MESSAGE else flat[:_MAX_IN_MESSAGE] + "… (full value in the report)"


def message(ev: dict[str, str | None]) -> str:
    text = (f"{_short(ev['what'] or 'check')}: expected {_short(ev['expected'] or '?')}, "
            f"got {_short(ev['actual'] or '?')} at {_short(ev['where'] or '?')}.")
    if ev.get("cause"):
        text += f" Likely cause: {_short(ev['cause'] or '').rstrip('.')}."
    if ev.get("remedy"):
        text += f" Remedy: {_short(ev['remedy'] or '').rstrip('.')}."
    if ev.get("kind"):
        text += f" [{ev['kind']}]"
    return text


def fail(what: str, expected: object, actual: object, where: str, cause: str = "", remedy: str = "",
         kind: str | None = None) -> NoReturn:
    """Raise AssertionError with a one-paragraph message; ``.evidence`` holds the fields.

    A plain AssertionError so reports and pytest's summary read like any failed assert."""
    __tracebackhide__ = True  # a failed check shows the check's line, not this helper
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    ev: dict[str, str | None] = {"what": _text(what), "expected": _text(expected), "actual": _text(actual),
                                 "where": _text(where), "cause": _text(cause), "remedy": _text(remedy),
                                 "kind": kind}
    err = AssertionError(message(ev))
    err.evidence = ev  # type: ignore[attr-defined]
    raise err


def check(condition: object, what: str, expected: object, actual: object, where: str, cause: str = "",
          remedy: str = "", kind: str | None = None) -> None:
    """:func:`fail` unless ``condition`` is true."""
    __tracebackhide__ = True
    if not condition:
        fail(what, expected, actual, where, cause, remedy, kind)


def module_kind(module: object) -> str:
    kind = getattr(module, "KIND", DEFAULT_KIND)
    return kind if kind in KINDS else DEFAULT_KIND


def properties(exc: BaseException | None, module: object) -> list[tuple[str, str]]:
    """JUnit properties for a failure: the evidence fields, or just a default ``kind``."""
    if exc is None:
        return []
    if isinstance(getattr(exc, "evidence", None), dict):
        ev = dict(exc.evidence)  # type: ignore[attr-defined]
        ev["kind"] = ev.get("kind") or module_kind(module)
        return [(k, ev[k] or "") for k in FIELDS if ev.get(k)]
    kind = "kit" if isinstance(exc, KIT_ERRORS) else module_kind(module)
    return [("kind", kind)]


_ASSERT_PREFIX = re.compile(r"^AssertionError:\s*")


def strip_prefix(msg: str) -> str:
    """``AssertionError: text`` -> ``text`` for reports."""
    return _ASSERT_PREFIX.sub("", msg)
