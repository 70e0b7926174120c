"""The calibrate stage: the teacher's position bias → run_dir/bias.json (`purecover.teacher.calibration`
holds the computation and the file's contract)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..config import Recipe
from ..contract import StageRun
from ..records import CalibrateSummary, CandidateRecord, InContextCounts, StageSummary
from ..rundir import RunDir
from .calibration import (
    PositionBias,
    calibration_keys,
    calibration_sequence,
    compute_position_bias,
    key_string,
    save_bias,
)
from .in_context_calibration import (
    StepsOf,
    calibration_questions,
    in_context_bias,
    mixed_steps,
    oracle_steps,
    procedure_key,
    row_key,
    writes_own_steps,
)
from .label_record import stored
from .layers import load_layer_plan, reach_report, sequence_distance
from .loading import load_teacher_model, load_teacher_tokenizer, teacher_generator
from .parsing import ParsedReply, parse_reply
from .prompts import (
    ReasoningPrompt,
    TeacherSequence,
    build_attention_prompt,
    build_teacher_sequence,
    reasoning_replies,
)

__all__ = ["run_calibrate_stage", "write_bias"]


def run_calibrate_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Compute the position bias for (teacher, K1, template, layers, document lengths) and write run_dir/bias.json;
    returns the summary also stored in calibrate.run.json (a `CalibrateSummary`; a complete stage's stored summary
    that another version wrote may read as a plain `StageSummary`)."""
    from ..contract import run_stage

    return run_stage("calibrate", recipe, show_progress)


def write_bias(run: StageRun) -> CalibrateSummary:
    """The calibrate stage's body: the position bias of the teacher into run_dir/bias.json.

    The dummy documents' token lengths follow ``teacher.calibration_lengths`` (the candidates'
    per-position medians from run_dir/candidates.jsonl, or a fixed count). ``teacher.layers`` is resolved on the
    teacher's config first (`purecover.teacher.layers`), and the calibration sequence is checked against the
    read layers' windows before the model is loaded: an explicitly listed layer that cannot see the dummy
    documents from the dummy steps is refused, ``all`` over sliding-window layers is warned about.
    ``teacher.calibration_procedure: in_context`` measures the bias on the run's own first questions instead
    (`purecover.teacher.in_context_calibration`; resumable through run_dir/bias_in_context.jsonl).
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
    records = (calibration_questions(rd.path_of("candidates"), cfg.calibration_questions)
               if cfg.calibration_procedure == "in_context" else None)
    procedure = None if records is None else procedure_key(cfg.steps, records, recipe.data.k1)
    keys, lengths = calibration_keys(cfg.model, recipe.data.k1, tokenizer, cfg.layers, cfg.calibration_lengths,
                                     rd.path_of("candidates"), prompt=prompt, layers_read=plan.read,
                                     procedure=procedure)
    seq = calibration_sequence(tokenizer, lengths.target, prompt)
    beyond = reach_report(plan, [("the calibration sequence", sequence_distance(seq.step_spans, seq.doc_spans))],
                          exact=True)
    model = load_teacher_model(cfg)
    t0 = time.perf_counter()
    counts = None
    if records is None:
        bias = compute_position_bias(model, tokenizer, lengths.target, list(plan.read),
                                     max_chunk_bytes=cfg.capture_chunk_mb << 20, prompt=prompt)
    else:
        def build(record: CandidateRecord, reply: ParsedReply) -> TeacherSequence:
            text, spans = build_attention_prompt(tokenizer, record.question, record.docs, prompt)
            return build_teacher_sequence(tokenizer, text, spans, reply.steps, reply.answer)

        own = any(writes_own_steps(cfg.steps, r) for r in records)
        generator = teacher_generator(cfg, recipe.seed, tokenizer, lambda: model) if own else None
        steps_of = mixed_steps(cfg.steps, oracle_steps(cfg.max_steps),
                               None if generator is None else _model_steps(cfg, generator, tokenizer, prompt))
        try:
            measured = in_context_bias(model, tokenizer, records, recipe.data.k1, lengths.target, steps_of, build,
                                       list(plan.read), rd.path_of("bias_rows"), row_key(key_string(keys)),
                                       batch_size=cfg.batch_size, max_chunk_bytes=cfg.capture_chunk_mb << 20,
                                       show_progress=run.show_progress)
        finally:
            if generator is not None:
                generator.close()
        bias = PositionBias(measured.bias, list(lengths.target))
        counts = InContextCounts(questions=measured.per_question.shape[0], sequences=measured.captured,
                                 resumed=measured.resumed, fallback=measured.fallback,
                                 spread=stored(float(np.nanmean(np.nanstd(measured.per_question, axis=0)))))
    path = rd.path_of("bias")
    save_bias(path, bias, keys, lengths, prompt)
    optional = {"in_context": counts} if counts is not None else {}
    return CalibrateSummary(
        bias_file=str(path), k1=recipe.data.k1, seconds=round(time.perf_counter() - t0, 2),
        bias_mean=stored(bias.bias.mean()), bias_first_last=[stored(bias.bias[0]), stored(bias.bias[-1])],
        doc_tokens=lengths.summary(), doc_tokens_measured={"min": min(bias.doc_tokens), "max": max(bias.doc_tokens)},
        doc_tokens_source=lengths.source, keys=keys, layers=plan.record(beyond), **optional)


def _model_steps(cfg: Any, generator: Any, tokenizer: Any, prompt: ReasoningPrompt) -> StepsOf:
    """Steps from a new teacher reply to each record (``teacher.steps: model``): the label stage's prompt, reply
    prefix, max_new_tokens and reply parser."""
    def steps_of(records: Sequence[CandidateRecord]) -> list[ParsedReply]:
        replies = reasoning_replies(generator, tokenizer, records, prompt, cfg.reply_prefix, cfg.max_new_tokens)
        return [parse_reply(reply.text, r.question, cfg.max_steps, finished=reply.finished, example=prompt.example)
                for r, reply in zip(records, replies)]

    return steps_of
