"""student.reshuffle_each_epoch: epoch 0 shows the candidate_shuffles orders, each later epoch fresh ones, the same
on every run; the callback reads the epoch the Trainer is in; a real training run sees new orders in epoch 2."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

from purecover.config import ConfigError, load_recipe
from purecover.records import CandidateDoc
from purecover.train.data import LabelledQuestion, SelectorExample, candidate_order, shuffled_views
from purecover.train.epoch_orders import EpochShuffledDataset, EpochViewCallback
from purecover.train.train_stage import run_train_stage
from tests.train.helpers import labelled_run
from tests.train.test_idempotent import labelled_copy, recipe_for


def _question(qid: str, n: int = 6) -> LabelledQuestion:
    docs = tuple(CandidateDoc(doc_id=f"{qid}-{k}", title=f"t{k}", text=f"text {k}") for k in range(n))
    return LabelledQuestion(qid, "q?", docs, (1, 4))


def _render(q: LabelledQuestion) -> SelectorExample:
    return SelectorExample(q.qid, [], list(q.selected), len(q.docs), list(q.order or range(len(q.docs))))


def test_epoch_zero_is_the_fixed_views_and_later_epochs_draw_new_ones():
    questions = [_question(f"q{i}") for i in range(5)]
    data = EpochShuffledDataset(questions, 2, seed=3, render=_render)
    assert len(data) == 10
    fixed = [(q.qid, list(q.order), list(q.selected)) for q in shuffled_views(questions, 2, 3)]
    assert [(e.qid, e.order, e.selected) for e in data] == fixed
    data.set_epoch(1)
    first = [e.order for e in data]
    assert first != [o for _, o, _ in fixed]
    assert first[0] == candidate_order("q0", 6, 3, view=2) and first[1] == candidate_order("q0", 6, 3, view=3)
    for e in data:  # the label moves with its passages: shown position of candidate 1 and 4
        assert e.selected == [e.order.index(1), e.order.index(4)]
    data.set_epoch(1)
    assert [e.order for e in data] == first  # a pure function of (seed, epoch, copy, qid)
    with pytest.raises(ValueError, match="candidate_shuffles >= 1"):
        EpochShuffledDataset(questions, 0, seed=3, render=_render)


@pytest.mark.parametrize(("epoch", "expected"), [(0.0, 0), (None, 0), (0.9999999, 1), (1.0, 1), (1.5, 1), (2.0, 2)])
def test_the_callback_sets_the_epoch_under_way(epoch, expected):
    data = EpochShuffledDataset([_question("a")], 1, seed=0, render=_render)
    EpochViewCallback(data).on_epoch_begin(None, SimpleNamespace(epoch=epoch), None)
    assert data.epoch == expected


def test_the_key_needs_shuffles():
    with pytest.raises(ConfigError, match="reshuffle_each_epoch: needs candidate_shuffles >= 1"):
        load_recipe(None, ["student.reshuffle_each_epoch=true", "student.candidate_shuffles=0"])


def test_a_real_two_epoch_run_shows_each_question_in_a_new_order(tmp_path, monkeypatch):
    """Two epochs with the key on: each training question's prompt differs between the epochs, and epoch 1's prompts
    are those of the same run without the key (which repeats them in epoch 2)."""
    import purecover.train.trainer as trainer_module

    tiny, run = labelled_run(tmp_path)
    real_loss = trainer_module.selector_loss
    seen: dict[str, list[list[tuple[int, ...]]]] = defaultdict(list)
    label = ["on"]

    def recording(model, prompts, selected, n_docs, fmt, **kwargs):
        if model.training:
            seen[label[0]].append([tuple(p.tolist()) for p in prompts])
        return real_loss(model, prompts, selected, n_docs, fmt, **kwargs)

    monkeypatch.setattr(trainer_module, "selector_loss", recording)
    common = ("student.training.max_steps=-1", "student.training.num_train_epochs=2",
              "student.training.per_device_train_batch_size=1", "student.eval_fraction=0.25")
    run_train_stage(recipe_for(labelled_copy(run, tmp_path / "on"), tiny, *common,
                               "student.reshuffle_each_epoch=true"), show_progress=False)
    label[0] = "off"
    run_train_stage(recipe_for(labelled_copy(run, tmp_path / "off"), tiny, *common), show_progress=False)
    on = [p for batch in seen["on"] for p in batch]
    off = [p for batch in seen["off"] for p in batch]
    half = len(on) // 2
    assert len(on) == len(off) and half >= 3
    assert sorted(on[:half]) == sorted(off[:half]) == sorted(off[half:])  # epoch 1: the fixed views, both runs
    by_question = defaultdict(set)  # a question's prompts share their tokens, whatever the order
    for p in on:
        by_question[tuple(sorted(p))].add(p)
    assert len(by_question) == half and all(len(v) == 2 for v in by_question.values())
