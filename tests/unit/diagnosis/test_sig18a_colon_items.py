"""A message that ends on a colon goes on in the indented lines below it, the items it announces (#32, pass 18a):
xFormers' "xFormers was built for:" above "    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cu118)", CMake's
"CMake Error at ... (message):" above its indented message. Indented lines below any other line stay a frame's code."""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely


@pytest.mark.parametrize(("name", "cause"), [
    # real, facebookresearch/xformers#800 and #982: the build's torch against the installed one, read with its item
    ("heldout13/package-version-mismatch--xformers-800.log", "package-version-mismatch"),
    ("heldout13/package-version-mismatch--xformers-982.log", "package-version-mismatch"),
    # real, ggml-org/llama.cpp#10719: CMake's message below "(message):" names the SoC the kernels do not support
    ("heldout11/npu-soc-unsupported--llama.cpp-10719.log", "npu-soc-unsupported"),
])
def test_real_excerpts_are_read_with_the_items_below_the_colon(tmp_path, name, cause):
    assert _likely(tmp_path, cause, (CORPUS / name).read_text()) == [cause]


def test_pips_you_have_states_the_installed_release():
    # real wording of pip's resolver, as the catalogue's signature cites it (vllm-ascend 0.9.1 requires torch==2.5.1)
    line = ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed."
            " vllm-ascend 0.9.1 requires torch==2.5.1, but you have torch 2.6.0 which is incompatible.")
    assert catalogue.load().get("package-version-mismatch").means(line)


def test_indented_code_below_an_error_is_not_its_message(tmp_path):
    # an indented line below a message left open by a comma, not a colon: a frame's code, not read (made up)
    text = ("ERROR 01-24 11:29:27 [loader.py:366] failed to load the extension module,\n"
            "    xformers_version = built for torch 2.1 (you have 2.1)\n")
    assert "package-version-mismatch" not in _likely(tmp_path, "package-version-mismatch", text)


def test_a_warning_with_items_stays_a_note_on_a_healthy_log(tmp_path):
    # an INFO line ending on a colon, its indented items below: no error (made up, in vLLM's words)
    text = ("INFO 06-08 14:45:44 [config.py:1604] Using these settings:\n"
            "    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cu121)\n")
    assert_clean(diagnose_text(tmp_path, text))
