"""Build checksums of index files (`purecover.utils.built_files`): what a check reads and what it catches."""

from __future__ import annotations

import json
import os
import time
import zlib

from purecover.utils.built_files import (
    STAMP_NAME,
    check_built_files,
    crc32_of,
    record_built_files,
    write_stamp,
)


def _build(directory):
    directory.mkdir()
    (directory / "a.bin").write_bytes(bytes(range(256)) * 64)
    (directory / "b.bin").write_bytes(b"b" * 1000)
    recorded = record_built_files(directory, ["a.bin", "b.bin"])
    (directory / "meta.json").write_text(json.dumps({k: v.to_json_dict() for k, v in recorded.items()}))
    assert write_stamp(directory, ["a.bin", "b.bin"], "meta.json")
    return recorded


def _edit_in_place_keeping_the_mtime(path, offset=10):
    before = path.stat()
    time.sleep(0.01)
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)


def test_the_checksum_is_zlib_crc32_of_the_bytes(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"purecover" * 1_000_000)
    assert crc32_of(path) == f"{zlib.crc32(path.read_bytes()):08x}"
    recorded = record_built_files(tmp_path, ["x"])
    assert recorded["x"].bytes == 9_000_000 and recorded["x"].crc32 == crc32_of(path)


def test_unchanged_files_cost_a_stat_and_an_edit_with_the_mtime_put_back_is_read_and_named(tmp_path):
    d = tmp_path / "index"
    recorded = _build(d)
    clean = check_built_files(d, recorded, "meta.json")
    assert clean.problem is None and clean.read == () and clean.bytes_read == 0
    _edit_in_place_keeping_the_mtime(d / "a.bin")  # `touch -r`: the inode change time still moves
    found = check_built_files(d, recorded, "meta.json")
    assert found.read == ("a.bin",) and found.problem is not None
    assert str(d / "a.bin") in found.problem and "CRC-32" in found.problem


def test_swapped_truncated_and_missing_files_are_named(tmp_path):
    d = tmp_path / "index"
    recorded = _build(d)
    (d / "a.bin").write_bytes((d / "a.bin").read_bytes()[:-1])
    assert check_built_files(d, recorded, "meta.json").problem == f"{d / 'a.bin'} holds 16383 bytes, 16384 when it was built"
    d2 = tmp_path / "same-size"
    d2.mkdir()
    (d2 / "a.bin").write_bytes(b"a" * 100)
    (d2 / "b.bin").write_bytes(b"b" * 100)
    recorded2 = record_built_files(d2, ["a.bin", "b.bin"])
    (d2 / "meta.json").write_text("{}")
    write_stamp(d2, ["a.bin", "b.bin"], "meta.json")
    os.rename(d2 / "a.bin", d2 / "tmp")
    os.rename(d2 / "b.bin", d2 / "a.bin")
    os.rename(d2 / "tmp", d2 / "b.bin")
    assert "a.bin was changed after the build" in check_built_files(d2, recorded2, "meta.json").problem
    (d2 / "b.bin").unlink()
    assert check_built_files(d2, recorded2, "meta.json").problem == f"{d2 / 'b.bin'} is missing"


def test_a_metadata_file_edited_after_the_build_is_named(tmp_path):
    d = tmp_path / "index"
    recorded = _build(d)
    meta = d / "meta.json"
    meta.write_text(meta.read_text().replace("1000", "1001"))
    problem = check_built_files(d, recorded, "meta.json").problem
    assert problem is not None and str(meta) in problem and STAMP_NAME in problem


def test_without_a_stamp_every_file_is_read_once_and_the_stamp_written(tmp_path):
    d = tmp_path / "index"
    recorded = _build(d)
    (d / STAMP_NAME).unlink()
    first = check_built_files(d, recorded, "meta.json")
    assert first.problem is None and first.read == ("a.bin", "b.bin") and first.bytes_read == 16384 + 1000
    assert (d / STAMP_NAME).is_file()
    assert check_built_files(d, recorded, "meta.json").read == ()


def test_full_reads_every_file_and_catches_what_a_forged_stamp_hides(tmp_path):
    """``data.index_verify: always``: the stamp is not trusted (a file edited and then stamped as checked)."""
    d = tmp_path / "index"
    recorded = _build(d)
    _edit_in_place_keeping_the_mtime(d / "b.bin")
    write_stamp(d, ["a.bin", "b.bin"], "meta.json")  # the stamp now vouches for the edited file
    assert check_built_files(d, recorded, "meta.json").problem is None  # `changed` trusts it
    full = check_built_files(d, recorded, "meta.json", full=True)
    assert full.read == ("a.bin", "b.bin") and str(d / "b.bin") in full.problem


def test_a_stamp_that_cannot_be_written_is_not_an_error(tmp_path, caplog):
    d = tmp_path / "index"
    recorded = _build(d)
    (d / STAMP_NAME).unlink()
    (d / STAMP_NAME).mkdir()  # in the way: the write fails as on a read-only directory
    with caplog.at_level("INFO", logger="purecover.utils.built_files"):
        first = check_built_files(d, recorded, "meta.json")
        second = check_built_files(d, recorded, "meta.json")
    assert first.problem is None and second.problem is None and second.read == ("a.bin", "b.bin")
    assert "the next open reads its files again" in caplog.text
