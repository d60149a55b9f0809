"""syrupy extension: one readable text file per rendered artefact, under golden/."""
from __future__ import annotations

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from k3lab import paths

GOLDEN = paths.GOLDEN  # the files k3lab.render.golden compares with


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
