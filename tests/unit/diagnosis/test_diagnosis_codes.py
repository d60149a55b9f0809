"""Error-code knowledge (#32 item 2): every code sourced, decoded where the Ascend stack prints it, and shown
with the first error of a log no catalogued cause explains."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from k3lab.cli.main import main
from k3lab.diagnosis import codes

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def test_every_code_has_a_meaning_and_a_public_source():
    table = codes.load().codes
    assert len(table) >= 90
    for code, c in table.items():
        assert c.source.startswith("https://"), code
        assert code.isdigit() == c.name.startswith(("ACL_ERROR_", "ACLNN_ERR_")), code  # numbers carry the header's name


# each line verbatim from the corpus excerpt named (tests/fixtures/triage_corpus/corpus.yaml gives the thread)
@pytest.mark.parametrize("excerpt, want", [
    ("heldout/aicore-timeout--vllm-ascend-4972.log", ["ERR02005", "507014", "ERR00100", "EH9999"]),
    ("dev/visible-devices--gpustack-3352.log", ["207004", "ERR00100", "EE1001"]),
    ("dev/hccl-transport-init--vllm-ascend-3162.log", ["EI0009"]),
    ("dev/unknown--vllm-ascend-2712.log", ["ERR02200"]),
])
def test_codes_are_found_where_the_stack_prints_them(excerpt, want):
    found = [code for line in (CORPUS / excerpt).read_text().splitlines() for code, _ in codes.decode(line)]
    assert list(dict.fromkeys(found)) == want


def test_a_number_that_is_no_error_code_is_not_decoded():
    # vllm-project/vllm-ascend#3843 (a healthy INFO line): 65452113920 bytes is no code
    assert codes.decode("(Worker_TP2 pid=554) INFO 10-28 21:14:48 [worker_v1.py:259] Available memory: 0, "
                        "total memory: 65452113920") == []


def test_the_first_error_of_an_unexplained_log_is_decoded(tmp_path, capsys):
    (tmp_path / "n0").mkdir()
    shutil.copy(CORPUS / "dev" / "unknown--pytorch-66.log", tmp_path / "n0" / "engine.log")
    assert main(["triage", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(out) if "first error, cause unknown: n0/engine.log:1: RuntimeError" in line)
    assert out[i + 1] == "    code 507035 ACL_ERROR_RT_VECTOR_CORE_EXCEPTION: vector core exception"


def _diagnose_lines(tmp_path, *lines):
    from k3lab.diagnosis.engine import diagnose

    (tmp_path / "n0").mkdir()
    (tmp_path / "n0" / "engine.log").write_text("\n".join(lines) + "\n")
    return diagnose(tmp_path)


def test_every_cause_a_code_names_is_in_the_catalogue():
    from k3lab.diagnosis import catalogue

    ids = set(catalogue.load().ids)
    named = {code: c.cause for code, c in codes.load().codes.items() if c.cause}
    assert {"EI0002", "EI0006", "EI0009", "EL0001", "EL0004", "207018", "507014", "507033", "-8020"} <= set(named)
    assert set(named.values()) <= ids
    for generic in ("EE9999", "EH9999", "EZ9999", "EI9999", "ERR99999", "507000"):
        assert not codes.load().codes[generic].cause, generic


# each line verbatim from the vendor document named in error_codes.yaml
@pytest.mark.parametrize("line, cause", [
    # Ascend/pytorch docs/zh/troubleshooting/HCCL_timeout.md
    ("EI0002: [PID: 7277] 2024-11-28-11:59:30.645.648 The wait execution of the Notify register times out. Reason: "
     "The Notify register has not received the Notify record from remote rank [unknown].", "hccl-exec-timeout"),
    # Ascend/RecSDK's container guide
    ("dcmi model initialized failed, because the device is used. ret is -8020", "npu-device-occupied"),
    # HCCL under LLaMA-Factory on 910B (hiyouga/LlamaFactory#3839): the last training process still held the device
    ("EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training "
     "process is running.", "npu-device-occupied"),
])
def test_a_documented_code_decides_its_cause(tmp_path, line, cause):
    from k3lab.diagnosis import catalogue

    d = _diagnose_lines(tmp_path, line)
    # by the code alone unless the line also carries the cause's own wording (EI0002's message is a signature too)
    worded = any(sig.regex.search(line.encode()) for sig in catalogue.load().get(cause).signatures)
    assert d.top is not None and d.top.cause.id == cause and d.top.by_code != worded


def test_a_generic_code_decides_nothing(tmp_path):
    # mindspore-ai/docs tutorials/source_en/debug/error_analysis/cann_error_cases.md: EZ9999 names no cause
    d = _diagnose_lines(tmp_path, "EZ9999: Inner Error!")
    assert d.findings == [] and d.first_errors


def test_a_cause_in_its_own_words_outranks_a_code_alone(tmp_path):
    # PTOAS#341 (dev corpus): EL0004's memory failure (npu-oom's wording), then SetDevice's 507033
    from k3lab.diagnosis.engine import diagnose

    (tmp_path / "n0").mkdir()
    shutil.copy(CORPUS / "dev" / "npu-oom--ptoas-341.log", tmp_path / "n0" / "engine.log")
    d = diagnose(tmp_path)
    assert d.top.cause.id == "npu-oom" and not d.top.by_code
    assert any(f.cause.id == "npu-device-abnormal" and f.by_code for f in d.findings)
