"""`building_directory`: whole builds only, earlier builds of ours replaced, anything else left alone."""

from __future__ import annotations

import pytest

from purecover.utils.index_lock import BUILDING_MARKER, building_directory


def test_a_build_appears_whole_and_replaces_an_earlier_build(tmp_path):
    final = tmp_path / "idx-1"
    with building_directory(final, "meta.json") as tmp:
        assert (tmp / BUILDING_MARKER).is_file() and not final.exists()
        (tmp / "meta.json").write_text("1")
    assert (final / "meta.json").read_text() == "1" and not (final / BUILDING_MARKER).exists()
    with building_directory(final, "meta.json") as tmp:
        (tmp / "meta.json").write_text("2")
    assert (final / "meta.json").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["idx-1"], "no temporary or set-aside directory is left"


def test_a_failed_build_leaves_nothing_and_a_killed_one_is_cleaned_by_the_next(tmp_path):
    final = tmp_path / "idx-1"
    with pytest.raises(RuntimeError), building_directory(final, "meta.json"):
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    killed = tmp_path / ".idx-1.abc123"  # what a SIGKILLed build leaves
    killed.mkdir()
    (killed / BUILDING_MARKER).write_text("pid 1\n")
    unrelated = tmp_path / ".idx-1.notes"  # no marker: not ours
    unrelated.mkdir()
    with building_directory(final, "meta.json") as tmp:
        (tmp / "meta.json").write_text("ok")
    assert not killed.exists() and unrelated.is_dir() and final.is_dir()


def test_a_directory_that_is_not_ours_is_refused_and_untouched(tmp_path):
    final = tmp_path / "idx-1"
    final.mkdir()
    (final / "thesis.txt").write_text("mine")
    with pytest.raises(OSError, match="holds no meta.json: it is not a build of purecover's"), \
            building_directory(final, "meta.json"):
        pass
    assert (final / "thesis.txt").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["idx-1"]
