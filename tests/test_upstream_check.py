"""A stage run on its own checks that the stages whose outputs it reads are complete for this recipe, as the
pipeline does: it names the one that is blocked or stale instead of training on old files or failing on a line."""

from __future__ import annotations

import json

import pytest

from purecover.config import load_recipe
from purecover.contract import StageBlockedError, upstream_problem
from purecover.train.train_stage import run_train_stage
from tests.train.helpers import labelled_run

pytestmark = pytest.mark.samples


def _recipe(run, tiny, *extra):
    return load_recipe(None, [
        f"run_dir={run}", "data.path=demo", "data.k1=6", "data.limit=8", f"teacher.model={tiny}",
        "teacher.steps=oracle", "teacher.calibrate=false", "teacher.dtype=float32", "teacher.device=cpu",
        f"student.model={tiny}", *extra])


def test_train_refuses_candidates_made_with_another_data_configuration(tmp_path):
    tiny, run = labelled_run(tmp_path)
    assert upstream_problem(_recipe(run, tiny), "train") is None  # as labelled: complete
    changed = _recipe(run, tiny, "data.k1=5")  # the data stage would refuse these candidates
    with pytest.raises(StageBlockedError) as err:
        run_train_stage(changed, show_progress=False)
    message = str(err.value)
    assert message.startswith("stage train: the data stage is blocked") and "purecover data" in message
    assert not (run / "checkpoints").exists()  # nothing trained on the old candidates


def test_train_refuses_labels_changed_since_the_label_stage_completed(tmp_path):
    tiny, run = labelled_run(tmp_path)
    labels = run / "labels.jsonl"
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    rows[0]["selected"] = [0]
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(StageBlockedError, match="stage train: the label stage is changed since it completed"):
        run_train_stage(_recipe(run, tiny), show_progress=False)


def test_outputs_without_a_manifest_are_used_as_they_are(tmp_path):
    tiny, run = labelled_run(tmp_path)
    for manifest in ("data.run.json", "label.run.json"):
        (run / manifest).unlink()  # as if candidates and labels were assembled by hand
    assert upstream_problem(_recipe(run, tiny, "data.k1=5"), "train") is None
