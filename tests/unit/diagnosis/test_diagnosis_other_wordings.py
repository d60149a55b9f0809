"""The broader signatures of port-in-use, shm-too-small and package-version-mismatch (one meaning in any component's
words, see tests/fixtures/upstream_lines/sig7-other-components.yaml) left alone by the lines that say something
else: healthy start-ups, a free port looked for, a size check that passed, NCCL's channel set-up.
"""
from __future__ import annotations

import pytest

from k3lab.diagnosis import catalogue
from tests.unit.diagnosis.onelog import assert_clean
from tests.unit.diagnosis.onelog import diagnose_text as _diagnose

CAT = catalogue.load()

# each built from the statement named beside it (not real log lines)
HEALTHY = [
    # vllm/utils get_open_port with VLLM_PORT set: logger.info("Port %d is already in use, trying port %d", ...)
    "INFO 05-06 10:00:00 [utils.py:512] Port 29500 is already in use, trying port 29501",
    # MindIE-LLM shared_memory.cpp: ULOG_INFO of the sizes, then "Shared memory size check success." (the heldout6
    # excerpt's start-up shows both before the failure it reports)
    "[2026-05-06 10:00:00.000+08:00] [1] [2] [server] [INFO] [share_memory.cpp:181] : [model_backend] Total shared "
    "memory size:65536MB, and available shared memory size:65535.6MB.",
    "[2026-05-06 10:00:00.000+08:00] [1] [2] [server] [INFO] [share_memory.cpp:182] : [model_backend] Shared memory "
    "size check success.",
    # NCCL init at NCCL_DEBUG=INFO: channel and ring set-up lines carry "->" between ranks, not a return code
    "node0:3663:4044 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/CUMEM",
    "node0:3663:4044 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC",
    "node0:3663:4044 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1",
]


@pytest.mark.parametrize("line", HEALTHY, ids=range(len(HEALTHY)))
def test_a_healthy_line_names_no_cause_and_no_error(tmp_path, line):
    assert_clean(_diagnose(tmp_path, line + "\n"))


def test_a_nccl_warn_about_shared_memory_is_a_note_when_nothing_failed(tmp_path):
    # the WARN alone (no return code traced after it, no error): NCCL may retry or fall back, so no cause is named
    d = _diagnose(tmp_path, "node0:3663:4044 [0] misc/shmutils.cc:129 NCCL WARN Error while creating shared memory "
                            "segment /dev/shm/nccl-Abc123 (size 33030528), error: No space left on device (28)\n")
    assert d.findings == [] and any("shm-too-small" in n for n in d.notes), d.notes


@pytest.mark.parametrize("line", [
    # a port or shared memory named in passing: no statement that it is taken or short
    b"INFO 05-06 10:00:00 [api_server.py:1] vLLM API server version 0.11.0, port 8000",
    b"[INFO] shared memory is enough for 8 workers",
    # numba's words about its own options, not another package's release
    b"NumbaWarning: The keyword argument 'nopython=False' was supplied",
])
def test_words_near_the_new_wordings_match_no_signature_of_their_cause(line):
    for cid in ("port-in-use", "shm-too-small", "package-version-mismatch"):
        assert not any(s.regex.search(line) for s in CAT.get(cid).signatures), (cid, line)
