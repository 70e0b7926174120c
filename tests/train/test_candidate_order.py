"""Candidate-order augmentation (student.candidate_shuffles): labels follow their passages, orders are seeded,
views differ, the held-out splits keep retrieval order, and the losses read the permuted indices."""

from __future__ import annotations

import json

import pytest

from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import end_token_id
from purecover.records import CandidateDoc
from purecover.train.data import (
    LabelledQuestion,
    SelectorCollator,
    candidate_order,
    load_training_examples,
    read_labelled_questions,
    render_examples,
    shuffled_views,
    split_examples,
    training_splits,
)
from purecover.train.losses import ReplyFormat
from tests.train.test_data import label, write

K = 8
PINNED_ORDER = [5, 1, 2, 4, 6, 3, 0, 7]  # candidate_order("q0", 8, seed 0, view 0)
WORDS = ["apple", "river", "castle", "violin", "desert", "harbour", "comet", "garden"]


@pytest.fixture(scope="module")
def tok(sample_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(sample_dir / "qwen2_tokenizer")


def distinct_docs(qid: str, n: int = K) -> list[dict]:
    """Passages that each say something different, so a passage can be recognised in the rendered prompt."""
    return [{"doc_id": f"d{k}", "title": f"Title {WORDS[k]}", "text": f"All about the {WORDS[k]} {qid}."}
            for k in range(n)]


def labelled_files(tmp_path, n_questions: int = 40):
    cands = [{"qid": f"q{i}", "question": f"Question {i}?", "answers": ["A"], "docs": distinct_docs(f"q{i}")}
             for i in range(n_questions)]
    labels = [label(f"q{i}", [i % K, (i + 3) % K]) for i in range(n_questions)]
    return write(tmp_path, cands, labels)


def shown_passage(prompt_text: str, scheme: IdentifierScheme, slot: int) -> str:
    """The title of the passage the prompt shows behind identifier `slot` (``\\nA: Title apple\\n...``)."""
    head = f"\n{scheme.labels[slot]}: "
    start = prompt_text.index(head, prompt_text.index("Passages:\n") - 1) + len(head)
    return prompt_text[start:prompt_text.index("\n", start)]


def test_labels_follow_their_passages_under_a_permutation(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, K)
    (q,), _ = read_labelled_questions(*write(tmp_path, [{"qid": "a", "question": "Which?", "answers": ["x"],
                                                         "docs": distinct_docs("a")}], [label("a", [5, 1, 6])]))
    order = [3, 7, 5, 0, 6, 1, 4, 2]  # shown position i holds candidate order[i]
    p = q.permuted(order)
    assert p.order == tuple(order) and p.selected == (2, 5, 4)  # candidate 5 is shown at 2, 1 at 5, 6 at 4
    # each selected index points, in the teacher's pick order, at the very passage it pointed at before
    assert [p.docs[k].doc_id for k in p.selected] == [q.docs[k].doc_id for k in q.selected] == ["d5", "d1", "d6"]
    # permuting again composes: order maps each shown position to its candidates.jsonl position
    pp = p.permuted([1, 0, 2, 3, 4, 5, 6, 7])
    assert pp.order == (7, 3, 5, 0, 6, 1, 4, 2) and [pp.docs[k].doc_id for k in pp.selected] == ["d5", "d1", "d6"]

    (ex,) = render_examples([p], tok, scheme, 64)
    (plain,) = render_examples([q], tok, scheme, 64)
    assert ex.order == order and plain.order is None and ex.input_ids != plain.input_ids
    text = tok.decode(ex.input_ids)
    # identifier i labels the i-th passage shown; the reply's identifiers name the teacher's passages
    assert [shown_passage(text, scheme, i) for i in range(K)] == [f"Title {WORDS[k]}" for k in order]
    fmt = ReplyFormat(tuple(scheme.token_ids), int(scheme.separator_id), end_token_id(tok))
    reply = SelectorCollator()([ex])["selected"][0]  # what the trainer hands to the losses
    assert reply == [2, 5, 4]
    named = [scheme.labels[scheme.token_ids.index(t)] for t in fmt.target(reply) if t in scheme.token_ids]
    assert [shown_passage(text, scheme, scheme.labels.index(c)) for c in named] == \
        ["Title harbour", "Title river", "Title comet"]  # WORDS[5], WORDS[1], WORDS[6]


def test_permuted_rejects_what_is_not_a_permutation():
    q = LabelledQuestion("a", "Q?", tuple(CandidateDoc(doc_id=f"d{k}", text="t") for k in range(3)), (0,))
    for bad in ([0, 1], [0, 0, 1], [0, 1, 3]):
        with pytest.raises(ValueError, match="'a': order .* is not a permutation of its 3 candidate positions"):
            q.permuted(bad)


def test_orders_are_seeded_and_the_same_on_every_load(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, K)
    files = labelled_files(tmp_path)

    def load(seed: int, shuffles: int = 2):
        questions, _ = read_labelled_questions(*files)
        return training_splits(questions, tok, scheme, 64, eval_fraction=0.3, calibration_share=0.5, seed=seed,
                               candidate_shuffles=shuffles)

    first, again = load(0), load(0)
    assert [[(e.qid, e.order, e.selected, e.input_ids) for e in part] for part in first] == \
        [[(e.qid, e.order, e.selected, e.input_ids) for e in part] for part in again]
    other = load(1)[0]
    common = {e.qid for e in first[0]} & {e.qid for e in other}
    assert common  # seed 1 draws another split, but some questions train under both seeds
    orders_0 = {(e.qid, tuple(e.order)) for e in first[0] if e.qid in common}
    orders_1 = {(e.qid, tuple(e.order)) for e in other if e.qid in common}
    assert orders_0.isdisjoint(orders_1)  # another seed, other orders
    # view v of a question is candidate_order(qid, K, seed, v): a pure function of (seed, view, qid), not of
    # the file order, the split or the other questions
    train = first[0]
    for first_view, second_view in zip(train[::2], train[1::2]):
        assert first_view.qid == second_view.qid
        assert first_view.order == candidate_order(first_view.qid, K, 0, 0)
        assert second_view.order == candidate_order(first_view.qid, K, 0, 1)


def test_views_differ_and_training_is_really_shuffled(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, K)
    questions, _ = read_labelled_questions(*labelled_files(tmp_path))
    views = shuffled_views(questions, 3, seed=0)
    assert len(views) == 3 * len(questions)
    assert [v.qid for v in views[:3]] == ["q0"] * 3  # question-major: a question's views side by side
    for i in range(len(questions)):
        orders = [views[3 * i + v].order for v in range(3)]
        assert all(sorted(o) == list(range(K)) for o in orders)
        assert len(set(orders)) == 3, orders  # 8! orders: three views of a question are three orders
    assert len({v.order for v in views}) > 0.9 * len(views)  # and questions do not share one order
    identity = tuple(range(K))
    shuffled = [v for v in views if v.order != identity]
    assert len(shuffled) == len(views)  # a no-op shuffle would leave every order the identity
    moved = [v for v in views if v.selected != questions[int(v.qid[1:])].selected]
    assert len(moved) > 0.8 * len(views)  # and the label indices move with their passages
    plain, _ = load_training_examples(*labelled_files(tmp_path), tok, scheme, 64)
    rendered = render_examples(views[:6], tok, scheme, 64)
    assert all(r.input_ids != plain[int(r.qid[1:])].input_ids for r in rendered)
    assert shuffled_views(questions, 0, seed=0) == questions  # 0: retrieval order, untouched
    with pytest.raises(ValueError, match="shuffles must be >= 0"):
        shuffled_views(questions, -1, seed=0)


def test_heldout_splits_keep_retrieval_order(tmp_path, tok):
    scheme = IdentifierScheme().check(tok, K)
    files = labelled_files(tmp_path)
    plain, _ = load_training_examples(*files, tok, scheme, 64)
    questions, _ = read_labelled_questions(*files)
    train, calib, test = training_splits(questions, tok, scheme, 64, eval_fraction=0.3, calibration_share=0.5,
                                         seed=0, candidate_shuffles=2)
    ref_train, ref_calib, ref_test = split_examples(plain, 0.3, seed=0, calibration_share=0.5)
    assert calib and test
    # calibration and test: exactly the retrieval-order examples (same prompts, same labels)
    assert [(e.qid, e.input_ids, e.selected, e.order) for e in calib] == \
        [(e.qid, e.input_ids, e.selected, None) for e in ref_calib]
    assert [(e.qid, e.input_ids, e.selected, e.order) for e in test] == \
        [(e.qid, e.input_ids, e.selected, None) for e in ref_test]
    # training: two shuffled views of each training question, none of a held-out question
    assert [e.qid for e in train] == [e.qid for e in ref_train for _ in range(2)]
    assert all(e.order is not None for e in train)
    # with 0 the training split is the retrieval-order one too
    zero = training_splits(questions, tok, scheme, 64, eval_fraction=0.3, calibration_share=0.5, seed=0,
                           candidate_shuffles=0)[0]
    assert [(e.qid, e.input_ids, e.selected) for e in zero] == [(e.qid, e.input_ids, e.selected) for e in ref_train]


@pytest.mark.slow
def test_train_stage_feeds_the_losses_the_shuffled_views(tmp_path, monkeypatch):
    """The real train stage: every training batch that reaches the loss is one of the seeded views (prompt and
    permuted labels together), evaluation batches are retrieval-order calibration questions, and the summary
    counts questions and examples."""
    from purecover.config import load_recipe
    from purecover.train import trainer as trainer_module
    from purecover.train.train_stage import run_train_stage
    from tests.train.helpers import labelled_overrides, labelled_run

    tiny, run = labelled_run(tmp_path)
    seen: list[tuple[bool, tuple[int, ...], tuple[int, ...]]] = []
    real = trainer_module.selector_loss

    def spy(model, prompts, selected, *args, **kwargs):
        for p, s in zip(prompts, selected):
            seen.append((model.training, tuple(p.tolist()), tuple(s)))
        return real(model, prompts, selected, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "selector_loss", spy)
    recipe = load_recipe(None, [f"run_dir={run}", *labelled_overrides(tiny), f"student.model={tiny}", "student.dtype=float32",
                                "student.max_passage_tokens=32", "student.candidate_shuffles=2",
                                "student.eval_fraction=0.5", "student.training.max_steps=6",
                                "student.training.save_steps=100", "student.training.eval_strategy=steps",
                                "student.training.eval_steps=6"])
    summary = run_train_stage(recipe, show_progress=False).to_json_dict()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    cands = [json.loads(line) for line in (run / "candidates.jsonl").read_text().splitlines()]
    scheme = IdentifierScheme().check(tokenizer, max(len(c["docs"]) for c in cands))
    questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
    train, calib, _test = training_splits(questions, tokenizer, scheme, 32, eval_fraction=0.5,
                                          calibration_share=0.5, seed=recipe.seed, candidate_shuffles=2)
    views = {(tuple(e.input_ids), tuple(e.selected)) for e in train}
    heldout = {(tuple(e.input_ids), tuple(e.selected)) for e in calib}
    trained = [(p, s) for training, p, s in seen if training]
    evaluated = [(p, s) for training, p, s in seen if not training]
    assert len(trained) == 6 and all(t in views for t in trained)
    assert evaluated and all(e in heldout for e in evaluated)
    assert summary["candidate_shuffles"] == 2 and summary["train_examples"] == 2 * summary["train_questions"]
    assert summary["train_questions"] == len({e.qid for e in train}) and summary["calib_questions"] == len(calib)


def test_candidate_order_is_pinned_and_uniform():
    """The orders of existing runs must not move (a resumed run renders them again): pinned values; and every
    order of 3 candidates comes up about equally often."""
    assert candidate_order("q0", 8, 0, 0) == PINNED_ORDER
    counts: dict[tuple[int, ...], int] = {}
    for i in range(6000):
        o = tuple(candidate_order(f"q{i}", 3, 0, 0))
        counts[o] = counts.get(o, 0) + 1
    assert len(counts) == 6 and all(800 <= c <= 1200 for c in counts.values()), counts
