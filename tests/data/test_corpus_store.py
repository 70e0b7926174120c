"""The memory-mapped corpus store: same passages and lookups as the in-memory corpus, built once, kill-safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from purecover.data.corpus import Doc, load_corpus_jsonl
from purecover.data.corpus_store import BATCH_ROWS, CorpusStore, open_corpus_store
from purecover.data.errors import DataFormatError
from tests.conftest import write_jsonl
from tests.process_helpers import run_and_kill_when


def _rows(n: int, seed: int = 0) -> list[dict]:
    """Wiki-like rows in both layouts: repeated titles (several passages per article), case and quote
    variants of a title, non-ASCII text, numeric ids."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for i in range(n):
        title = f"Article {i // 3}" if i % 11 else f'"Ärticle {i // 3}"'
        text = " ".join(f"w{int(x)}" for x in rng.zipf(1.5, size=12)) + f" passage {i} — ü"
        if i % 5 == 0:
            rows.append({"id": i, "contents": f"{title}\n{text}"})
        else:
            rows.append({"id": str(i), "title": title.upper() if i % 7 == 0 else title, "text": text})
    rows.append({"id": "untitled", "text": "  A passage without a title.  "})
    return rows


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "wiki.jsonl", _rows(2 * BATCH_ROWS + 123))


def test_store_holds_the_same_passages_and_lookups_as_the_in_memory_corpus(corpus_file, tmp_path):
    store = open_corpus_store(corpus_file, tmp_path)
    memory = load_corpus_jsonl(corpus_file)
    assert isinstance(store, CorpusStore) and len(store) == len(memory) == 2 * BATCH_ROWS + 124
    assert store.fingerprint == memory.fingerprint
    for i in (0, 1, BATCH_ROWS - 1, BATCH_ROWS, 2 * BATCH_ROWS + 50, len(memory) - 1, -1):
        assert store[i] == memory[i]
    assert store.docs_at([5, BATCH_ROWS + 3, 2]) == memory.docs_at([5, BATCH_ROWS + 3, 2])
    assert list(store.iter_docs()) == memory.docs
    # contents across record-batch boundaries, in lists of the asked size
    got = list(store.iter_contents(BATCH_ROWS - 7, 2 * BATCH_ROWS + 9, batch_size=1000))
    assert [len(b) for b in got] == [1000] * 4 + [112]
    assert [c for b in got for c in b] == [c for b in memory.iter_contents(BATCH_ROWS - 7, 2 * BATCH_ROWS + 9)
                                           for c in b]
    for title in ("Article 3", "article 3", '"ÄRTICLE 22"', "Ärticle 22", "Article 99999", "", "  "):
        assert store.ids_with_title(title) == memory.ids_with_title(title), title
    assert store.ids_with_title("article 3") == ["9", "10"] and store.ids_with_title("ärticle 3") == ["11"]
    assert store.id_of_text(" A passage without a title. ") == memory.id_of_text("A passage without a title.") \
        == "untitled"
    assert store.id_of_text("no such text") is None
    assert store.position("4000") == memory.position("4000") == 4000
    assert store.position("4000 ") is None
    with pytest.raises(IndexError, match="outside the corpus"):
        store[len(store)]


def test_store_is_built_once_and_reopened_by_a_stat(corpus_file, tmp_path):
    first = open_corpus_store(corpus_file, tmp_path)
    arrow = first.directory / "passages.arrow"
    inode, built_at = arrow.stat().st_ino, first.meta.built_at
    t0 = time.perf_counter()
    again = open_corpus_store(corpus_file, tmp_path)
    assert time.perf_counter() - t0 < 0.5
    assert (again.directory / "passages.arrow").stat().st_ino == inode and again.meta.built_at == built_at
    assert again.meta.source.size == corpus_file.stat().st_size
    assert (again.meta.build_peak_rss_mb or 0) > 0 and again.meta.versions["pyarrow"]


