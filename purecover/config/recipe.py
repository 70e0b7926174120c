"""The `tracking` section and the `Recipe`, the whole run: every section under its key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from .base import _NOT_BLANK, _SECTION
from .data_teacher import DataConfig, TeacherConfig
from .student_eval import EvalConfig, ExportConfig, StudentConfig


@dataclass(config=_SECTION)
class TrackingConfig:
    """`tracking`: experiment tracking of the label, train and evaluate summaries (never hashed)."""

    report_to: Literal["none", "wandb"] = Field(
        "none", description="wandb: one wandb run per label / evaluate invocation that does work, and the Trainer's "
        "own for train; none: wandb is not imported.")
    project: StrictStr = Field("purecover", description="wandb project.")
    entity: StrictStr | None = Field(None, description="wandb entity, a team or user (null: your default).")
    run_name: StrictStr | None = Field(None, description="Name of the tracked runs (null: the run directory's name).")


@dataclass(config=_SECTION)
class Recipe:
    """A whole run: every stage reads from and writes to `run_dir`."""

    run_dir: StrictStr = Field(
        "runs/demo", pattern=_NOT_BLANK, description="The run directory every stage reads from and writes to.")
    seed: StrictInt = Field(
        0, ge=0, le=2**32 - 1, description="Seed of the student's train/calibration/test split, of model "
        "initialisation and generation sampling, and of the evaluation statistics (numpy and torch take 32-bit "
        "unsigned seeds).")
    data: DataConfig = Field(default_factory=DataConfig, description="Questions, corpus and candidate retrieval.")
    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="The labelling teacher.")
    student: StudentConfig = Field(default_factory=StudentConfig, description="The distilled selector and its "
                                   "training.")
    export: ExportConfig = Field(default_factory=ExportConfig, description="Saving the trained selector.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="End-to-end QA evaluation.")
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig, description="Experiment tracking (never part of a configuration hash).")
    threads: Literal["auto"] | Annotated[StrictInt, Field(ge=1)] = Field(
        "auto", description="Threads torch computes with in each stage: auto, the cores this process may use minus "
        "the other processes running when the stage starts (at least 1), or a number. OMP_NUM_THREADS, when set, "
        "wins. Never part of a configuration hash.")

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)

