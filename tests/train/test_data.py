"""Joining candidates and labels, prompts, identifiers, the held-out split and the collator."""

from __future__ import annotations

import json

import pytest

from purecover.models.identifiers import IdentifierError, IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt, end_token_id
from purecover.train.data import SelectorCollator, load_training_examples, split_examples


@pytest.fixture(scope="module")
def tok(sample_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(sample_dir / "qwen2_tokenizer")


def docs(n, words=5):
    return [{"doc_id": f"d{k}", "title": f"Title {k}", "text": " ".join(["word"] * words) + f" {k}."} for k in range(n)]


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
    cands = [{"qid": q, "question": "Q?", "docs": docs(4)} for q in ("a", "b", "c")]
    labels = [{"qid": "a", "selected": [2, 0], "selected_doc_ids": ["d2", "d0"], "status": "ok"},
              {"qid": "b", "selected": [], "status": "error"},
              {"qid": "c", "selected": [1], "status": "fallback"}]
    ex, counts = load_training_examples(*write(tmp_path, cands, labels), tok, scheme, 64)
    assert [e.qid for e in ex] == ["a", "c"] and ex[0].selected == [2, 0] and ex[0].n_docs == 4
    assert counts == {"labels": 3, "used": 2, "skipped_error": 1}
    bad_cases = [
        ([{"qid": "zzz", "selected": [0]}], "'qid': 'zzz' is not in"),
        ([{"qid": "a", "selected": [4]}], r"positions \[4\] outside the 4 candidates"),
        ([{"qid": "a", "selected": [1, 1]}], "repeated positions"),
        ([{"qid": "a", "selected": [1], "selected_doc_ids": ["d3"]}], "do not match the candidates"),
        ([{"qid": "a", "selected": [0]}, {"qid": "a", "selected": [0]}], "l.jsonl:2: field 'qid': duplicate"),
        ([{"selected": [0]}], "field 'qid': missing"),
    ]
    for labels_bad, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            load_training_examples(*write(tmp_path, cands, labels_bad), tok, scheme, 64)


def test_split_is_deterministic_and_collator_shapes(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, 4)
    cands = [{"qid": f"q{i}", "question": "Q?", "docs": docs(4)} for i in range(50)]
    labels = [{"qid": f"q{i}", "selected": [i % 4]} for i in range(50)]
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
