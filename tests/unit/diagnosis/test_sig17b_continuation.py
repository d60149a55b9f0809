"""An error message that goes on past its line is read whole by the meaning layer (#32 pass 17b): a line that stops on
a comma, on a word no sentence ends with, or on a bare "ValueError: " carries on in the lines below it that have no
time, level or error of their own (Python's multi-line messages, a terminal's wrap of a pasted line). A line that only
lacks a full stop is whole, and a line of its own (indented code, an identifier, a timed or levelled line) is never
joined to it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.diagnosis.test_meaning_reach import diagnose_without

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def _likely(tmp_path: Path, cause: str, text: str) -> list[str]:
    """The causes the meaning layer names with ``cause``'s own signatures and codes taken out."""
    d = diagnose_without(tmp_path, cause, text)
    assert not d.findings, [f.cause.id for f in d.findings]
    return [f.cause.id for f in d.likely]


REAL = [  # real excerpts whose stating words are on the line below the error line
    # kaito#2132: "ValueError: To serve ... max seq len (1048576)," then "22.5 GiB KV cache is needed, ..."
    ("kv-cache-insufficient", "dev/kv-cache-insufficient--kaito-2132.log"),
    # vllm-ascend#16646 (CANN's device error report): "... serial number is …," then "hccl fftsplus task timeout ..."
    ("hccl-exec-timeout", "dev/hccl-exec-timeout--vllm-ascend-16646.log"),
    # jupyter notebook#7522 and vllm#34041: NumPy 2's "ImportError: " alone, its message on the lines below
    ("package-version-mismatch", "heldout11/package-version-mismatch--jupyter-notebook-7522.log"),
    ("package-version-mismatch", "heldout7/package-version-mismatch--vllm-34041.log"),
]


@pytest.mark.parametrize("cause, name", REAL, ids=[n.split("/")[1][:50] for _, n in REAL])
def test_a_message_continued_below_its_line_is_read_whole(tmp_path, cause, name):
    assert _likely(tmp_path, cause, (CORPUS / name).read_text())[:1] == [cause]


def test_another_projects_wrapped_kv_cache_message(tmp_path):
    # hzqjgthy/vllm KV_Cache_显存不足错误解决方案.md quotes the error as its terminal showed it (found with `search`):
    # the exception name alone on the EngineCore line, the message wrapped at its commas below
    text = ("(EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ValueError: \n"
            "To serve at least one request with the models's max seq len (40960), \n"
            "(5.62 GiB KV cache is needed, which is larger than the available KV cache memory (4.50 GiB). \n")
    assert _likely(tmp_path, "kv-cache-insufficient", text)[:1] == ["kv-cache-insufficient"]


NEAR = [  # lines that share the words but are whole, or a next line that is a line of its own
    # heldout13/unknown--mooncake-3974.log (Mooncake PR #3974's quoted errors): whole lines, an identifier below
    ("mooncake-connect-failure", (CORPUS / "heldout13/unknown--mooncake-3974.log").read_text()),
    # a whole error line (no full stop) and a levelled INFO line below it that holds the KV-cache words
    ("kv-cache-insufficient", "ERROR 05-02 10:00:01 [core.py:1] EngineCore failed to start, see the cause above\n"
                              "INFO 05-02 10:00:01 [kv_cache_utils.py:1] GPU KV cache size: 0 tokens, not enough\n"),
    # a frame ending in a function name, its code indented below: never continued
    ("kv-cache-insufficient", "Traceback (most recent call last):\n"
                              '  File "/vllm/worker.py", line 9, in determine_num_available_blocks\n'
                              "    raise ValueError(\"No available memory for the cache blocks\")\n"),
]


@pytest.mark.parametrize("cause, text", NEAR, ids=["mooncake-3974", "info-below", "frame"])
def test_a_whole_line_is_not_joined_to_the_next(tmp_path, cause, text):
    assert cause not in _likely(tmp_path, cause, text)


def test_an_exceptions_message_below_its_indented_attributes_is_read(tmp_path):
    # ray#28778 (heldout7/host-oom--ray-28778.log, real): RayActorError's message, its attributes indented, then
    # "The actor is dead because ... Worker exit detail: Task was killed due to the node running low on memory."
    text = (CORPUS / "heldout7/host-oom--ray-28778.log").read_text()
    assert _likely(tmp_path, "host-oom", text)[:1] == ["host-oom"]


def test_an_exceptions_message_ends_at_a_blank_line(tmp_path):
    # the same exception, then a blank line: what follows is no part of its message (here Ray's worker exit detail as
    # ray#28778 shows it, moved below a blank line: a BUILT log, which would name host-oom if that line were read)
    text = ("ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
            "        class_name: MemoryMonitorActor\n\n"
            "Task was killed due to the node running low on memory.\n")
    assert "host-oom" not in _likely(tmp_path, "host-oom", text)
