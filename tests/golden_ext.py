"""syrupy extension: one readable text file per rendered artefact, under golden/."""
from __future__ import annotations

from pathlib import Path

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


class GoldenArtefact(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "txt"

    @classmethod
    def dirname(cls, *, test_location) -> str:
        return str(GOLDEN)

    @classmethod
    def discovery_dirname(cls, *, test_location) -> str:
        return str(GOLDEN)

    @classmethod
    def get_file_basename(cls, *, test_location, index) -> str:
        # test ids look like test_golden[a3_pd_1m/p0/run_dp_template.sh]: keep the path shape
        return test_location.testname.split("[", 1)[1].rstrip("]")
