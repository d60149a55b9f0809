"""The RUNBOOK template's byte code is cached across processes (issue #31: compiling it was a tenth of a
render); the cache never changes the text and never stops a render."""
from __future__ import annotations

from k3lab import settings
from k3lab.model import siminventory
from k3lab.render import artefacts, runbook


def _text_with_cache(folder) -> str:
    runbook._template.cache_clear()
    try:
        with settings.patched(cache=folder):
            return runbook.text(artefacts.build("a3_pd_1m", siminventory.default("a3_pd_1m")).plan)
    finally:
        runbook._template.cache_clear()


def test_the_cached_template_renders_the_same_text(tmp_path):
    first = _text_with_cache(tmp_path)
    assert list((tmp_path / "jinja").iterdir()), "the first render writes the byte code"
    assert _text_with_cache(tmp_path) == first  # the second compiles nothing and says the same


def test_a_cache_that_cannot_be_written_costs_only_a_compile(tmp_path):
    expected = _text_with_cache(tmp_path / "ok")
    blocked = tmp_path / "file"  # (a read-only folder would not do: the tests run as root in CI)
    blocked.write_text("not a folder")
    assert _text_with_cache(blocked) == expected  # $K3LAB_CACHE names a file: no cache, the same text
