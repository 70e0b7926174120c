"""teacher.attention_layout plain: the released code's separate attention pass (docs/paper/released-code.md).

The text is checked against the layout read from the code (documents as "[Doc i]" lines, "Query:", "Answer:", the
steps on their own lines, no chat template or instructions); the label stage's stored attention against eager
attention over that text, averaged over all layers and heads; and the calibration runs in the same layout, under
a key of its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from purecover.records import CandidateDoc
from purecover.teacher.calibrate_stage import run_calibrate_stage
from purecover.teacher.calibration import calibration_sequence
from purecover.teacher.capture import SegmentSpec, reference_segment_attention
from purecover.teacher.label_stage import load_candidates, run_label_stage
from purecover.teacher.prompts import (
    ReasoningPrompt,
    build_attention_prompt,
    build_plain_prompt,
    build_teacher_sequence,
    template_key,
)
from tests.teacher.conftest import fresh_run, make_recipe

DOCS = [CandidateDoc(title="Paris", text="Paris is the capital of France."),
        CandidateDoc(title="", text="Water freezes at 0 degrees.")]


class _Bos:
    bos_token, bos_token_id = "<s>", 1


class _NoBos:
    bos_token, bos_token_id = None, None


def test_the_plain_text_is_the_released_codes_layout():
    text, spans = build_plain_prompt(_NoBos(), "  Where is Paris? ", DOCS)
    assert text == ("[Doc 0]Paris\nParis is the capital of France.\n[Doc 1]Water freezes at 0 degrees.\n"
                    "\nQuery:Where is Paris?\nAnswer:")
    assert [text[a:b] for a, b in spans] == ["Paris\nParis is the capital of France.", "Water freezes at 0 degrees."]
    bos_text, bos_spans = build_plain_prompt(_Bos(), "Where is Paris?", DOCS)
    assert bos_text == "<s>" + text and [bos_text[a:b] for a, b in bos_spans] == [text[a:b] for a, b in spans]
    plain = ReasoningPrompt.default()
    plain = ReasoningPrompt(plain.template, plain.system, plain.source, plain.max_steps, "plain")
    assert build_attention_prompt(_NoBos(), "Where is Paris?", DOCS, plain) == (text, spans)
    with pytest.raises(ValueError, match="attention_layout 'json'"):
        ReasoningPrompt(plain.template, attention_layout="json")


def test_the_layout_is_part_of_the_template_key_and_chat_keeps_its_old_key():
    chat = ReasoningPrompt.default()
    plain = ReasoningPrompt(chat.template, chat.system, chat.source, chat.max_steps, "plain")
    assert template_key(None, plain) != template_key(None, chat)
    assert template_key(None, chat) == template_key(None, ReasoningPrompt.default())


def test_plain_labels_equal_eager_attention_over_the_plain_text(tmp_path, demo_candidates, tiny_teacher_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = fresh_run(tmp_path, demo_candidates)
    recipe = make_recipe(run, tiny_teacher_dir, "teacher.attention_layout=plain", "teacher.layers=all",
                         "teacher.objective=released_code", "teacher.budget=20", "teacher.min_select=0",
                         "teacher.lam=0.3")
    cal = run_calibrate_stage(recipe, show_progress=False)
    chat_key = make_recipe(run, tiny_teacher_dir, "teacher.layers=all")
    assert cal.keys.template == template_key(AutoTokenizer.from_pretrained(tiny_teacher_dir),
                                             ReasoningPrompt.from_config(recipe.teacher))
    assert cal.keys.template != template_key(AutoTokenizer.from_pretrained(tiny_teacher_dir),
                                             ReasoningPrompt.from_config(chat_key.teacher))
    run_label_stage(recipe, show_progress=False)
    tok = AutoTokenizer.from_pretrained(tiny_teacher_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_teacher_dir, dtype=torch.float32, attn_implementation="eager")
    cands = {c.qid: c for c in load_candidates(run / "candidates.jsonl")}
    records = [json.loads(line) for line in (run / "labels.jsonl").read_text().splitlines()]
    assert records
    for rec in records:
        cand = cands[rec["qid"]]
        text, spans = build_plain_prompt(tok, cand.question, cand.docs)
        assert "Query:" in text and "<|im_start|>" not in text  # no chat template, no instructions
        seq = build_teacher_sequence(tok, text, spans, rec["steps"], rec["answer"])
        ids = torch.tensor([seq.input_ids])
        with torch.no_grad():
            att = model(input_ids=ids, output_attentions=True).attentions
        spec = SegmentSpec.of([*seq.step_spans, seq.answer_span], [*seq.doc_spans, *seq.step_spans])
        (ref,) = reference_segment_attention(att, None, [spec], layers="all")
        n = len(rec["steps"])
        np.testing.assert_allclose(np.array(rec["attention"]["step_doc"]), ref[:n, : len(cand.docs)].numpy(),
                                   rtol=2e-3, atol=1e-7)
        assert len(rec["selected"]) <= 2 * n


def test_the_calibration_runs_in_the_plain_layout(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir)
    chat = ReasoningPrompt.default()
    plain = ReasoningPrompt(chat.template, chat.system, chat.source, chat.max_steps, "plain")
    seq = calibration_sequence(tok, [20, 20, 20], plain)
    assert seq.text.startswith("[Doc 0]") and "\nQuery:" in seq.text and "[Doc 2]" in seq.text
    assert chat.system not in seq.text
    assert [b - a for a, b in seq.doc_spans] == [20, 20, 20]
