"""The meaning layer (#32): a first error no signature explains, read for the meaning of a catalogue cause.

Every log here is a real excerpt of the triage corpus (tests/fixtures/triage_corpus/corpus.yaml names its thread).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from k3lab.cli.main import main
from k3lab.diagnosis import catalogue
from k3lab.diagnosis.engine import LIKELY, diagnose

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"
HEADS = CORPUS / "heldout9/tp-heads-indivisible--fms-274.log"  # "AssertionError: The number of heads must be divisible by world size"
BIND = CORPUS / "heldout9/api-port-in-use--openwebui-condainstaller-1.log"  # uvicorn on Windows: "[Errno 10048] ..."


def _logs(tmp_path: Path, *per_node: Path) -> Path:
    for i, src in enumerate(per_node):
        (tmp_path / f"n{i}").mkdir(parents=True)
        shutil.copy(src, tmp_path / f"n{i}" / "engine.log")
    return tmp_path


@pytest.mark.parametrize("log, cause", [(HEADS, "tp-heads-indivisible"), (BIND, "api-port-in-use")])
def test_a_first_error_with_a_causes_meaning_is_named_likely(tmp_path, capsys, log, cause):
    d = diagnose(_logs(tmp_path, log))
    assert not d.findings and d.first_errors  # no signature: the first error stays shown
    assert d.likely[0].cause.id == cause  # the most specific cause first (catalogue order)
    assert main(["triage", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "first error, cause unknown" in out and f"likely {cause} on n0 (by the meaning of the first error: " in out
    assert main(["triage", "--json", str(tmp_path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads((Path(catalogue.__file__).parents[1] / "schemas" / "triage.json").read_text()))
    assert doc["verdict"] == LIKELY and doc["findings"] == []
    assert doc["likely"][0]["id"] == cause and doc["likely"][0]["confidence"] == LIKELY == doc["likely"][0]["tier"]


def test_on_another_node_beside_a_healthy_one(tmp_path):
    healthy = next(CORPUS.glob("dev/healthy--*.log"))
    d = diagnose(_logs(tmp_path, healthy, HEADS))
    assert d.likely[0].cause.id == "tp-heads-indivisible" and d.likely[0].node == "n1"


def test_a_healthy_log_is_never_read_for_meaning(tmp_path, capsys):
    for i, healthy in enumerate(sorted(CORPUS.glob("*/healthy--*.log"))[:10]):
        d = diagnose(_logs(tmp_path / str(i), healthy))
        assert not d.likely and not d.first_errors, healthy.name


@pytest.mark.parametrize("name", ["heldout3/unknown--vllm-omni-2898.log",  # "The argument is invalid": one group only
                                  "dev/unknown--vllm-ascend-633.log"])  # "no available ascend quantizer": no NPU word
def test_an_unknown_error_with_one_group_only_stays_unknown(tmp_path, name):
    d = diagnose(_logs(tmp_path, CORPUS / name))
    assert d.first_errors and not d.likely and not d.findings


def test_a_signature_finding_is_never_second_guessed_by_meaning(tmp_path):
    d = diagnose(_logs(tmp_path, CORPUS / "dev" / next(p.name for p in (CORPUS / "dev").glob("npu-oom--*.log"))))
    assert d.findings and not d.likely


def test_each_meaning_needs_two_groups():
    cause = catalogue.load().get("port-in-use")
    with pytest.raises(ValueError):
        catalogue.Cause.model_validate({**cause.model_dump(), "meaning": [[["port"]]]})
    assert cause.means("OSError: [Errno 98] Address already in use") and not cause.means("port 8000 ready")


@pytest.mark.parametrize("name, likely", [
    # a signature's line without its context (the MTE address error alone): no cause, but a failure line
    ("heldout/hccl-buffsize-too-small--vllm-ascend-2674.log", None),
    # Ray's memory monitor at INFO level: "out of memory" is a failure event; its meaning is host memory on a node
    ("heldout9/host-oom--openrlhf-911.log", "host-oom"),
    # "NPU out of memory. Tried to allocate more than 1EB": shown, but not read as npu-oom (corrupted sizes)
    ("heldout2/unknown--flash-linear-attention-npu-149.log", None)])
def test_never_silent_on_a_failure_line(tmp_path, name, likely):
    d = diagnose(_logs(tmp_path, CORPUS / name))
    assert d.failed and d.first_errors and not d.findings
    assert (d.likely[0].cause.id if d.likely else None) == likely


def test_an_exception_is_read_with_the_frame_that_raised_it(tmp_path):
    # "KeyError: 'chatglm'" raised in transformers/models/auto/configuration_auto.py: transformers does not know it
    d = diagnose(_logs(tmp_path, CORPUS / "heldout9/transformers-too-old--chatglm-6b-913.log"))
    assert d.likely[0].cause.id == "transformers-too-old" and d.likely[0].evidence[0].text == "KeyError: 'chatglm'"
