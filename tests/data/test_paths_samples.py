"""A ``data.path`` list over the real HotpotQA sample files (skipped without them): three files read as one set of
questions, and the student's train / calibration / test split of that union under the real_cpu recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.loaders import ExampleSource

HOTPOTQA_FILES = ("hotpotqa_dev_sample.json", "hotpotqa_dev_extra.json", "hotpotqa_train_sample.json")
REAL_CPU = Path(__file__).resolve().parents[2] / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml"


@pytest.fixture(scope="module")
def union(sample_dir: Path) -> list:
    files = [sample_dir / name for name in HOTPOTQA_FILES]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        pytest.skip(f"real sample files not found in {sample_dir}: {', '.join(missing)}")
    return list(ExampleSource("hotpotqa", files))


def test_three_hotpotqa_files_read_as_one_list_have_distinct_qids(union):
    qids = [e.qid for e in union]
    assert len(qids) == 252 + 283 + 100 == 635
    assert len(set(qids)) == 635


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_student_split_of_the_union_is_disjoint_with_a_large_test_split(union, seed):
    from purecover.data.splits import question_split
    from purecover.train.data import split_examples

    student = load_recipe(REAL_CPU).student  # the real_cpu recipes' split: eval_fraction 0.4, calibration_share 0.5
    assert (student.eval_fraction, student.calibration_share) == (0.4, 0.5)
    train, calib, test = split_examples(union, student.eval_fraction, seed, student.calibration_share)
    parts = {"train": {e.qid for e in train}, "calib": {e.qid for e in calib}, "test": {e.qid for e in test}}
    assert sum(map(len, parts.values())) == 635 == len(set().union(*parts.values()))  # no qid in two splits
    assert not (parts["train"] & parts["calib"] or parts["train"] & parts["test"] or parts["calib"] & parts["test"])
    for name, members in parts.items():  # the split is question_split's, qid by qid
        assert all(question_split(q, student.eval_fraction, student.calibration_share, seed) == name for q in members)
    assert len(test) >= 100 and len(calib) >= 100 and len(train) >= 300