def test_a_changed_corpus_file_gets_a_new_store(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "title": "A", "text": "one"}])
    old = open_corpus_store(path, tmp_path / "index")
    write_jsonl(path, [{"id": "1", "title": "A", "text": "one"}, {"id": "2", "title": "B", "text": "two"}])
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new mtime even on coarse clocks
    new = open_corpus_store(path, tmp_path / "index")
    assert len(new) == 2 and new.fingerprint != old.fingerprint and new.directory == old.directory
    assert [p.name for p in (tmp_path / "index").iterdir() if not p.name.endswith(".lock")] == [new.directory.name]


def test_an_edit_in_place_with_the_mtime_put_back_gets_a_new_store(tmp_path):
    """Same size, same inode, mtime restored (`touch -r`): the inode's change time still moves, and the store is
    built again from the new text (issue 32, item 3.1)."""
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "title": "A", "text": "old text"}])
    before = path.stat()
    old = open_corpus_store(path, tmp_path / "index")
    assert old[0].text == "old text"
    time.sleep(0.01)
    with path.open("r+b") as fh:  # in place: same inode, same size
        data = fh.read()
        fh.seek(0)
        fh.write(data.replace(b"old text", b"new text"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    new = open_corpus_store(path, tmp_path / "index")
    assert new[0].text == "new text" and new.fingerprint != old.fingerprint
    assert new.meta.source.ctime_ns == after.st_ctime_ns


@pytest.mark.parametrize("damage", ["truncated", "emptied"])
def test_a_damaged_passages_file_is_named_and_the_store_built_again(tmp_path, caplog, damage):
    """Issue 32, item 3.4: a truncated passages.arrow used to fail later with pyarrow's "Not an Arrow file"."""
    import logging

    rows = _rows(BATCH_ROWS + 50)
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    first = open_corpus_store(path, tmp_path / "index")
    arrow = first.directory / "passages.arrow"
    data = arrow.read_bytes()
    arrow.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    with caplog.at_level(logging.WARNING, logger="purecover.data.corpus_store"):
        again = open_corpus_store(path, tmp_path / "index")
    assert str(arrow) in caplog.text and "built again" in caplog.text
    assert len(again) == len(first) and again[len(again) - 1] == first[len(first) - 1]
    assert arrow.read_bytes() == data


def test_bad_records_name_file_line_and_field_or_are_skipped_and_remembered(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "a"}, {"id": "2"}, {"id": "3", "text": "c"},
                                              {"id": "1", "text": "again"}])
    with pytest.raises(DataFormatError, match=r"c.jsonl:line 2: field 'text'"):
        open_corpus_store(path, tmp_path / "index")
    invalid: list = []
    store = open_corpus_store(path, tmp_path / "index", skip_invalid=True, invalid=invalid)
    memory_invalid: list = []
    memory = load_corpus_jsonl(path, skip_invalid=True, invalid=memory_invalid)
    assert [d.doc_id for d in store.iter_docs()] == [d.doc_id for d in memory.docs] == ["1", "3"]
    assert store.fingerprint == memory.fingerprint
    assert [(r.location, r.field) for r in invalid] == [(r.location, r.field) for r in memory_invalid] \
        == [("line 2", "text"), ("line 4", "id")]
    assert "duplicate passage id '1' (first at line 1)" in invalid[1].problem
    again: list = []
    open_corpus_store(path, tmp_path / "index", skip_invalid=True, invalid=again)
    assert again == invalid  # the data report lists them on every run, not only the first
    with pytest.raises(DataFormatError, match=r"line 2: field 'text': missing.*2 invalid records.*skip_invalid"):
        open_corpus_store(path, tmp_path / "index")


def test_repeated_id_without_skip_names_both_lines(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "7", "text": "a"}, {"id": "8", "text": "b"},
                                              {"id": "7", "text": "c"}])
    with pytest.raises(DataFormatError, match=r"line 3: field 'id': duplicate passage id '7' \(first at line 1\)"):
        open_corpus_store(path, tmp_path / "index")
    assert not list((tmp_path / "index").glob("corpus-*")), "no store is left after a failed build"


