"""Joining candidates and labels, prompts, identifiers, the held-out split and the collator."""

from __future__ import annotations

import json

import pytest

from purecover.models.identifiers import IdentifierError, IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt, end_token_id
from purecover.records import LabelRecord
from purecover.train.data import ExampleCounts, SelectorCollator, load_training_examples, split_examples


@pytest.fixture(scope="module")
def tok(sample_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(sample_dir / "qwen2_tokenizer")


def docs(n, words=5):
    return [{"doc_id": f"d{k}", "title": f"Title {k}", "text": " ".join(["word"] * words) + f" {k}."} for k in range(n)]


def label(qid, selected, status="ok", ids=None):
    """A labels.jsonl line as the label stage writes it (doc ids of `docs`, unless `ids`)."""
    if status == "error":
        return LabelRecord.failed(qid, "RuntimeError: x", bias_key=None, teacher={}).to_json_dict()
    return LabelRecord(qid=qid, selected=selected, selected_doc_ids=[f"d{k}" for k in selected] if ids is None else ids,
                       gains=[0.5] * len(selected), objective=0.5, steps=["s"], answer="a", e=[1.0], W=[[0.5]] * 4,
                       bias_key=None, status=status, reason=None, teacher={}).to_json_dict()


def write(tmp_path, cands, labels):
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cands))
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    return tmp_path / "c.jsonl", tmp_path / "l.jsonl"


def test_identifiers_are_single_tokens_in_prompt_and_reply(tok):
    scheme = IdentifierScheme().check(tok, 20)
    prompt = build_selector_prompt(tok, "Which?", docs(20), scheme, max_passage_tokens=32)
    for label, tid in zip(scheme.labels, scheme.token_ids):
        # "\nA:" in the prompt: the identifier is the same single token as in the reply.
        assert f"\n{label}: Title" in prompt.text
        assert tid in prompt.input_ids
    reply = scheme.target_ids([3, 0, 7], end_token_id(tok))
    assert tok.decode(reply) == "D\nA\nH<|im_end|>"
    assert tok(tok.decode(reply[:-1]), add_special_tokens=False)["input_ids"] == reply[:-1]


def test_scheme_capacity_and_letters52(tok):
    with pytest.raises(IdentifierError, match="27 candidates but the 'letters' identifier scheme has only 26"):
        IdentifierScheme().check(tok, 27)
    assert len(IdentifierScheme("letters52").check(tok, 52).token_ids) == 52


def test_passage_budget_never_cuts_identifiers(tok):
    scheme = IdentifierScheme().check(tok, 3)
    long = [{"title": "T", "text": "alpha " * 500}] * 3
    prompt = build_selector_prompt(tok, "Q?", long, scheme, max_passage_tokens=20)
    assert len(prompt.input_ids) < 200
    assert all(f"\n{label}: T" in prompt.text for label in "ABC")


def test_join_and_errors(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, 4)
    cands = [{"qid": q, "question": "Q?", "answers": ["A"], "docs": docs(4)} for q in ("a", "b", "c")]
    labels = [label("a", [2, 0]), label("b", [], "error"), label("c", [1], "fallback")]
    ex, counts = load_training_examples(*write(tmp_path, cands, labels), tok, scheme, 64)
    assert [e.qid for e in ex] == ["a", "c"] and ex[0].selected == [2, 0] and ex[0].n_docs == 4
    assert counts == ExampleCounts(labels=3, used=2, skipped_error=1)
    bad_cases = [
        ([label("zzz", [0])], "l.jsonl:1: field 'qid': 'zzz' is not in"),
        ([label("a", [4])], r"field 'selected': positions \[4\] outside the 4 candidates"),
        ([label("a", [1, 1])], "field 'selected': repeated positions"),
        ([label("a", [1], ids=["d3"])], "field 'selected_doc_ids': do not match the candidates"),
        ([label("a", [0]), label("a", [0])], "l.jsonl:2: field 'qid': duplicate"),
        ([{k: v for k, v in label("a", [0]).items() if k != "qid"}], "l.jsonl:1: field 'qid': missing"),
        ([{**label("a", [0]), "selected": ["0"]}], r"field 'selected\[0\]': must be an integer"),
        ([{**label("a", [0]), "status": "done"}], "field 'status': must be 'ok', 'fallback' or 'error'"),
    ]
    for labels_bad, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            load_training_examples(*write(tmp_path, cands, labels_bad), tok, scheme, 64)


def test_split_is_deterministic_and_collator_shapes(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, 4)
    cands = [{"qid": f"q{i}", "question": "Q?", "answers": ["A"], "docs": docs(4)} for i in range(50)]
    labels = [label(f"q{i}", [i % 4]) for i in range(50)]
    ex, _ = load_training_examples(*write(tmp_path, cands, labels), tok, scheme, 64)
    train, calib, test = split_examples(ex, 0.2, seed=0)
    again = split_examples(ex, 0.2, seed=0)
    assert [[e.qid for e in part] for part in again] == [[e.qid for e in part] for part in (train, calib, test)]
    held = calib + test
    assert 3 <= len(held) <= 20 and calib and test  # three splits: train, calibration (τ3), test
    assert {e.qid for e in train} | {e.qid for e in held} == {e.qid for e in ex}
    assert not ({e.qid for e in train} & {e.qid for e in held}) and not ({e.qid for e in calib} & {e.qid for e in test})
    assert split_examples(ex, 0.2, seed=1)[1] != calib
    # the calibration share moves questions between calib and test only, never into training
    narrow, wide = (split_examples(ex, 0.2, seed=0, calibration_share=s) for s in (0.0, 1.0))
    assert [e.qid for e in narrow[0]] == [e.qid for e in wide[0]] == [e.qid for e in train]
    assert narrow[1] == [] and wide[2] == []  # share 0: every held-out question tests; share 1: all calibrate
    assert {e.qid for e in narrow[2]} == {e.qid for e in wide[1]} == {e.qid for e in held}
    batch = SelectorCollator()(ex[:3])
    assert [p.tolist() for p in batch["prompts"]] == [e.input_ids for e in ex[:3]]
    assert batch["selected"] == [[0], [1], [2]] and batch["n_docs"] == [4, 4, 4]


def test_top_k_target_orders_by_gain_and_pads_in_retrieval_order(tmp_path):
    """student.target: top_k (the released code): the k picks with the highest gains, then unselected candidates in
    retrieval order up to k; student.target: set keeps the label as picked."""
    from purecover.train.data import read_labelled_questions, top_k_target

    assert top_k_target([4, 1, 7], [0.2, 0.9, 0.5], n_docs=10, k=5) == (1, 7, 4, 0, 2)
    assert top_k_target([4, 1, 7], [0.2, 0.9, 0.5], n_docs=10, k=2) == (1, 7)
    assert top_k_target([3, 2], [0.4, 0.4], n_docs=3, k=5) == (3, 2, 0)  # ties: the earlier pick; capped at n_docs
    assert top_k_target([], [], n_docs=4, k=2) == (0, 1)
    cands = [{"qid": "a", "question": "Q?", "answers": ["A"], "docs": docs(6)}]
    line = {**label("a", [4, 1]), "gains": [0.1, 0.7]}
    paths = write(tmp_path, cands, [line])
    as_set, _ = read_labelled_questions(*paths)
    top, _ = read_labelled_questions(*paths, target="top_k", target_k=3)
    assert as_set[0].selected == (4, 1) and top[0].selected == (1, 4, 0)
    with pytest.raises(ValueError, match="target 'all'"):
        read_labelled_questions(*paths, target="all")
