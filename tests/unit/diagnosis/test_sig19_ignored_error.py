"""A line that says it ignores an error is no error (#32 pass 19, from heldout16's one healthy log flagged).

SGLang's model registry walks every model module at start-up and logs the ones its installed transformers cannot
import with no level of its own in the log: "Ignore import error when loading sglang.srt.models.X: ..." (the format
of ``logger.warning(f"Ignore import error when loading {name}: " f"{e}")`` in sgl-project/sglang
python/sglang/srt/models/registry.py). The server then comes up; the line is not its first error.
"""
from __future__ import annotations

from pathlib import Path

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def test_sglangs_ignored_import_error_in_a_healthy_start_is_no_error(tmp_path):
    # heldout16/healthy--sglang-3792.log (real, sglang PR#3792): its line 11 was the first error of a healthy start
    text = (CORPUS / "heldout16/healthy--sglang-3792.log").read_text()
    assert "Ignore import error when loading sglang.srt.models.qwen2_5_vl" in text
    assert_clean(diagnose_text(tmp_path, text))


def test_the_registrys_other_wording_and_another_tools_are_no_error(tmp_path):
    # built from sglang's registry.py format (a later release puts a colon after the module name), and a build
    # script's "..., ignoring error" (a shell log_warning message): each says the error was ignored
    text = ("[2026-04-13 12:34:29] Ignore import error when loading sglang.srt.models.gemma4_audio: cannot import "
            "name 'Gemma4AudioConfig' from 'transformers'\n"
            "Build script returned error but all nodes built successfully - ignoring error\n")
    assert_clean(diagnose_text(tmp_path, text))


def test_an_error_that_mentions_ignoring_is_still_an_error(tmp_path):
    # near lines: an error whose words include "ignore" but which ignores nothing stays the first error
    text = ("[2026-04-13 12:34:29] Error: cannot ignore the lock file, another server holds it\n"
            "RuntimeError: --ignore-patterns given twice\n")
    first = [e.text for e in diagnose_text(tmp_path, text).first_errors]
    assert first and first[0].startswith("[2026-04-13 12:34:29] Error: cannot ignore"), first
