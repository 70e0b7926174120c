"""A full disk while saving the BM25 index: the usual DiskFullError, and no half index left behind."""

from __future__ import annotations

import errno

import bm25s
import pytest

from purecover.data.retrieval.bm25 import _META, BM25Retriever
from purecover.utils.io import DiskFullError
from tests.data.retrieval.test_bm25 import corpus


def _fail_after_writing_part(code):
    real = bm25s.BM25.save

    def save(self, save_dir, *args, **kwargs):
        real(self, save_dir, *args, **kwargs)  # leave real files behind, as a disk filling up would
        raise OSError(code, "No space left on device" if code == errno.ENOSPC else "Disk quota exceeded")

    return save


@pytest.mark.parametrize(("code", "what"), [(errno.ENOSPC, "no space left on device"),
                                            (errno.EDQUOT, "disk quota exceeded")])
def test_disk_full_while_saving_is_explained_and_nothing_half_saved_remains(tmp_path, monkeypatch, code, what):
    monkeypatch.setattr(bm25s.BM25, "save", _fail_after_writing_part(code))
    with pytest.raises(DiskFullError) as info:
        BM25Retriever(corpus(), index_dir=tmp_path)
    err = info.value
    assert err.errno == code
    msg = str(err)
    assert msg.startswith(f"{what} while writing {tmp_path}/bm25-")
    assert "free some space and rerun the stage" in msg
    assert "rebuilt on the next run" in msg and "candidates written so far are kept" in msg
    assert list(tmp_path.iterdir()) == []  # neither the index directory nor its temporary sibling

    monkeypatch.undo()
    again = BM25Retriever(corpus(), index_dir=tmp_path)
    assert not again.from_cache and (again.path / _META).is_file()
    assert BM25Retriever(corpus(), index_dir=tmp_path).from_cache


def test_other_os_errors_pass_through(tmp_path, monkeypatch):
    def save(self, save_dir, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(bm25s.BM25, "save", save)
    with pytest.raises(PermissionError) as info:
        BM25Retriever(corpus(), index_dir=tmp_path)
    assert not isinstance(info.value, DiskFullError)
    assert list(tmp_path.iterdir()) == []
