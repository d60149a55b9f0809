"""Pass 9 of #32 (s15a): model loaders' words for missing files, an unknown architecture or quantisation scheme,
and transformers' unknown model_type in a notebook's traceback (built lines: tests/fixtures/upstream_lines/sig15a.yaml),
and the lines near them that must not be taken for those causes.

Real lines are excerpts of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names the thread); BUILT lines
format an upstream statement with made-up values, their source beside them; never called real.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.diagnosis.onelog import diagnose_text

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def _named(tmp_path: Path, text: str) -> list[str]:
    d = diagnose_text(tmp_path, text)
    return [f.cause.id for f in d.findings]


@pytest.mark.parametrize("cause, name", [
    ("transformers-too-old", "heldout13/transformers-too-old--hf-jukebox-1b-lyrics-d13.log"),  # IPython 7 frame
    ("transformers-too-old", "heldout13/transformers-too-old--hf-mixtral-8x7b-instruct-d96.log"),  # IPython 8 frame
])
def test_a_real_excerpt_names_its_cause(tmp_path, cause, name):
    assert _named(tmp_path, (CORPUS / name).read_text())[:1] == [cause]


@pytest.mark.parametrize("line", [
    # transformers' own FutureWarning from configuration_auto.py (real wording, a Ray Serve log in public source)
    "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/configuration_auto.py:1020: FutureWarning: The "
    "`use_auth_token` argument is deprecated and will be removed in v5 of Transformers.",
    # an IPython frame through AutoConfig.from_pretrained, not the mapping's lookup (header layout as a public log)
    "File ~/miniconda3/lib/python3.10/site-packages/transformers/models/auto/configuration_auto.py:1138, in "
    "AutoConfig.from_pretrained(cls, pretrained_model_name_or_path, **kwargs)",
])
def test_other_configuration_auto_frames_are_not_transformers_too_old(tmp_path, line):
    assert "transformers-too-old" not in _named(tmp_path, line + "\n")
