"""Pass 10 of #32 (s16a): MLX loaders' words for a model type they have no module for, a model directory without
config.json and a GPTQ checkpoint they cannot load; transformers' unknown model_type in a Windows traceback; a
rendezvous master whose name does not resolve (built lines: tests/fixtures/upstream_lines/sig16a.yaml), and the lines
near them that must not be taken for those causes.

Real lines are excerpts of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names the thread); BUILT lines
format an upstream statement with made-up values, their source beside them; never called real.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.diagnosis.onelog import diagnose_text
from tests.unit.diagnosis.onelog import likely_only as _likely
from tests.unit.diagnosis.onelog import named as _named

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


@pytest.mark.parametrize("cause, name", [
    ("model-arch-unsupported", "heldout14/model-arch-unsupported--mlx-lm-806.log"),  # ModuleNotFoundError mlx_lm.models
    ("model-arch-unsupported", "heldout14/model-arch-unsupported--mlx-vlm-207.log"),
    ("quantization-config", "heldout14/quantization-config--mlx-lm-727.log"),  # .qweight / .qzeros extras
    ("transformers-too-old", "heldout14/transformers-too-old--hf-mistral-7b-v0.1-d108.log"),  # Windows frame
])
def test_a_real_excerpt_names_its_cause(tmp_path, cause, name):
    assert _named(tmp_path, (CORPUS / name).read_text())[:1] == [cause]


@pytest.mark.parametrize("cause, name", [
    ("model-arch-unsupported", "heldout14/model-arch-unsupported--mlx-openai-server-132.log"),
    ("model-files-missing", "heldout14/model-files-missing--mlx-examples-1033.log"),
    ("dist-init-timeout", "heldout14/dist-init-timeout--pytorch-operator-125.log"),
])
def test_a_real_excerpt_is_likely_its_cause(tmp_path, cause, name):
    assert _likely(tmp_path, (CORPUS / name).read_text())[:1] == [cause]


@pytest.mark.parametrize("cause, text", [
    # built: mlx-lm utils.py _get_classes (msg = f"Model type {model_type} not supported."; logging.error(msg);
    # raise ValueError(msg)), made-up model type
    ("model-arch-unsupported", "ERROR:root:Model type kimi_k3 not supported.\nValueError: Model type kimi_k3 not "
                               "supported.\n"),
    # built: mlx-vlm utils.py's later wording (f"Model type {model_type} not supported. Error: {last_err}"), as a
    # public excerpt of its source quotes it
    ("model-arch-unsupported", "ValueError: Model type gemma9 not supported. Error: No module named "
                               "'mlx_vlm.speculative.drafters.gemma9'\n"),
    # built: mlx-lm / mlx-vlm utils.py load_config (logging.error(f"Config file not found in {model_path}"), then the
    # FileNotFoundError re-raised), made-up path
    ("model-files-missing", "ERROR:root:Config file not found in /models/Pixtral-12B\n"),
    # built: torch 1.x TCPStore's "host not found: " + gai_strerror (wording as quoted in public torchelastic and
    # Ascend notes; the frame from torch/distributed/rendezvous.py _env_rendezvous_handler), made-up path
    ("dist-init-timeout", "Traceback (most recent call last):\n"
                          '  File "/usr/lib/python3.8/site-packages/torch/distributed/rendezvous.py", line 172, in '
                          "_env_rendezvous_handler\n    store = TCPStore(master_addr, master_port, world_size, "
                          "start_daemon, timeout)\nValueError: host not found: Temporary failure in name resolution\n"),
])
def test_a_built_line_is_likely_its_cause(tmp_path, cause, text):
    assert _likely(tmp_path, text)[:1] == [cause]


@pytest.mark.parametrize("text, cause", [
    # transformers' AutoConfig (real wording, configuration_auto.py): the library too old, not the engine's registry
    ("ValueError: The checkpoint you are trying to load has model type `qwen3_next` but Transformers does not "
     "recognize this architecture. This could be because of an issue with the checkpoint, or because your version of "
     "Transformers is out of date.\n", "model-arch-unsupported"),
    # MLX's load_weights with extras that are not GPTQ/AWQ tensors (a vision tower the text model has no class for;
    # the wording as public notes quote it, names made up): a model-class mismatch, no quantisation cause
    ("ValueError: Received 2 parameters not in model: \nvision_tower.encoder.biases,\nvision_tower.encoder.scales.\n",
     "quantization-config"),
    # an application's own settings file, not "in" a model directory (built)
    ("ERROR: config file not found: /etc/myapp/settings.yaml\n", "model-files-missing"),
    # Gloo's own hostname not resolving (gloo-loopback's signature), not the rendezvous master
    ("RuntimeError: Unable to resolve hostname to a (local) address\n", "dist-init-timeout"),
    # the hub's name not resolving while a model downloads (urllib3's wording): not the rendezvous
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded "
     "with url: /api/models/x (Caused by NameResolutionError(\"Failed to resolve 'huggingface.co' ([Errno -3] "
     "Temporary failure in name resolution)\"))\n", "dist-init-timeout"),
])
def test_near_lines_are_not_taken_for_that_cause(tmp_path, text, cause):
    d = diagnose_text(tmp_path, text)
    assert cause not in [f.cause.id for f in d.findings + d.likely]


def test_transformers_tokenizer_class_missing_names_no_cause(tmp_path):
    # real, heldout14 mlx-lm-682 (labelled transformers-too-old): transformers' "Tokenizer class X does not exist or
    # is not currently imported." follows a transformers too old for the class and a model whose own tokenizer code
    # was not trusted alike; the line cannot tell them apart, so its first error is shown and no cause named
    d = diagnose_text(tmp_path, (CORPUS / "heldout14/transformers-too-old--mlx-lm-682.log").read_text())
    assert d.findings == [] and d.likely == [] and d.first_errors


def test_llama_cpps_unknown_architecture_stays_model_arch_unsupported(tmp_path):
    # real, heldout14 koboldcpp-2032 (labelled unknown by the collector's strict reading): llama.cpp's loader does
    # not have the GGUF's architecture, which is what model-arch-unsupported says; kept, not tuned away
    assert _named(tmp_path, (CORPUS / "heldout14/unknown--koboldcpp-2032.log").read_text())[:1] == [
        "model-arch-unsupported"]
