"""Hostile GGUF files are refused in one line naming the file and the field, in bounded time and memory, before the
``gguf`` reader or transformers sees them; real files pass."""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.models import gguf_convert
from purecover.models.gguf_convert import UnsupportedGgufError, convert_gguf, read_gguf_info
from purecover.models.gguf_header import MAX_ARRAY_ITEMS, GgufHeaderError, check_gguf_header

from .gguf_files import write_tiny_gguf

REPO = Path(__file__).resolve().parents[2]
UINT8, UINT32, FLOAT32, STRING, ARRAY, UINT64 = 0, 4, 6, 8, 9, 10


def gstr(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def gguf_file(path: Path, pairs: list[bytes], n_tensors: int = 0, tail: bytes = b"") -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(pairs)) + b"".join(pairs) + tail)
    return path


def endless_array(path: Path, count: int = 1 << 40) -> Path:
    """The issue's 98-byte file: one metadata array declaring 2^40 items it does not hold."""
    pairs = [kv("general.architecture", STRING, gstr("llama")),
             kv("tokenizer.ggml.scores", ARRAY, struct.pack("<IQ", FLOAT32, count) + b"\0" * 8)]
    return gguf_file(path, pairs)


def past_the_end(path: Path) -> Path:
    """The same with a count under the item limit: still far more than the file holds."""
    return endless_array(path, 100_000)


def big_array(path: Path) -> Path:
    """A 4 MB metadata array that is all there (4 M one-byte items): minutes and GBs for the gguf reader."""
    count = 4 << 20
    pairs = [kv("general.architecture", STRING, gstr("llama")),
             kv("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", UINT8, count) + b"\1" * count)]
    return gguf_file(path, pairs)


def layers_without_tensors(path: Path) -> Path:
    """A 1.4 KB header declaring 4,000 layers of width 8,192 and holding no tensors."""
    pairs = [kv("general.architecture", STRING, gstr("llama")),
             kv("general.name", STRING, gstr("x" * 1200)),
             kv("llama.block_count", UINT32, struct.pack("<I", 4000)),
             kv("llama.embedding_length", UINT32, struct.pack("<I", 8192)),
             kv("llama.feed_forward_length", UINT32, struct.pack("<I", 28672)),
             kv("llama.attention.head_count", UINT32, struct.pack("<I", 64))]
    return gguf_file(path, pairs)


HOSTILE = {"endless_array": (endless_array, "tokenizer.ggml.scores", "1,099,511,627,776 items"),
           "past_the_end": (past_the_end, "tokenizer.ggml.scores", "the file ends"),
           "big_array": (big_array, "tokenizer.ggml.token_type", f"limit {MAX_ARRAY_ITEMS:,}"),
           "layers_without_tensors": (layers_without_tensors, "llama.block_count", "declares 4,000 layers")}

def cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


MEASURE = """
import json, sys, time
t = time.perf_counter()
from purecover.models.gguf_convert import read_gguf_info
start = time.perf_counter()
try:
    read_gguf_info(sys.argv[1])
    error = None
except ValueError as exc:
    error = str(exc)
# VmHWM: this process image's peak (ru_maxrss would carry the forking test worker's peak across exec).
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": time.perf_counter() - start, "error": error, "peak_mb": hwm / 1024}))
"""


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_file_is_refused_in_bounded_time_and_memory(name: str, tmp_path: Path) -> None:
    build, field, why = HOSTILE[name]
    path = build(tmp_path / f"{name}.gguf")
    # A subprocess under a 4 GB address-space cap and a timeout: the unchecked reader grows without end here.
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, preexec_fn=cap_memory)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["error"] is not None and str(path) in measured["error"] and field in measured["error"]
    assert why in measured["error"] and "\n" not in measured["error"]
    assert measured["seconds"] < 1.0 and measured["peak_mb"] < 300, measured


def test_the_cli_names_the_file_and_field(tmp_path: Path) -> None:
    path = endless_array(tmp_path / "endless.gguf")
    done = subprocess.run([sys.executable, "-m", "purecover", "models", "convert", str(path), "--cache-dir",
                           str(tmp_path / "cache")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert str(path) in done.stderr and "tokenizer.ggml.scores" in done.stderr and "unexpected" not in done.stderr


def test_a_real_shaped_file_passes_and_is_read_as_the_gguf_reader_reads_it(tmp_path: Path) -> None:
    import gguf

    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    header = check_gguf_header(path)
    reader = gguf.GGUFReader(str(path))
    assert set(header.tensors) == {t.name for t in reader.tensors}
    assert header.n_elements == sum(int(t.n_elements) for t in reader.tensors)
    assert header.data_offset == reader.data_offset
    assert header.metadata["llama.block_count"] == 2 and header.metadata["tokenizer.ggml.tokens"] == 101


def test_a_truncated_file_names_the_tensor_not_numpy(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "cut.gguf")
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(GgufHeaderError, match=r"tensor 'output.weight'.*outside") as err:
        read_gguf_info(path)
    assert "reshape" not in str(err.value) and "dtype" not in str(err.value)


def test_counts_lengths_and_duplicates(tmp_path: Path) -> None:
    cases = {
        "long_string": ([kv("general.name", STRING, struct.pack("<Q", 1 << 62))], "general.name", "string of"),
        "twice": ([kv("a", UINT32, b"\0" * 4), kv("a", UINT32, b"\0" * 4)], "a: ", "twice"),
        "bad_type": ([kv("a", 77, b"")], "a: ", "unknown value type 77"),
    }
    for name, (pairs, field, why) in cases.items():
        with pytest.raises(GgufHeaderError, match=why) as err:
            check_gguf_header(gguf_file(tmp_path / f"{name}.gguf", pairs))
        assert field in str(err.value), name
    many = gguf_file(tmp_path / "many.gguf", [], n_tensors=1 << 40)
    with pytest.raises(GgufHeaderError, match="tensor_count"):
        check_gguf_header(many)


def test_file_type_of_any_kind_and_the_general_group_are_one_line_errors(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = [kv("general.architecture", STRING, gstr("llama")),
             kv("general.file_type", ARRAY, struct.pack("<IQ", UINT32, 1) + b"\0" * 4)]
    assert read_gguf_info(gguf_file(tmp_path / "array_type.gguf", pairs)).quantization.startswith("file_type")
    pairs[1] = kv("general.file_type", FLOAT32, struct.pack("<f", float("inf")))
    assert read_gguf_info(gguf_file(tmp_path / "inf_type.gguf", pairs)).quantization == "file_type inf"
    general = write_tiny_gguf(tmp_path / "general.gguf", arch="general")
    monkeypatch.setattr(gguf_convert, "_convert_into", lambda *a, **k: pytest.fail("tensors were read"))
    with pytest.raises(UnsupportedGgufError, match="GGUF architecture 'general' cannot be loaded") as err:
        convert_gguf(general, tmp_path / "cache")
    assert "'general'," not in str(err.value).split("supported:")[1]


def test_a_configuration_larger_than_the_tensors_is_refused_before_it_is_built(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "wide.gguf", declared_ffn=1 << 24)
    with pytest.raises(ValueError, match="describes a model of .* parameters but the file's tensors hold"):
        convert_gguf(path, tmp_path / "cache")
    assert not any((tmp_path / "cache" / "converted").glob("gguf-*/config.json"))
