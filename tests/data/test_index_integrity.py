"""The shared index directory proves what it holds (issue 32, items 3.3 and 3.4): each damage a hostile or careless
user can do to a corpus store or a BM25 index is named in a warning, the damaged index is built again, and
`purecover data` writes the candidates of the undamaged index, its manifest complete."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from purecover.cli import main
from tests.conftest import demo_corpus_file


def _data(run_dir: Path, corpus: Path, index_dir: Path, *extra: str) -> int:
    return main(["data", "-q", "--set", f"run_dir={run_dir}", "--set", "data.path=demo", "--set", f"data.corpus={corpus}",
                 "--set", f"data.index_dir={index_dir}", "--set", "data.k1=8", *[a for x in extra for a in ("--set", x)]])


def _one(index_dir: Path, pattern: str) -> Path:
    (found,) = index_dir.glob(pattern)
    return found


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name(a.name + ".swap")
    os.rename(a, tmp)
    os.rename(b, a)
    os.rename(tmp, b)


def _rewrite_array(path: Path, change) -> None:
    values = np.load(path, allow_pickle=False)
    np.save(path, change(values))


def _edit_bytes(path: Path, old: bytes, new: bytes) -> None:
    """Replace `old` by `new` (same length) in place, the mtime put back as ``touch -r`` would."""
    before = path.stat()
    time.sleep(0.01)
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with path.open("r+b") as fh:
        fh.seek(data.index(old))
        fh.write(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _store_json_count(index_dir: Path) -> Path:
    path = _one(index_dir, "corpus-*/store.json")
    meta = json.loads(path.read_text())
    meta["passages"] -= 1
    path.write_text(json.dumps(meta, indent=2))
    return path


def _truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


# name -> damage(index_dir) returning the file the warning must name
DAMAGES = {
    "swapped text_hash.npy and title_hash.npy": lambda d: _swap(
        _one(d, "corpus-*/text_hash.npy"), _one(d, "corpus-*/title_hash.npy")) or _one(d, "corpus-*/title_hash.npy"),
    "bytes edited in passages.arrow": lambda d: _edit_bytes(
        _one(d, "corpus-*/passages.arrow"), b"Synthetic 12", b"Synthetic 21") or _one(d, "corpus-*/passages.arrow"),
    "truncated passages.arrow": lambda d: _truncate(_one(d, "corpus-*/passages.arrow")),
    "store.json with a wrong passage count": _store_json_count,
    "BM25 data.npy shuffled": lambda d: _rewrite_array(
        _one(d, "bm25-*/data.npy"), lambda v: np.random.default_rng(0).permutation(v)) or _one(d, "bm25-*/data.npy"),
    "BM25 indices.npy reversed": lambda d: _rewrite_array(
        _one(d, "bm25-*/indices.npy"), lambda v: v[::-1].copy()) or _one(d, "bm25-*/indices.npy"),
    "truncated BM25 data.npy": lambda d: _truncate(_one(d, "bm25-*/data.npy")),
    "BM25 metadata with a wrong passage count": lambda d: _edit_bytes(
        _one(d, "bm25-*/purecover_index.json"), b'"n_docs": 4', b'"n_docs": 5') or _one(d, "bm25-*/purecover_index.json"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A corpus, and the candidates of an undamaged index over it."""
    root = tmp_path_factory.mktemp("integrity")
    corpus = demo_corpus_file(root / "corpus.jsonl", 400)
    assert _data(root / "reference", corpus, root / "reference-index") == 0
    return corpus, (root / "reference" / "candidates.jsonl").read_bytes()


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_index_file_is_named_and_built_again(built, tmp_path, caplog, damage):
    corpus, reference = built
    index_dir = tmp_path / "index"
    assert _data(tmp_path / "first", corpus, index_dir) == 0
    named = DAMAGES[damage](index_dir)
    with caplog.at_level(logging.WARNING, logger="purecover.data"):
        assert _data(tmp_path / "second", corpus, index_dir) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(named) in w and "built again" in w for w in warnings), warnings
    assert (tmp_path / "second" / "candidates.jsonl").read_bytes() == reference
    assert json.loads((tmp_path / "second" / "data.run.json").read_text())["summary"]["status"] == "complete"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="purecover.data"):  # rebuilt: the next run trusts it again
        assert _data(tmp_path / "third", corpus, index_dir) == 0
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_index_verify_always_reads_what_a_stamp_vouches_for(built, tmp_path, caplog):
    """An edit followed by a fresh stamp (as a tool copying files with their stamp would leave) passes the default
    check, and ``data.index_verify: always`` still finds it."""
    from purecover.utils.built_files import write_stamp

    corpus, reference = built
    index_dir = tmp_path / "index"
    assert _data(tmp_path / "first", corpus, index_dir) == 0
    data = _one(index_dir, "bm25-*/data.npy")
    _rewrite_array(data, lambda v: np.random.default_rng(1).permutation(v))
    write_stamp(data.parent, [p.name for p in sorted(data.parent.glob("*.npy"))], "purecover_index.json")
    with caplog.at_level(logging.WARNING, logger="purecover.data"):
        assert _data(tmp_path / "trusted", corpus, index_dir) == 0
        assert not caplog.records
        assert _data(tmp_path / "checked", corpus, index_dir, "data.index_verify=always") == 0
    assert any(str(data) in r.getMessage() for r in caplog.records)
    assert (tmp_path / "checked" / "candidates.jsonl").read_bytes() == reference
    assert (tmp_path / "trusted" / "candidates.jsonl").read_bytes() != reference
