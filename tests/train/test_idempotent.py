"""The train stage is idempotent: a finished run is skipped, a changed configuration is refused before
anything loads, a kill at the end (after final/, before the manifest) loses nothing, and a checkpoint
that lost a file the Trainer writes is not resumed from."""

from __future__ import annotations

import json

import pytest

import purecover.train.train_stage as train_run
from purecover.config import load_recipe
from purecover.train.train_stage import CHECKPOINTS, FINAL, STUDENT_META, run_train_stage
from tests.run_dirs import new_run_dir
from tests.train.helpers import labelled_run


def recipe_for(run, tiny, *extra):
    return load_recipe(None, [
        f"run_dir={run}", "data.path=demo", "data.k1=6", "data.limit=8", f"teacher.model={tiny}",
        "teacher.steps=oracle", "teacher.calibrate=false", "teacher.dtype=float32", "teacher.device=cpu",
        f"student.model={tiny}", "student.training.max_steps=4", "student.training.save_steps=2",
        "student.training.logging_steps=1", *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tiny, run = labelled_run(tmp_path_factory.mktemp("idem"))
    summary = run_train_stage(recipe_for(run, tiny), show_progress=False)
    return tiny, run, summary


def snapshot(run):
    """Every file under checkpoints/ with its modification time and size."""
    base = run / CHECKPOINTS
    return {str(p.relative_to(base)): (p.stat().st_mtime_ns, p.stat().st_size) for p in base.rglob("*") if p.is_file()}


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the student was loaded")

    monkeypatch.setattr(train_run, "_load_student", refuse)


def test_rerun_after_complete_changes_nothing(trained, no_loading):
    tiny, run, summary = trained
    before = snapshot(run)
    manifest = json.loads((run / "train.run.json").read_text())
    again = run_train_stage(recipe_for(run, tiny), show_progress=False)
    assert again.to_json_dict() == summary.to_json_dict() and again.global_step == 4
    assert snapshot(run) == before  # no 5th step, final/ untouched, no checkpoint rotated away
    assert sorted(p.name for p in (run / CHECKPOINTS).glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert json.loads((run / "train.run.json").read_text()) == manifest


def test_changed_configuration_is_refused_before_anything_loads(trained, no_loading):
    tiny, run, _ = trained
    before = snapshot(run)
    with pytest.raises(RuntimeError, match="different data/teacher/student configuration"):
        run_train_stage(recipe_for(run, tiny, "student.training.learning_rate=0.5"), show_progress=False)
    assert snapshot(run) == before
    manifest = json.loads((run / "train.run.json").read_text())
    assert manifest["summary"]["status"] == "complete"  # the old hash stays: the new config never ran


def test_final_of_another_configuration_is_refused_without_a_manifest(trained, no_loading, tmp_path):
    # a copied checkpoints/ without its train.run.json still cannot pass as this configuration's
    import shutil

    tiny, run, _ = trained
    other = tmp_path / "other"
    shutil.copytree(run, other)
    (other / "train.run.json").unlink()
    with pytest.raises(RuntimeError, match="holds a student trained with another configuration"):
        run_train_stage(recipe_for(other, tiny, "student.lm_weight=0.5"), show_progress=False)


def test_kill_after_final_before_the_manifest_is_completed_on_rerun(trained, tmp_path):
    """The manifest is the one completion marker: the rerun resumes from the last complete checkpoint before
    max_steps and ends with the same student."""
    import shutil

    tiny, run, summary = trained
    killed = tmp_path / "killed"
    shutil.copytree(run, killed)
    manifest = json.loads((killed / "train.run.json").read_text())
    manifest["summary"] = {"status": "running"}  # what the stage writes before training
    (killed / "train.run.json").write_text(json.dumps(manifest))
    result = run_train_stage(recipe_for(killed, tiny), show_progress=False)
    assert result.tau3 == pytest.approx(summary.tau3, abs=1e-6) and result.global_step == summary.global_step
    assert json.loads((killed / "train.run.json").read_text())["summary"]["status"] == "complete"


def test_a_checkpoint_without_its_optimizer_state_is_not_resumed_from(trained, tmp_path, caplog):
    """Resuming with a fresh optimizer trains another student: such a checkpoint is passed over, with a warning."""
    import shutil

    from purecover.train.train_stage import _last_complete_checkpoint, checkpoint_problem

    _, run, _ = trained
    copy = tmp_path / "ckpts"
    shutil.copytree(run / CHECKPOINTS, copy)
    for name in ("checkpoint-2", "checkpoint-4"):
        assert checkpoint_problem(copy / name) is None  # every file the Trainer writes is there
    (copy / "checkpoint-2" / "optimizer.pt").unlink()
    assert checkpoint_problem(copy / "checkpoint-2") == "no optimizer.pt"
    with caplog.at_level("WARNING", logger="purecover.train.train_stage"):
        assert _last_complete_checkpoint(copy) is None  # checkpoint-4 is at max_steps; -2 lacks its optimizer
    assert "not resuming from" in caplog.text and "no optimizer.pt" in caplog.text
    for missing in ("scheduler.pt", "rng_state.pth", "adapter_model.safetensors"):
        other = tmp_path / missing
        shutil.copytree(copy / "checkpoint-4", other)
        (other / missing).unlink()
        assert checkpoint_problem(other) is not None


def test_kill_before_the_completion_marker_resumes_to_the_same_result(trained, tmp_path):
    import shutil

    tiny, run, summary = trained
    killed = tmp_path / "killed"
    shutil.copytree(run, killed)
    (killed / CHECKPOINTS / FINAL / STUDENT_META).unlink()  # killed while writing final/
    result = run_train_stage(recipe_for(killed, tiny), show_progress=False)
    assert result.global_step == summary.global_step == 4  # resumed at the end: no extra step
    assert result.tau3 == pytest.approx(summary.tau3, abs=1e-6)
    assert sorted(p.name for p in (killed / CHECKPOINTS).glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    meta = json.loads((killed / CHECKPOINTS / FINAL / STUDENT_META).read_text())
    assert meta["summary"]["global_step"] == 4 and meta["config_hash"]


def labelled_copy(run, copy):
    """A new run directory holding `run`'s candidates and labels (and their manifests), nothing trained."""
    import shutil

    new_run_dir(copy)
    for name in ("candidates.jsonl", "labels.jsonl", "data.run.json", "label.run.json"):
        if (run / name).exists():
            shutil.copy(run / name, copy / name)
    return copy


def test_the_student_target_keys_reach_the_training_examples(trained, monkeypatch, tmp_path):
    """student.target / target_k are what the train stage reads its labels with (the released code's top_k)."""
    tiny, run, _ = trained
    seen = {}

    class Stop(Exception):
        pass

    def capture(candidates, labels, **kwargs):
        seen.update(kwargs)
        raise Stop

    copy = labelled_copy(run, tmp_path / "topk")
    monkeypatch.setattr(train_run, "read_labelled_questions", capture)
    with pytest.raises(Stop):
        run_train_stage(recipe_for(run, tiny, f"run_dir={copy}", "student.target=top_k", "student.target_k=3"),
                        show_progress=False)
    assert seen == {"target": "top_k", "target_k": 3}


def test_the_released_code_loss_trains_with_fresh_negatives_each_step(trained, monkeypatch, tmp_path):
    """student.reply_order target + negatives sampled: the trainer hands the loss the target in its own order and,
    each step, negative_sample candidates from the negative_pool last unselected ones; the settings reach the
    student's metadata and its model card."""
    import purecover.train.trainer as trainer_module
    from purecover.records import StudentLosses
    from purecover.train.model_card import _loss_form

    tiny, run, _ = trained
    calls = []
    real_loss = trainer_module.selector_loss

    def recording(model, prompts, selected, n_docs, fmt, **kwargs):
        calls.append((model.training, [list(s) for s in selected], list(n_docs), kwargs["reply_order"],
                      kwargs["rejected"]))
        return real_loss(model, prompts, selected, n_docs, fmt, **kwargs)

    copy = labelled_copy(run, tmp_path / "released")
    monkeypatch.setattr(trainer_module, "selector_loss", recording)
    run_train_stage(recipe_for(run, tiny, f"run_dir={copy}", "student.target=top_k", "student.target_k=3",
                               "student.reply_order=target", "student.negatives=sampled",
                               "student.negative_sample=2", "student.negative_pool=3",
                               "student.training.per_device_train_batch_size=1"), show_progress=False)
    train_calls = [c for c in calls if c[0]]
    assert len(train_calls) == 4
    for _, selected, n_docs, order, rejected in train_calls:
        assert order == "target"
        for sel, n, neg in zip(selected, n_docs, rejected):
            assert len(sel) == 3 and len(neg) == 2 and not set(neg) & set(sel) and set(neg) <= set(range(n))
    assert len({tuple(c[4][0]) for c in train_calls}) > 1 or len({tuple(c[1][0]) for c in train_calls}) > 1
    meta = json.loads((copy / CHECKPOINTS / FINAL / STUDENT_META).read_text())
    assert meta["losses"] == {"lm_weight": 1.0, "cl_weight": 1.0, "m_exact": 5, "lm_reduction": "token_mean",
                              "reply_order": "target", "negatives": "sampled", "negative_sample": 2,
                              "negative_pool": 3, "bce_weight": 0.0}
    assert (meta["readout"], meta["passage_score"]) == ("identifier", "token")  # beside the losses
    card = _loss_form(StudentLosses(**meta["losses"]))  # the clause the model card's loss line ends with
    assert "released-code form: the reply is the target in its own order" in card
    assert "2 negatives drawn each step from the last 3 candidates" in card
