"""Files the training package writes (checkpoints, exported tables, corpora) are replaced
atomically, and two processes writing one path at once do not collide: a retried job can run
beside the job it replaces (a worker of a killed driver still finishing)."""
import os

import pytest

from training.store import write_atomically


def test_a_writer_interrupted_by_another_still_lands_its_file(tmp_path):
    path = tmp_path / "trunk.pt"

    def first(tmp):
        tmp.write_text("first")
        write_atomically(path, lambda t: t.write_text("second"))  # lands while first is mid-way
        assert path.read_text() == "second"

    write_atomically(path, first)
    assert path.read_text() == "first"  # the last rename wins
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trunk.pt"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old")

    def fails(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fails)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["table.csv"]
