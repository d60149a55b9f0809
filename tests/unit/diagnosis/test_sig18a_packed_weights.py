"""A GPTQ/AWQ checkpoint's packed tensors (qweight, qzeros) that the model built has no parameter for mean the loader
was not told the checkpoint is quantised (#32, pass 18a): quantization-config, by meaning, in any loader's words."""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely

# BUILT from torch/nn/modules/module.py load_state_dict ('Unexpected key(s) in state_dict: {}. ' under
# 'Error(s) in loading state_dict for {}:\n\t{}')
TORCH = ('RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n\tUnexpected key(s) in state_dict: '
         '"model.layers.0.self_attn.q_proj.qweight", "model.layers.0.self_attn.q_proj.qzeros". \n')


@pytest.mark.parametrize("name", [
    "heldout15/quantization-config--vllm-12404.log",  # real, vllm-project/vllm#12404: vLLM's load_weights KeyError
    "heldout14/quantization-config--mlx-lm-727.log",  # real, ml-explore/mlx-lm#727: "Received 756 parameters not in model"
])
def test_real_excerpts_are_named_by_meaning(tmp_path, name):
    assert _likely(tmp_path, "quantization-config", (CORPUS / name).read_text()) == ["quantization-config"]


def test_torchs_unexpected_keys_are_named(tmp_path):
    assert _likely(tmp_path, "quantization-config", TORCH) == ["quantization-config"]


@pytest.mark.parametrize("text", [
    # near lines, made up: a quantised model loading its packed tensors as it should
    "INFO 01-24 11:29:27 weight_utils.py:251] Loading qweight and qzeros for 32 layers (awq_marlin)\n",
    "DEBUG loader: mapped model.layers.0.mlp.down_proj.qweight -> layer 0 down_proj\n",
])
def test_a_quantised_load_that_works_stays_clean(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))


def test_a_keyerror_on_another_weight_is_not_quantisation(tmp_path):
    # a plain weight the model lacks (another architecture, a renamed layer) names no quantisation config
    line = "KeyError: 'model.layers.0.attention.wqkv.weight'\n"
    assert "quantization-config" not in _likely(tmp_path, "quantization-config", line)
