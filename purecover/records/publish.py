"""What leaves the run directory: a push to the Hub (export.push.json, publish.<what>.push.json), the model
card's and a published dataset card's front matter, and the ``publish --to-disk`` marker."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import NonNegativeInt, _Written


class PushRecord(_Written):
    """``run_dir/export.push.json`` / ``publish.<what>.push.json``: the last push of a folder to the Hub
    (`purecover.utils.hub.push_folder`); the same fingerprint to the same target is not pushed again."""

    endpoint: str = Field(description="The Hub endpoint pushed to.")
    repo_id: str = Field(description="The repository, owner/name.")
    repo_type: str = Field(description="model or dataset.")
    revision: str = Field(description="The branch pushed to.")
    url: str = Field(description="The repository's (or branch's) URL.")
    commit: str = Field(description="The commit id the push made.")
    commit_url: str = Field(description="The URL of that commit.")
    fingerprint: str = Field(description="sha256 over the relative paths and bytes of the pushed files (16 hex).")
    private: bool = Field(description="Whether the repository was created private.")
    files: list[str] = Field(description="The pushed files, relative, sorted.")
    pushed_at: str = Field(description="When (UTC, ISO 8601, seconds).")


class ModelCardFront(_Written):
    """The YAML front matter of the exported selector's README.md (`purecover.train.model_card`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"license_name", "license_link", "datasets"})

    base_model: str = Field(description="The base model.")
    library_name: Literal["peft", "transformers"] = Field(description="peft for an adapter, else transformers.")
    license: str = Field(description="export.license, else the base model's licence, else other.")
    license_name: str | None = Field(default=None, description="The base model's licence name (licence other).")
    license_link: str | None = Field(default=None, description="The base model's licence link (licence other).")
    datasets: list[str] | None = Field(default=None, description="The training data's Hub dataset, when it is one.")
    tags: list[str] = Field(description="Hub tags: purecover's and the dataset's name.")
    pipeline_tag: str = Field(description="The Hub pipeline tag (text-generation).")


class HubDataFiles(_Written):
    """One split's files in a Hub dataset card's ``configs``."""

    split: str = Field(description="The split's name.")
    path: str = Field(description="Its files, a glob relative to the repository.")


class HubDatasetConfig(_Written):
    """One configuration in a Hub dataset card's ``configs``."""

    config_name: str = Field(description="The configuration's name.")
    data_files: list[HubDataFiles] = Field(description="Its splits and their files.")


class DatasetCardFront(_Written):
    """The YAML front matter of a published dataset's README.md (`purecover.publish.dataset_card`)."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"source_datasets"})

    license: str = Field(description="The source dataset's licence when known, else other.")
    pretty_name: str = Field(description="purecover <what> (<dataset>).")
    tags: list[str] = Field(description="Hub tags: purecover's and the dataset's name.")
    size_categories: list[str] = Field(description="The Hub size category of the row count.")
    source_datasets: list[str] | None = Field(default=None, description="The source Hub dataset, when it is one.")
    configs: list[HubDatasetConfig] = Field(description="The data files of the default configuration.")


class PublishMarker(_Written):
    """``purecover_publish.json`` inside a ``publish --to-disk`` output: what it is and every file it holds (only
    such a folder, of the same ``--what``, is replaced by a later publish)."""

    what: Literal["labels", "selections", "candidates"] = Field(description="The run file published.")
    run_dir: str = Field(description="The run directory it was published from (resolved).")
    rows: NonNegativeInt = Field(description="Rows of the dataset.")
    files: list[str] = Field(description="Every entry of the folder but this file (relative; folders end in /).")
    published: str = Field(description="When (UTC, ISO 8601, seconds).")
    purecover_version: str = Field(description="The purecover version that published it.")
