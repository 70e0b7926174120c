from __future__ import annotations

import json
import os

import pytest

from purecover.utils.io import ResumableJsonl, atomic_write_json, atomic_write_text, read_jsonl


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resumable_skips_done_and_appends(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResumableJsonl(path) as out:
        out.write({"qid": "a", "x": 1})
        out.write({"qid": "b", "x": 2})
    with ResumableJsonl(path) as out:
        assert out.done == {"a", "b"} and out.repaired == 0
        out.write({"qid": "c", "x": 3})
    assert [r["qid"] for r in _lines(path)] == ["a", "b", "c"]


def test_truncated_last_line_is_cut_and_redone(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a"}\n{"qid": "b"}\n{"qid": "c", "doc')
    with ResumableJsonl(path) as out:
        assert out.done == {"a", "b"} and out.repaired == 1
        out.write({"qid": "c", "doc": 1})
    assert [r["qid"] for r in _lines(path)] == ["a", "b", "c"]


def test_records_outside_keep_are_dropped_atomically(tmp_path):
    """`keep`: records of other keys are dropped (counted), the rest keep their order and bytes, the file is
    replaced (not written through a link) and a torn last line is still cut."""
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a", "x": 1}\n{"qid": "b"}\n{"qid": "c", "x": [1, 2]}\n{"qid": "b2"}\n{"qid": "d", ')
    inode = path.stat().st_ino
    with ResumableJsonl(path, keep={"a", "c", "d"}) as out:
        assert out.done == {"a", "c"} and out.dropped == 2 and out.repaired == 1
        out.write({"qid": "d"})
    assert path.read_text() == '{"qid": "a", "x": 1}\n{"qid": "c", "x": [1, 2]}\n{"qid": "d"}\n'
    assert path.stat().st_ino != inode and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    inode = path.stat().st_ino
    with ResumableJsonl(path, keep={"a", "c", "d"}) as out:  # nothing to drop: the file is left in place
        assert out.dropped == 0 and out.done == {"a", "c", "d"}
    assert path.stat().st_ino == inode


def test_corrupt_complete_last_line_is_cut(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a"}\n{"qid": \n')
    with ResumableJsonl(path) as out:
        assert out.done == {"a"} and out.repaired == 1
    assert path.read_text() == '{"qid": "a"}\n'


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a"}\nGARBAGE\n{"qid": "c"}\n')
    with pytest.raises(ValueError, match=r"out.jsonl:2: corrupt record"):
        ResumableJsonl(path)


def test_duplicates_are_refused(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a"}\n{"qid": "a"}\n')
    with pytest.raises(ValueError, match="duplicate qid 'a'"):
        ResumableJsonl(path)
    with ResumableJsonl(tmp_path / "new.jsonl") as out:
        out.write({"qid": "x"})
        with pytest.raises(ValueError, match="written twice"):
            out.write({"qid": "x"})


def test_atomic_write_leaves_no_temp_files_and_replaces(tmp_path):
    path = tmp_path / "sub" / "f.json"
    atomic_write_json(path, {"a": 1})
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert os.listdir(path.parent) == ["f.json"]


def test_unwritable_output_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="cannot create output directory .*a_file/run"):
        atomic_write_text(blocker / "run" / "f.txt", "x")
    with pytest.raises(OSError, match="cannot create output directory"):
        ResumableJsonl(blocker / "run" / "candidates.jsonl")


def test_read_only_directory_is_a_clear_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("root can write into read-only directories; covered by the test above")
        with pytest.raises(PermissionError, match="not writable"):
            atomic_write_text(locked / "f.txt", "x")
    finally:
        locked.chmod(0o700)


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n[1]\n')
    with pytest.raises(ValueError, match=r"r.jsonl:3: expected a JSON object"):
        list(read_jsonl(path))


@pytest.fixture
def umask():
    """Set the process umask for a test (restored after)."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_writes_honour_the_umask(tmp_path, umask, mask):
    """mkstemp creates 0600: an atomic write must end as a plain create would (0666 & ~umask), so outputs can
    be shared with other users or a non-root container."""
    from purecover.utils.io import current_umask

    umask(mask)
    assert current_umask() == mask
    atomic_write_text(tmp_path / "a.txt", "x")
    atomic_write_json(tmp_path / "b.json", {"a": 1})
    for name in ("a.txt", "b.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask


def test_apply_umask_fixes_a_tree_and_never_follows_links(tmp_path, umask):
    from purecover.utils.io import apply_umask

    umask(0o022)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    outside.chmod(0o600)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "w.safetensors").write_bytes(b"0")
    (tree / "sub" / "w.safetensors").chmod(0o600)
    (tree / "sub").chmod(0o700)
    tree.chmod(0o700)
    os.symlink(outside, tree / "link")
    apply_umask(tree)
    assert tree.stat().st_mode & 0o777 == 0o755 and (tree / "sub").stat().st_mode & 0o777 == 0o755
    assert (tree / "sub" / "w.safetensors").stat().st_mode & 0o777 == 0o644
    assert outside.stat().st_mode & 0o777 == 0o600  # reached only through a link: untouched


def test_non_finite_numbers_are_never_written_as_json(tmp_path):
    """Issue 55 (1): NaN and infinities are refused by every JSON writer, naming the file and the field; the old
    file stays and a resumable file keeps only its complete records."""
    from purecover.utils.io import atomic_write_json, strict_json, write_jsonl_atomic

    target = tmp_path / "m.json"
    atomic_write_json(target, {"ok": 1})
    with pytest.raises(ValueError, match=rf"{target}: .*non-finite .* at results\.f1\[1\]"):
        atomic_write_json(target, {"results": {"f1": [0.5, float("nan")]}})
    assert json.loads(target.read_text()) == {"ok": 1}
    with pytest.raises(ValueError, match=r"l\.jsonl:2: .* at logits\[0\]"):
        write_jsonl_atomic(tmp_path / "l.jsonl", [{"logits": [1.0]}, {"logits": [float("-inf")]}])
    assert not (tmp_path / "l.jsonl").exists()
    out = ResumableJsonl(tmp_path / "r.jsonl")
    out.write({"qid": "a", "logits": [1.0]})
    with pytest.raises(ValueError, match=r"r\.jsonl \(record qid 'b'\): .* at logits\[1\]"):
        out.write({"qid": "b", "logits": [1.0, float("inf")]})
    out.close()
    assert (tmp_path / "r.jsonl").read_text() == '{"qid": "a", "logits": [1.0]}\n'
    assert strict_json({"x": [1, 2.5]}, "w") == '{"x": [1, 2.5]}'
