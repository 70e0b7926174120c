"""The calibrate stage: the teacher's position bias → run_dir/bias.json (`purecover.teacher.calibration`
holds the computation and the file's contract)."""

from __future__ import annotations

import time

import torch

from ..config import Recipe
from ..records import CalibrateSummary, StageSummary
from ..rundir import RunDir
from ..stages import StageRun
from .calibration import calibration_keys, calibration_sequence, compute_position_bias, save_bias
from .label_record import stored
from .layers import load_layer_plan, reach_report, sequence_distance
from .loading import load_teacher_model, load_teacher_tokenizer
from .prompts import ReasoningPrompt

__all__ = ["run_calibrate_stage", "write_bias"]


def run_calibrate_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Compute the position bias for (teacher, K1, template, layers, document lengths) and write run_dir/bias.json;
    returns the summary also stored in calibrate.run.json (a `CalibrateSummary`; a complete stage's stored summary
    that another version wrote may read as a plain `StageSummary`)."""
    from ..stages import run_stage

    return run_stage("calibrate", recipe, show_progress)


def write_bias(run: StageRun) -> CalibrateSummary:
    """The calibrate stage's body: the position bias of the teacher into run_dir/bias.json.

    The dummy documents' token lengths follow ``teacher.calibration_lengths`` (the candidates'
    per-position medians from run_dir/candidates.jsonl, or a fixed count). ``teacher.layers`` is resolved on the
    teacher's config first (`purecover.teacher.layers`), and the calibration sequence is checked against the
    read layers' windows before the model is loaded: an explicitly listed layer that cannot see the dummy
    documents from the dummy steps is refused, ``all`` over sliding-window layers is warned about.
    """
    recipe = run.recipe
    cfg = recipe.teacher
    if cfg.estimator != "attention":
        raise ValueError("calibration applies to the attention estimator (teacher.estimator is "
                         f"{cfg.estimator!r}); nothing to calibrate")
    rd = RunDir.of(recipe)
    torch.manual_seed(recipe.seed)
    plan = load_layer_plan(cfg.model, cfg.layers, trust_remote_code=cfg.trust_remote_code)
    tokenizer = load_teacher_tokenizer(cfg)
    prompt = ReasoningPrompt.from_config(cfg)
    keys, lengths = calibration_keys(cfg.model, recipe.data.k1, tokenizer, cfg.layers, cfg.calibration_lengths,
                                     rd.path_of("candidates"), prompt=prompt, layers_read=plan.read)
    seq = calibration_sequence(tokenizer, lengths.target, prompt)
    beyond = reach_report(plan, [("the calibration sequence", sequence_distance(seq.step_spans, seq.doc_spans))],
                          exact=True)
    model = load_teacher_model(cfg)
    t0 = time.perf_counter()
    bias = compute_position_bias(model, tokenizer, lengths.target, list(plan.read),
                                 max_chunk_bytes=cfg.capture_chunk_mb << 20, prompt=prompt)
    path = rd.path_of("bias")
    save_bias(path, bias, keys, lengths, prompt)
    return CalibrateSummary(
        bias_file=str(path), k1=recipe.data.k1, seconds=round(time.perf_counter() - t0, 2),
        bias_mean=stored(bias.bias.mean()), bias_first_last=[stored(bias.bias[0]), stored(bias.bias[-1])],
        doc_tokens=lengths.summary(), doc_tokens_measured={"min": min(bias.doc_tokens), "max": max(bias.doc_tokens)},
        doc_tokens_source=lengths.source, keys=keys, layers=plan.record(beyond))
