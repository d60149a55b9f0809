"""The dynamic loader's "undefined symbol: " is an error line wherever it is printed, and the meaning layer reads an
English term that Chinese text runs into with no space (#32 pass 17b). Both for driver-cann-mismatch: torch_npu or a
CANN library built for another torch or CANN release than the one it is loaded with.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import diagnose_without

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"
CAUSE = "driver-cann-mismatch"


def _likely(tmp_path: Path, text: str) -> list[str]:
    """The causes the meaning layer names with driver-cann-mismatch's own signatures taken out."""
    d = diagnose_without(tmp_path, CAUSE, text)
    assert not d.findings, [f.cause.id for f in d.findings]
    return [f.cause.id for f in d.likely]


@pytest.mark.parametrize("name", [
    # Ascend/pytorch#35: mmengine's WARNING quotes the loader's line on a line of its own, with no level
    "dev/driver-cann-mismatch--ascend-pytorch-35.log",
    # triton-ascend#328: "torch-npu==2.7.1导入时报错undefined symbol: MsprofSysCycleTime" (pip's name, Chinese glued on)
    "dev/driver-cann-mismatch--triton-ascend-328.log",
])
def test_a_real_undefined_symbol_line_is_read(tmp_path, name):
    assert _likely(tmp_path, (CORPUS / name).read_text())[:1] == [CAUSE]


def test_another_projects_wording(tmp_path):
    # vllm-project/vllm-ascend#750's title (found with `search`, issues): torch_npu's ATB plugin built for another ATB
    line = ("OSError: /home/ma-user/anaconda3/envs/MindSpore/lib/python3.9/site-packages/torch_npu/lib/libop_plugin_atb.so:"
            " undefined symbol: _ZN3atb15CreateOperationINS_5infer14GroupTopkParamEEEiRKT_PPNS")
    assert _likely(tmp_path, line + "\n")[:1] == [CAUSE]


def test_a_warning_that_quotes_the_loader_stays_clean(tmp_path):
    # dev/healthy--vllm-ascend-2809.log (vllm-ascend#2809, healthy): every vllm-ascend start warns that vllm._C did
    # not load ("Failed to import from vllm._C with ImportError('.../_C.abi3.so: undefined symbol: ...')")
    assert_clean(diagnose_text(tmp_path, (CORPUS / "dev/healthy--vllm-ascend-2809.log").read_text()))


def test_word_edges_are_ascii_ones():
    group = catalogue._group(["undefined symbol", "hub", "tp"])
    assert group.search("导入时报错undefined symbol: MsprofSysCycleTime")
    assert not group.search("https://github.com/x") and not group.search("http_proxy")
