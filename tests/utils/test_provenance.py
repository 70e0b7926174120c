"""Stage manifests record what a GGUF or catalogue model was made from (sha256, quantisation, licence)."""

from __future__ import annotations

from pathlib import Path

from purecover.models.catalogue import default_models_dir
from purecover.models.gguf_convert import convert_gguf
from purecover.records import StageManifest, StageSummary
from purecover.utils.provenance import write_stage_manifest

from ..models.gguf_files import sha256_of, write_tiny_gguf


def test_manifest_records_gguf_model_sources(tmp_path: Path) -> None:
    gguf = write_tiny_gguf(tmp_path / "teacher.gguf")
    convert_gguf(gguf, default_models_dir())  # the stage converted it when it loaded the model
    recipe = {"teacher": {"model": str(gguf)}, "student": {"model": "Qwen/Qwen2.5-7B-Instruct"},
              "eval": {"generator": str(tmp_path / "no-such-dir")}}
    path = write_stage_manifest(tmp_path, "label", recipe, "hash", StageSummary(status="complete"))
    manifest = StageManifest.model_validate_json(path.read_text())
    assert manifest.model_sources is not None and list(manifest.model_sources) == ["teacher.model"]
    src = manifest.model_sources["teacher.model"]
    assert (src.sha256, src.info.quantization, src.license) == (sha256_of(gguf), "ALL_F32", "apache-2.0")
    plain = write_stage_manifest(tmp_path, "data", {"teacher": {"model": "Qwen/Qwen2.5-7B-Instruct"}}, "h",
                                 StageSummary(status="complete"))
    assert "model_sources" not in plain.read_text()  # only when a GGUF model is named
