"""teacher.calibration_procedure in_context: the released code's calibration (docs/paper/released-code.md).

The calibrate stage's bias is checked against the procedure computed by hand with eager attention (each position's
document replaced by the generic paragraph, the steps' mean attention to it, averaged over questions); its keys
carry the procedure, so a label stage expecting the other procedure refuses the file; a killed calibration resumes
from its rows and ends with the same bias; steps: model writes a new reply for every replaced set."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import purecover.teacher.in_context_calibration as icc
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.calibration import BiasMismatchError
from purecover.teacher.capture import SegmentSpec, reference_segment_attention
from purecover.teacher.label_stage import load_candidates, run_label_stage
from purecover.teacher.prompts import ReasoningPrompt, build_attention_prompt, build_teacher_sequence
from tests.run_dirs import new_run_dir
from tests.teacher.conftest import fresh_run, make_recipe

IN_CONTEXT = ["teacher.calibration_procedure=in_context", "teacher.calibration_questions=2", "teacher.steps=oracle",
              "teacher.layers=all", "teacher.calibration_lengths=24"]


def hand_bias(run, teacher_dir, recipe):
    """The procedure read from its description: per question and position, document k replaced by the generic
    paragraph, the oracle steps' per-token attention to it (all layers and heads, eager), averaged over steps,
    then over the questions."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(teacher_dir)
    model = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32, attn_implementation="eager")
    prompt = ReasoningPrompt.from_config(recipe.teacher)
    rows = []
    for rec in load_candidates(run / "candidates.jsonl")[:2]:
        row = []
        for k in range(len(rec.docs)):
            docs = list(rec.docs)
            docs[k] = icc.with_generic_document(rec, k, tok, 24).docs[k]
            assert icc.GENERIC_PARAGRAPH[:40] in docs[k].text
            text, spans = build_attention_prompt(tok, rec.question, docs, prompt)
            seq = build_teacher_sequence(tok, text, spans, rec.oracle_steps[:5], rec.answers[0])
            with torch.no_grad():
                att = model(input_ids=torch.tensor([seq.input_ids]), output_attentions=True).attentions
            (m,) = reference_segment_attention(att, None, [SegmentSpec.of(seq.step_spans, [seq.doc_spans[k]])])
            row.append(float(m[:, 0].mean()))
        rows.append(row)
    return np.array(rows).mean(axis=0)


@pytest.mark.parametrize("layout", ["chat", "plain"])
def test_the_bias_is_the_procedure_computed_by_hand(tmp_path, demo_candidates, tiny_teacher_dir, layout):
    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_teacher_dir, *IN_CONTEXT, f"teacher.attention_layout={layout}")
    summary = run_calibrate_stage(recipe, show_progress=False)
    written = json.loads((run / "bias.json").read_text())
    np.testing.assert_allclose(written["bias"], hand_bias(run, tiny_teacher_dir, recipe), rtol=1e-4)
    assert written["keys"]["procedure"].startswith("in_context:steps=oracle:questions=2:")
    counts = summary.in_context
    assert counts.questions == 2 and counts.sequences == 10 and counts.resumed == 0 and counts.fallback == 0
    # the label stage reads it under the same keys, and labels
    labelled = run_label_stage(recipe, show_progress=False)
    assert labelled.questions == 6
    # a recipe expecting the fixed procedure refuses the file, naming the key
    fixed = make_recipe(run, tiny_teacher_dir, *[o for o in IN_CONTEXT if "procedure" not in o],
                        f"teacher.attention_layout={layout}", f"run_dir={tmp_path / 'fixed'}")
    new_run_dir(tmp_path / "fixed")
    for name in ("candidates.jsonl", "bias.json"):
        (tmp_path / "fixed" / name).write_bytes((run / name).read_bytes())
    with pytest.raises(BiasMismatchError, match="'procedure'"):
        run_label_stage(fixed, show_progress=False)


