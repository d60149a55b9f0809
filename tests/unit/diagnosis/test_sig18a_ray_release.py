"""Ray is one of the packages whose releases must match (#32, pass 18a): a process that joins a Ray cluster started by
another Ray release fails in ray/_private/utils.py check_version_info, whose multi-line message the meaning layer
reads as the exception's body."""
from __future__ import annotations

import pytest

from tests.unit.diagnosis.onelog import assert_clean, diagnose_text
from tests.unit.diagnosis.test_meaning_reach import CORPUS, _likely

# real, Unakar/Logic-RL#30 (found with search): a GRPO trainer's Ray against an older cluster's
LOGIC_RL = ("RuntimeError: Version mismatch: The cluster was started with:\n    Ray: 2.12.0\n    Python: 3.11.11\n"
            "This process on node 10.123.3.87 was started with:\n    Ray: 2.42.0\n    Python: 3.9.21\n")
# real, ray-project/ray#6707 (found with search): older Ray raised a bare Exception with the same message
RAY_OLD = ("Exception: Version mismatch: The cluster was started with:\n    Ray: 0.8.0\n    Python: 3.6.5\n"
           "    Pyarrow: 0.14.0.RAY\nThis process on node 168.168.2.131 was started with:\n    Ray: 0.8.0\n"
           "    Python: 3.6.7\n    Pyarrow: 0.14.0.RAY\n")


def test_the_heldout_excerpt_is_named_by_meaning(tmp_path):
    # real, heldout15/package-version-mismatch--gpustack-1640.log (gpustack/gpustack#1640)
    text = (CORPUS / "heldout15/package-version-mismatch--gpustack-1640.log").read_text()
    assert _likely(tmp_path, "package-version-mismatch", text) == ["package-version-mismatch"]


@pytest.mark.parametrize("text", [LOGIC_RL, RAY_OLD], ids=["logic-rl", "ray-0.8"])
def test_other_projects_ray_mismatch_is_named(tmp_path, text):
    assert _likely(tmp_path, "package-version-mismatch", text) == ["package-version-mismatch"]


@pytest.mark.parametrize("text", [
    # near lines, made up (not real): start-up lines at INFO that name Ray and a version
    "INFO worker.py:1841 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265\n",
    "INFO 06-08 14:45:44 ray_utils.py:120] Ray version 2.44.1 is required for compiled graphs, found 2.44.1\n",
    "INFO: Connecting to existing Ray cluster at address: 10.0.0.1:6379 (ray 2.43.0, python 3.11.10)\n",
])
def test_healthy_ray_version_lines_stay_clean(tmp_path, text):
    assert_clean(diagnose_text(tmp_path, text))
