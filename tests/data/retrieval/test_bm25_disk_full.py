"""A full disk while building the BM25 index: the usual DiskFullError, and no half index left behind."""

from __future__ import annotations

import errno

import pytest

from purecover.data.retrieval import bm25_index
from purecover.data.retrieval.bm25 import _META, BM25Retriever
from purecover.utils.io import DiskFullError
from tests.data.retrieval.test_bm25 import corpus

# where the disk fills up: a run file of pass 1, or the index arrays of pass 2
_POINTS = {"runs": (bm25_index._Runs, "add"), "index": (bm25_index._NpyWriter, "append")}


def _fail_after_writing_part(real, code):
    def write(self, *args, **kwargs):
        real(self, *args, **kwargs)  # leave real files behind, as a disk filling up would
        raise OSError(code, "No space left on device" if code == errno.ENOSPC else "Disk quota exceeded")

    return write


def _ours(path):
    """What is left in the index directory besides the per-key lock files (which stay, empty)."""
    return [p for p in path.iterdir() if not p.name.endswith(".lock")]


@pytest.mark.parametrize("point", sorted(_POINTS))
@pytest.mark.parametrize(("code", "what"), [(errno.ENOSPC, "no space left on device"),
                                            (errno.EDQUOT, "disk quota exceeded")])
def test_disk_full_while_saving_is_explained_and_nothing_half_saved_remains(tmp_path, monkeypatch, code, what,
                                                                            point):
    cls, method = _POINTS[point]
    monkeypatch.setattr(cls, method, _fail_after_writing_part(getattr(cls, method), code))
    with pytest.raises(DiskFullError) as info:
        BM25Retriever(corpus(), index_dir=tmp_path)
    err = info.value
    assert err.errno == code
    msg = str(err)
    assert msg.startswith(f"{what} while writing {tmp_path}/bm25-")
    assert "free some space and rerun the stage" in msg
    assert "rebuilt on the next run" in msg and "candidates written so far are kept" in msg
    assert _ours(tmp_path) == []  # neither the index directory nor its temporary sibling

    monkeypatch.undo()
    again = BM25Retriever(corpus(), index_dir=tmp_path)
    assert not again.from_cache and (again.path / _META).is_file()
    assert BM25Retriever(corpus(), index_dir=tmp_path).from_cache


def test_other_os_errors_pass_through(tmp_path, monkeypatch):
    def append(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(bm25_index._NpyWriter, "append", append)
    with pytest.raises(PermissionError) as info:
        BM25Retriever(corpus(), index_dir=tmp_path)
    assert not isinstance(info.value, DiskFullError)
    assert _ours(tmp_path) == []