def test_a_link_at_the_store_path_is_replaced_not_written_through(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "text": "a"}])
    index = tmp_path / "index"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "thesis.txt").write_text("mine")
    store = open_corpus_store(path, index)
    store_dir = store.directory
    import shutil

    shutil.rmtree(store_dir)
    store_dir.symlink_to(elsewhere, target_is_directory=True)
    again = open_corpus_store(path, index)
    assert not again.directory.is_symlink() and len(again) == 1
    assert [p.name for p in elsewhere.iterdir()] == ["thesis.txt"]


_BUILD = """
import sys
from purecover.data.corpus_store import open_corpus_store
s = open_corpus_store(sys.argv[1], sys.argv[2])
print(s.fingerprint, len(s))
"""


def test_killed_store_build_leaves_nothing_and_the_rerun_equals_an_uninterrupted_build(tmp_path):
    path = write_jsonl(tmp_path / "big.jsonl", _rows(60_000, seed=1))
    index = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def partial_arrow_written() -> bool:
        return any(p.stat().st_size > 200_000 for p in index.glob(".corpus-*/passages.arrow"))

    run_and_kill_when([sys.executable, "-c", _BUILD, str(path), str(index)], partial_arrow_written,
                      what="corpus store build", env=env)
    assert not list(index.glob("corpus-*")), "a killed build must leave no store at its path"
    assert list(index.glob(".corpus-*")), "the killed build's partial directory is there to be cleaned"
    out = subprocess.run([sys.executable, "-c", _BUILD, str(path), str(index)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert not [p for p in index.glob(".corpus-*") if p.is_dir()], "the rerun removes the partial build"
    reference = open_corpus_store(path, tmp_path / "reference")
    assert out == [reference.fingerprint, str(len(reference))]
    (rerun,) = index.glob("corpus-*")
    for name in ("passages.arrow", "id_hash.npy", "id_pos.npy", "title_hash.npy", "title_pos.npy",
                 "text_hash.npy", "text_pos.npy"):
        assert (rerun / name).read_bytes() == (reference.directory / name).read_bytes(), name
    meta = json.loads((rerun / "store.json").read_text())
    assert meta["fingerprint"] == reference.fingerprint and meta["passages"] == 60_001


def test_two_processes_share_one_build(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", _rows(20_000, seed=2))
    index = tmp_path / "index"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD, str(path), str(index)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    assert outs[0][0] == outs[1][0]
    assert len(list(index.glob("corpus-*"))) == 1 and not [p for p in index.glob(".corpus-*") if p.is_dir()]


def test_doc_contents_rule_is_the_passage_rule(corpus_file, tmp_path):
    store = open_corpus_store(corpus_file, tmp_path)
    first = next(store.iter_contents(0, 1))
    assert first == [Doc(store[0].doc_id, store[0].title, store[0].text).contents]


def test_store_json_reads_back_as_a_record_with_the_same_keys_and_bytes(corpus_file, tmp_path):
    store = open_corpus_store(corpus_file, tmp_path)
    text = (store.directory / "store.json").read_text(encoding="utf-8")
    assert list(json.loads(text)) == ["format", "source", "passages", "fingerprint", "batch_rows", "invalid_records",
                                      "built_at", "build_seconds", "build_peak_rss_mb", "versions", "files"]
    assert json.dumps(store.meta.to_json_dict(), ensure_ascii=False, indent=2) + "\n" == text


def test_a_store_json_that_does_not_validate_gets_the_store_built_again(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "1", "title": "A", "text": "one"}])
    store = open_corpus_store(path, tmp_path / "index")
    meta = json.loads((store.directory / "store.json").read_text(encoding="utf-8"))
    meta["passages"] = "1"  # a string: not a store of ours
    (store.directory / "store.json").write_text(json.dumps(meta), encoding="utf-8")
    again = open_corpus_store(path, tmp_path / "index")
    assert again.meta.passages == 1 and again.meta.built_at