def test_a_killed_calibration_resumes_from_its_rows(tmp_path, demo_candidates, tiny_teacher_dir, monkeypatch):
    whole = fresh_run(tmp_path / "whole", demo_candidates)
    run_calibrate_stage(make_recipe(whole, tiny_teacher_dir, *IN_CONTEXT), show_progress=False)
    killed = fresh_run(tmp_path / "killed", demo_candidates)
    import purecover.teacher.capture as capture

    real = capture.capture_token_lists
    calls = {"n": 0}

    def dies_on_the_second_question(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 2:  # batch_size 4, 5 positions: two capture calls a question
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(capture, "capture_token_lists", dies_on_the_second_question)
    with pytest.raises(KeyboardInterrupt):
        run_calibrate_stage(make_recipe(killed, tiny_teacher_dir, *IN_CONTEXT), show_progress=False)
    assert len((killed / "bias_in_context.jsonl").read_text().splitlines()) == 1 and not (killed / "bias.json").exists()
    monkeypatch.setattr(capture, "capture_token_lists", real)
    summary = run_calibrate_stage(make_recipe(killed, tiny_teacher_dir, *IN_CONTEXT), show_progress=False)
    assert summary.in_context.resumed == 1 and summary.in_context.sequences == 5
    a, b = (json.loads((r / "bias.json").read_text())["bias"] for r in (whole, killed))
    assert a == b


def test_model_steps_write_a_new_reply_per_replaced_set(tmp_path, demo_candidates, tiny_teacher_dir,
                                                        generation_prompts):
    """steps: model: every (question, position) gets its own teacher reply over the set with the generic paragraph
    at that position; unparsable replies of the random teacher are counted as fallbacks."""
    seen = generation_prompts
    run = fresh_run(tmp_path, demo_candidates)
    overrides = [o for o in IN_CONTEXT if o != "teacher.steps=oracle"] + ["teacher.steps=model", "teacher.backend=hf"]
    summary = run_calibrate_stage(make_recipe(run, tiny_teacher_dir, *overrides), show_progress=False)
    assert len(seen) == 10 and len(set(seen)) == 10
    assert all(p.count(icc.GENERIC_PARAGRAPH[:40]) == 1 for p in seen)
    assert summary.in_context.sequences == 10 and 0 <= summary.in_context.fallback <= 10
    assert json.loads((run / "bias.json").read_text())["keys"]["procedure"].startswith("in_context:steps=model:")


def _with_steps(qid: str, steps: list[str]):
    from purecover.records import CandidateRecord

    return CandidateRecord.model_validate({"qid": qid, "question": f"question {qid}?", "answers": ["a"], "docs": [],
                                           "gold_doc_ids": [], "oracle_steps": steps})


def test_auto_steps_take_oracle_steps_where_a_question_has_them_and_ask_the_teacher_elsewhere():
    from purecover.teacher.parsing import ParsedReply

    records = [_with_steps("a", ["step one"]), _with_steps("b", []), _with_steps("c", ["  "]),
               _with_steps("d", ["x", "y"])]
    assert [icc.writes_own_steps("auto", r) for r in records] == [False, True, True, False]  # blank steps: none
    assert all(icc.writes_own_steps("model", r) for r in records)
    assert not any(icc.writes_own_steps("oracle", r) for r in records)
    asked: list[list[str]] = []

    def model(rs):
        asked.append([r.qid for r in rs])
        return [ParsedReply([f"own {r.qid}"], "z") for r in rs]

    got = icc.mixed_steps("auto", icc.oracle_steps(5), model)(records)
    assert asked == [["b", "c"]]  # one call, only the questions without oracle steps
    assert [p.steps for p in got] == [["step one"], ["own b"], ["own c"], ["x", "y"]]  # in the records' order
    assert [p.steps for p in icc.mixed_steps("auto", icc.oracle_steps(5), None)(records[:1])] == [["step one"]]
