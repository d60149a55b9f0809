"""A Python mapping's repr inside a message is data, not the message's words (#32, pass 18a): Ray's resources that
vLLM prints ("current_node_resource={..., 'memory': 1.9e11, ...}") hold "memory" and "node:<ip>" as keys, which the
meaning layer read as a host out of memory."""
from __future__ import annotations

from pathlib import Path

from tests.unit.diagnosis.test_meaning_reach import _likely, _line

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "triage_corpus"


def test_the_resources_ray_lists_state_no_host_oom(tmp_path):
    # real, heldout15/ray-placement-unsatisfiable--vllm-29265.log (vllm-project/vllm#29265): the GPU variant of a
    # message the corpus labels no-visible-npu for the NPU (below) and this thread labels ray-placement: left a first
    # error, but never the host's memory
    line = _line("heldout15/ray-placement-unsatisfiable--vllm-29265.log", "Current node has no GPU available")
    assert "host-oom" not in _likely(tmp_path, "ray-placement-unsatisfiable", line)


def test_the_npu_variant_keeps_its_meaning(tmp_path):
    # real, heldout3/no-visible-npu--vllm-ascend-3114.log (vllm-project/vllm-ascend#3114): the words outside the repr
    # still say no NPU is available
    line = _line("heldout3/no-visible-npu--vllm-ascend-3114.log", "Current node has no NPU available")
    assert _likely(tmp_path, "no-visible-npu", line) == ["no-visible-npu"]


def test_words_outside_a_repr_still_name_host_oom(tmp_path):
    # BUILT from the wording of Ray 1.x memory_monitor.py RayOutOfMemoryError as remembered ("More than N% of the memory on node
    # <host> is used ..."), with a resources repr after it: the words before the repr keep their meaning
    line = ("ray._private.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node gpu-01 is used "
            "(60.1 / 62.8 GB). resources={'CPU': 16.0, 'memory': 4.2e10}")
    assert _likely(tmp_path, "host-oom", line) == ["host-oom"]


def test_a_braced_placeholder_is_no_repr(tmp_path):
    # a format string's placeholder or a JSON object with double quotes is left as it is
    line = 'RuntimeError: Ray worker killed: memory on node {node_id} exhausted ({"rss": 61.2})'
    assert _likely(tmp_path, "host-oom", line) == ["host-oom"]
