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
from tests.unit.diagnosis.onelog import named as _named

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


@pytest.mark.parametrize("cause, name", [
    ("transformers-too-old", "heldout13/transformers-too-old--hf-jukebox-1b-lyrics-d13.log"),  # IPython 7 frame
    ("transformers-too-old", "heldout13/transformers-too-old--hf-mixtral-8x7b-instruct-d96.log"),  # IPython 8 frame
    ("model-files-missing", "heldout13/model-files-missing--llama.cpp-2867.log"),  # llama_file: failed to open
    ("model-files-missing", "heldout13/model-files-missing--triton-core-244.log"),
    ("quantization-config", "heldout13/quantization-config--llm-compressor-1427.log"),
    ("model-arch-unsupported", "heldout13/model-arch-unsupported--hf-phi-2-gptq-d6.log"),  # exllamav2, then KeyError
])
def test_a_real_excerpt_names_its_cause(tmp_path, cause, name):
    assert _named(tmp_path, (CORPUS / name).read_text())[:1] == [cause]


def test_a_gptq_directory_without_the_plain_loaders_files_is_likely_quantization_config(tmp_path):
    # real, heldout13 hf-wizardlm-7b-uncensored-gptq-d4 (transformers modeling_utils' raise, text-generation-webui)
    d = diagnose_text(tmp_path, (CORPUS / "heldout13/quantization-config--hf-wizardlm-7b-uncensored-gptq-d4.log")
                      .read_text())
    assert d.findings == [] and [f.cause.id for f in d.likely] == ["quantization-config"]


@pytest.mark.parametrize("line", [
    # built: transformers modeling_utils' raise for a directory with none of its weight files (made-up path)
    "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, model.ckpt.index or "
    "flax_model.msgpack found in directory /models/llama-2-7b.",
])
def test_a_plain_directory_without_weights_is_still_model_files_missing(tmp_path, line):
    assert _named(tmp_path, line + "\n") == ["model-files-missing"]


def test_a_ggml_directory_opened_by_the_transformers_loader_names_no_cause(tmp_path):
    # real, heldout13 hf-llama2-7b-chat-uncensored-ggml-d4 (the thread states no cause: a GGML file and the wrong loader)
    d = diagnose_text(tmp_path, (CORPUS / "heldout13/unknown--hf-llama2-7b-chat-uncensored-ggml-d4.log").read_text())
    assert d.findings == [] and d.likely == [] and d.first_errors


def test_a_raises_source_quoted_beside_a_gated_repos_403_is_not_missing_files(tmp_path):
    # real, heldout13 transformers-31367: IPython quotes hub.py's raise (f"{path_or_repo_id} is not a local folder
    # ..."); the exception raised is the gated repo's 403, no files missing
    d = diagnose_text(tmp_path, (CORPUS / "heldout13/unknown--transformers-31367.log").read_text())
    assert d.findings == [] and d.likely == [] and d.first_errors


def test_the_raised_not_a_local_folder_message_is_still_model_files_missing(tmp_path):
    # built: transformers utils/hub.py cached_file's raise with a made-up path
    line = ("OSError: /models/qwen is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'")
    assert _named(tmp_path, line + "\n") == ["model-files-missing"]


def test_a_loaders_failed_open_for_a_missing_file_is_model_files_missing_by_meaning(tmp_path):
    # built: a Python wrapper's log of its loader's FileNotFoundError (made-up path); no signature has this wording
    d = diagnose_text(tmp_path, "ERROR Failed to load model: [Errno 2] No such file or directory: "
                                "'/models/qwen/tokenizer.model'\n")
    assert d.findings == [] and [f.cause.id for f in d.likely] == ["model-files-missing"]


@pytest.mark.parametrize("text", [
    # llama.cpp llama_model_loader's throw when gguf_init_from_file returned NULL: a missing file and a file that is
    # not GGUF alike (built, format("%s: failed to load model from %s\n", __func__, fname))
    "llama_model_load: error loading model: llama_model_loader: failed to load model from /models/x.gguf\n",
    # ggml gguf.cpp for a file that is there but not GGUF (built from fprintf(stderr, "%s: invalid magic characters
    # '%c%c%c%c'\n", ...), from memory of the wording)
    "gguf_init_from_file: invalid magic characters 'lmgg'\nllama_load_model_from_file: failed to load model\n",
    # a shared library the loader needed (library-missing's), not the model file (built)
    "error loading model: libcudart.so.12: cannot open shared object file: No such file or directory\n",
    # Triton's error for a model whose directory is there but whose config is invalid (built, wording from memory)
    "E0301 08:00:00.123456 1 model_lifecycle.cc:626] failed to load 'llama3' version 1: Invalid argument: "
    "unexpected platform type 'x' for llama3\n",
])
def test_near_loader_lines_are_not_model_files_missing(tmp_path, text):
    d = diagnose_text(tmp_path, text)
    assert "model-files-missing" not in [f.cause.id for f in d.findings + d.likely]


def test_exllamav2s_unknown_architecture_on_a_load_that_went_on_is_no_cause(tmp_path):
    # built from exllamav2 config.py's two prints; the load went on as Llama and nothing failed (made-up names)
    text = (" !! Warning, unknown architecture: MistralForCausalLM\n !! Loading as LlamaForCausalLM\n"
            "Loading model: /models/mistral-7b-exl2\nModel loaded.\n")
    assert _named(tmp_path, text) == []


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
