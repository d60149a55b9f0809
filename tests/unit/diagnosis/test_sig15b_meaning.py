"""The meaning layer (pass 15 of #32, helper b): lines quoted from public threads or built from the components'
statements (each names its source), and near lines that must name no cause or another.
"""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import likely_only as _likely


@pytest.mark.parametrize("text", [
    # quoted from NVIDIA/recsys-examples#200 (megatron-core of another release than the code expects)
    '  File "/w/examples/hstu/distributed/finalize_model_grads.py", line 5, in <module>\n'
    "    from megatron.core.distributed.finalize_model_grads import (\n"
    "ImportError: cannot import name '_get_main_grad_attr' from 'megatron.core.distributed.finalize_model_grads' "
    "(/usr/lib/python3.10/site-packages/megatron/core/distributed/finalize_model_grads.py)\n",
    # built from MindSpeed-LLM's features_manager import of a MindSpeed feature (a MindSpeed release without it)
    '  File "/MindSpeed-LLM/mindspeed_llm/features_manager/__init__.py", line 4, in <module>\n'
    "    from mindspeed.features_manager import (\n"
    "ImportError: cannot import name 'SomeNewFeature' from 'mindspeed.features_manager' "
    "(/MindSpeed-LLM/mindspeed/features_manager/__init__.py)\n",
], ids=["megatron", "mindspeed"])
def test_a_name_missing_from_a_paired_training_package_is_a_release_mismatch(tmp_path, text):
    assert _likely(tmp_path, text)[:1] == ["package-version-mismatch"]


def test_another_package_with_a_similar_name_is_not_the_pair(tmp_path):
    # modelscope's megatron_util (its own package, modelscope#105): not megatron's release
    text = "ImportError: cannot import name 'init_megatron_util' from 'megatron_util' (/x/megatron_util/__init__.py)\n"
    assert "package-version-mismatch" not in _likely(tmp_path, text)


def test_a_gpu_vgpu_quota_oom_is_not_the_npus_hbm(tmp_path):
    # HAMi-core src/allocator/allocator.c LOG_ERROR("Device %d OOM %lu / %lu", ...), a GPU pod's vGPU memory cap, then
    # torch's CUDA error (format built from the source; values made up)
    text = ("[HAMI-core ERROR (pid:7 thread=140000000000000 allocator.c:53)]: Device 0 OOM 4294967296 / 4194304000\n"
            "RuntimeError: CUDA error: unrecognized error code\n")
    assert "npu-oom" not in _likely(tmp_path, text)



def test_an_extension_missing_a_symbol_of_torchs_namespaces_was_built_against_another_torch(tmp_path):
    # the loader's "undefined symbol" for a torch symbol (c10::RegisterOperators::~RegisterOperators() mangled), as
    # torchaudio and torchvision issues quote it for a wheel of another torch release (from memory; path made up)
    text = ("ImportError: /usr/lib/python3/site-packages/ext/_C.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev\n")
    assert _likely(tmp_path, text)[:1] == ["package-version-mismatch"]


def test_a_symbol_that_differs_by_the_cxx11_abi_names_no_release(tmp_path):
    # the same loader message for a symbol that takes std::__cxx11::basic_string: the extension was built with the other
    # _GLIBCXX_USE_CXX11_ABI (a wheel of the wrong variant, or built wrong): no release pairing to name (mangled name
    # of c10::Error::Error(SourceLocation, std::string), path made up)
    text = ("ImportError: /usr/lib/python3/site-packages/ext/_C.so: undefined symbol: "
            "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE\n")
    assert "package-version-mismatch" not in _likely(tmp_path, text)


def test_a_symbol_of_another_library_is_not_torchs(tmp_path):
    # a symbol of abseil (absl::) or of CANN's graph engine (ge::): not an extension built against another torch
    for sym in ("_ZN4absl12lts_2023080212log_internal10LogMessageD1Ev", "_ZN2ge5Graph9SetInputsERKSt6vectorE"):
        text = f"ImportError: /usr/lib/python3/site-packages/ext/_C.so: undefined symbol: {sym}\n"
        assert "package-version-mismatch" not in _likely(tmp_path / sym[:8], text), sym
