"""Signatures written from the raise and log statements of vLLM, SGLang, transformers, huggingface_hub,
torch.distributed, pyzmq and Ray across their releases, tested on lines BUILT from those statements
(tests/fixtures/upstream_lines/*.yaml: each names its source; none is a real log line), and on real and built
lines the widened signatures must leave alone.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import diagnose_text as _diagnose

BUILT = Path(__file__).resolve().parents[2] / "fixtures" / "upstream_lines"
CAT = catalogue.load()
ENTRIES = [(f"{p.stem}:{i}:{e['cause']}", e) for p in sorted(BUILT.glob("*.yaml"))
           for i, e in enumerate(yaml.safe_load(p.read_text()))]


@pytest.mark.parametrize("entry", [e for _, e in ENTRIES], ids=[i for i, _ in ENTRIES])
def test_a_line_built_from_an_upstream_statement_names_its_cause(tmp_path, entry):
    assert entry["cause"] in CAT.ids and len(entry["source"]) > 20, "each built line names its cause and source"
    d = _diagnose(tmp_path, entry["log"])
    if entry.get("warning"):
        # a statement logged at WARNING level: on a log that did not fail it is a note, never a cause
        assert d.findings == [] and any(entry["cause"] in n for n in d.notes), (d.notes, d.findings)
    else:
        assert d.top is not None and d.top.cause.id == entry["cause"], [f.cause.id for f in d.findings]


def test_every_built_line_is_a_different_statement():
    logs = [e["log"] for _, e in ENTRIES]
    assert len(logs) == len(set(logs))


# Lines the widened signatures must not take for a failure: upstream statements printed on healthy start-ups or
# for other reasons, each built from (or, where marked, quoted from) the source named beside it.
NOT_A_CAUSE = [
    # huggingface_hub/utils/_http.py http_backoff: logger.warning(f"'{err}' thrown while requesting {method} {url}"),
    # a retry that may well succeed: not the raised ConnectionError hf-hub-unreachable looks for
    "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
    "/moonshotai/Kimi-K3/resolve/main/config.json\"), '(Request ID: 1a2b)')' thrown while requesting HEAD "
    "https://huggingface.co/moonshotai/Kimi-K3/resolve/main/config.json",
    # vllm/model_executor/model_loader/utils.py: logger.warning("%s has no vLLM implementation, falling back to
    # Transformers implementation. Some features may not be supported and performance may not be optimal.", arch)
    "WARNING 05-01 10:00:00 [utils.py:201] KimiK3ForCausalLM has no vLLM implementation, falling back to Transformers "
    "implementation. Some features may not be supported and performance may not be optimal.",
    # torch/csrc/distributed/c10d/socket.cpp: C10D_WARNING while a client retries a master not yet listening
    "[W506 10:00:00.123456789 socket.cpp:752] [c10d] The client socket has failed to connect to [node0]:29500 "
    "(errno: 111 - Connection refused).",
    # vllm/config.py _get_and_verify_max_len with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: logger.warning(...)
    "WARNING 05-01 10:00:00 [config.py:3330] User-specified max_model_len (262144) is greater than the derived "
    "max_model_len (max_position_embeddings=131072 or model_max_length=None in model's config.json). This may lead "
    "to incorrect model outputs or CUDA errors. Make sure the value is correct and within the model context size.",
    # vllm/executor/ray_utils.py initialize_ray_cluster, a new placement group: logger.warning("The number of required
    # %ss exceeds the total number of available %ss in the placement group.", ...) while the cluster may still grow
    "WARNING 05-01 10:00:00 [ray_utils.py:330] The number of required NPUs exceeds the total number of available "
    "NPUs in the placement group.",
]


@pytest.mark.parametrize("line", NOT_A_CAUSE, ids=range(len(NOT_A_CAUSE)))
def test_a_healthy_or_warning_line_names_no_cause(tmp_path, line):
    d = _diagnose(tmp_path, line + "\n")  # alone: no readiness line after it to excuse it
    assert d.findings == [] and d.first_errors == [], ([f.cause.id for f in d.findings], d.first_errors)


def test_a_zmq_bind_to_an_address_not_on_the_host_is_not_named_a_port_clash_by_its_message():
    # pyzmq raises "Cannot assign requested address" for an IP the host lacks: no signature's own wording of a port
    # taken matches it (the bind frames before it still do: see the report of the catalogue pass)
    line = b"zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.21.22.206:29500')"
    for cid in ("zmq-port-in-use", "port-in-use", "api-port-in-use"):
        assert not any(s.regex.search(line) for s in CAT.get(cid).signatures), cid


def test_a_missing_optional_model_file_is_not_a_missing_model():
    # generation_config.json is optional: transformers' GenerationConfig.from_pretrained raises for its absence and
    # vLLM (transformers_utils/config.py try_get_generation_config) falls back to defaults; only config.json, the
    # tokenizer's and the weights' own files count (built from Python's FileNotFoundError wording)
    line = b"FileNotFoundError: [Errno 2] No such file or directory: '/data/models/Kimi-K3/generation_config.json'"
    assert not any(s.regex.search(line) for s in CAT.get("model-files-missing").signatures)
