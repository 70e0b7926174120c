"""In-context reranking (`purecover.eval.icr`, the `icr` and `icr_fused` baselines): exact token spans with and
without a chat template, scores equal to attention summed by hand from eager ``output_attentions`` on a tiny
random model, the content-free calibration, layer choice and fusion against brute force, and the methods end
to end through `make_baseline` and `select_for_methods`. Offline: tokenizers are trained on the spot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from purecover.config import ConfigError, load_recipe
from purecover.demo.offline_tokenizer import CHAT_TEMPLATE
from purecover.eval import icr as icr_module
from purecover.eval.baselines import ICRFusedRerank, ICRRerank, make_baseline
from purecover.eval.icr import (
    CONTENT_FREE_QUERY,
    build_icr_prompt,
    choose_fusion_weight,
    choose_icr_layers,
    fuse_with_rank,
    gold_positions,
    icr_scores,
    ranking_auc,
    resolve_icr_layers,
    standardise,
)
from purecover.models.selector_prompt import truncate_text
from purecover.records import CandidateDoc, CandidateRecord

QUESTION = "Which river flows through the town where Ada Brill was born?"
DOCS = [
    CandidateDoc(doc_id="d0", title="Ada Brill", text="Ada Brill was born in Tollbridge in 1841 and built a seed drill."),
    CandidateDoc(doc_id="d1", title="", text="The market sells clocks and bread on Sundays."),
    CandidateDoc(doc_id="d2", title="Tollbridge", text="Tollbridge is a town on the river Mirren, known for clocks."),
    CandidateDoc(doc_id="d3", title="Hollin hills", text="The Hollin hills rise west of the sea."),
]
LONG = CandidateDoc(doc_id="d4", title="Long", text=" ".join(["clockwork seed drill river town"] * 20))
EMPTY = CandidateDoc(doc_id="d5", title=None, text="")
WORDS = [QUESTION, CONTENT_FREE_QUERY, icr_module.ICR_HEADER, icr_module.ICR_INSTRUCTION, icr_module.QUERY_LABEL,
         "system user assistant You are a helpful assistant.", *(f"{d.title} {d.text}" for d in [*DOCS, LONG])]


def word_tokenizer(path, template: bool, bos: bool = False):
    from purecover.demo.tiny import build_word_tokenizer

    tok = build_word_tokenizer(path, WORDS, chat_template=CHAT_TEMPLATE if template else None)
    if bos:
        tok.add_special_tokens({"bos_token": "<bos>"})
    return tok


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory):
    return word_tokenizer(tmp_path_factory.mktemp("chat_tok"), template=True)


@pytest.fixture(scope="module")
def plain_tok(tmp_path_factory):
    return word_tokenizer(tmp_path_factory.mktemp("plain_tok"), template=False, bos=True)


@pytest.fixture(scope="module")
def bpe_tok(tmp_path_factory):
    """A byte-level BPE with a ChatML template (decode(encode(x)) == x), trained offline."""
    from transformers import AutoTokenizer

    from purecover.demo.offline_tokenizer import build_offline_tokenizer

    path = build_offline_tokenizer(tmp_path_factory.mktemp("bpe_tok"), WORDS * 4, vocab_size=500)
    return AutoTokenizer.from_pretrained(path)


def tiny_model(tokenizer, num_layers: int = 3):
    from purecover.demo.tiny import tiny_causal_lm

    model = tiny_causal_lm("qwen2", len(tokenizer), hidden_size=64, intermediate_size=96, num_layers=num_layers,
                           num_heads=4, num_kv_heads=2, max_position_embeddings=1024, seed=3)
    model.set_attn_implementation("sdpa")
    return model


def ids_of(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------- the prompt and its spans

def check_spans(tok, prompt, docs, question, max_tokens=192) -> None:
    """Every passage span holds exactly its (cut) body's ids, the query span the question's, in order."""
    assert len(prompt.passage_spans) == len(docs)
    for (a, b), d in zip(prompt.passage_spans, docs):
        body = truncate_text(tok, "\n".join(x for x in [(d.title or "").strip(), d.text.strip()] if x), max_tokens)
        assert list(prompt.input_ids[a:b]) == ids_of(tok, body)
    qa, qb = prompt.query_span
    assert list(prompt.input_ids[qa:qb]) == ids_of(tok, question)
    ends = [e for _, e in prompt.passage_spans]
    assert ends == sorted(ends) and ends[-1] <= qa < qb <= len(prompt.input_ids)


def test_spans_are_exact_with_a_chat_template(chat_tok, bpe_tok):
    for tok in (chat_tok, bpe_tok):
        prompt = build_icr_prompt(tok, QUESTION, DOCS)
        check_spans(tok, prompt, DOCS, QUESTION)
        assert prompt.text.startswith("<|im_start|>system\n") and prompt.text.endswith("<|im_start|>assistant\n")
        assert tok.convert_ids_to_tokens(prompt.input_ids[0]) == "<|im_start|>"
        tail = ids_of(tok, "<|im_start|>assistant\n")
        assert prompt.input_ids[-len(tail):] == tuple(tail)
    # the byte-level BPE decodes exactly: the spans are the passage bodies and the question, character for character
    prompt = build_icr_prompt(bpe_tok, QUESTION, DOCS)
    assert bpe_tok.decode(list(prompt.input_ids)) == prompt.text
    assert [bpe_tok.decode(list(prompt.input_ids[a:b])) for a, b in prompt.passage_spans] == [
        "Ada Brill\nAda Brill was born in Tollbridge in 1841 and built a seed drill.",
        "The market sells clocks and bread on Sundays.",
        "Tollbridge\nTollbridge is a town on the river Mirren, known for clocks.",
        "Hollin hills\nThe Hollin hills rise west of the sea."]
    assert bpe_tok.decode(list(prompt.input_ids[slice(*prompt.query_span)])) == QUESTION
    assert "[2] The market" in prompt.text and f"Query: {QUESTION}<|im_end|>" in prompt.text


def test_spans_are_exact_without_a_template(plain_tok):
    assert not getattr(plain_tok, "chat_template", None)
    prompt = build_icr_prompt(plain_tok, f"  {QUESTION} ", DOCS)
    check_spans(plain_tok, prompt, DOCS, QUESTION)
    assert prompt.input_ids[0] == plain_tok.bos_token_id  # the plain layout starts with the BOS token
    assert prompt.text.startswith(f"<bos>{icr_module.ICR_HEADER}\n\n[1] Ada Brill\n")
    assert prompt.text.endswith(f"Query: {QUESTION}\n\n")
    # dicts of candidates.jsonl render like CandidateDoc records
    as_dicts = build_icr_prompt(plain_tok, QUESTION, [d.model_dump() for d in DOCS])
    assert as_dicts == prompt


def test_passages_are_cut_and_empty_ones_have_empty_spans(chat_tok):
    prompt = build_icr_prompt(chat_tok, QUESTION, [DOCS[0], LONG, EMPTY], max_passage_tokens=8)
    check_spans(chat_tok, prompt, [DOCS[0], LONG, EMPTY], QUESTION, max_tokens=8)
    sizes = [b - a for a, b in prompt.passage_spans]
    assert sizes == [8, 8, 0]
    with pytest.raises(ValueError, match="question is empty"):
        build_icr_prompt(chat_tok, "  ", DOCS)
    with pytest.raises(ValueError, match="max_passage_tokens"):
        build_icr_prompt(chat_tok, QUESTION, DOCS, max_passage_tokens=0)


# ----------------------------------------------------------------------------- scores against eager attention

def eager_mass(model, prompt, layers) -> np.ndarray:
    """(len(layers), K) by hand: eager attention of the unpadded prompt, question rows, passage columns summed,
    mean over heads and question tokens."""
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            att = model(input_ids=torch.tensor([prompt.input_ids]), output_attentions=True, use_cache=False).attentions
    finally:
        model.set_attn_implementation("sdpa")
    qa, qb = prompt.query_span
    out = np.zeros((len(layers), len(prompt.passage_spans)))
    for i, layer in enumerate(layers):
        a = att[layer][0].double()  # (H, T, T)
        for k, (s, e) in enumerate(prompt.passage_spans):
            out[i, k] = a[:, qa:qb, s:e].sum(dim=-1).mean().item() if e > s else 0.0
    return out


@pytest.mark.parametrize("template", [True, False])
def test_scores_equal_eager_attention_summed_by_hand(chat_tok, plain_tok, template):
    tok = chat_tok if template else plain_tok
    model = tiny_model(tok)
    docs = [*DOCS, EMPTY, LONG]
    real = build_icr_prompt(tok, QUESTION, docs, max_passage_tokens=24)
    free = build_icr_prompt(tok, CONTENT_FREE_QUERY, docs, max_passage_tokens=24)
    assert real.passage_spans == free.passage_spans  # same passages, same place: only the query differs
    got = icr_scores(model, tok, QUESTION, docs, max_passage_tokens=24)
    assert got.layers == (0, 1, 2)
    want_q, want_free = eager_mass(model, real, [0, 1, 2]), eager_mass(model, free, [0, 1, 2])
    np.testing.assert_allclose(got.question, want_q, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.content_free, want_free, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.calibrated, want_q - want_free, atol=1e-6)
    np.testing.assert_allclose(got.score(), (want_q - want_free).sum(axis=0), atol=1e-6)
    assert got.question.shape == (3, len(docs)) and np.all(got.question[:, 4] == 0)  # the empty passage
    assert np.all(got.question >= 0) and np.all(got.question.sum(axis=1) <= 1 + 1e-9)  # shares of attention
    assert not np.allclose(got.content_free, got.question)  # the calibration pass is its own
    # chosen layers (negative from the end) are read alone, in ascending order, and give the same rows
    some = icr_scores(model, tok, QUESTION, docs, [-1, 0], max_passage_tokens=24)
    assert some.layers == (0, 2)
    np.testing.assert_allclose(some.calibrated, got.calibrated[[0, 2]], atol=1e-9)
    np.testing.assert_allclose(some.score([2]), got.calibrated[2], atol=1e-9)
    with pytest.raises(ValueError, match=r"ICR layers \[1\] were not read"):
        some.score([1])


def test_layer_settings_and_long_prompts(chat_tok):
    assert resolve_icr_layers(4, "all") == (0, 1, 2, 3)
    assert resolve_icr_layers(4, [-1, 3, 0]) == (0, 3)
    for bad, message in [([4], "eval.icr_layers: layer indices .4. out of range for a model with 4 layers"),
                         ([], "eval.icr_layers must be 'all' or a non-empty list"),
                         ("full_attention", "eval.icr_layers must be 'all' or a list")]:
        with pytest.raises(ValueError, match=message):
            resolve_icr_layers(4, bad)
    from purecover.demo.tiny import tiny_causal_lm

    short = tiny_causal_lm("qwen2", len(chat_tok), num_layers=1, max_position_embeddings=32)
    with pytest.raises(ValueError, match="exceeds the model's 32 positions.*eval.icr_max_passage_tokens"):
        icr_scores(short, chat_tok, QUESTION, DOCS)


# ----------------------------------------------------------------------------- AUC, layer choice and fusion

def brute_auc(scores, gold) -> float | None:
    pos = [scores[i] for i in range(len(scores)) if i in gold]
    neg = [scores[i] for i in range(len(scores)) if i not in gold]
    if not pos or not neg:
        return None
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


def test_ranking_auc_and_standardise():
    assert ranking_auc([3, 1, 2], [0]) == 1.0
    assert ranking_auc([1, 3, 2], [0]) == 0.0
    assert ranking_auc([2, 2, 1], [0]) == 0.75  # a tie counts one half
    assert ranking_auc([1, 2], []) is None and ranking_auc([1, 2], [0, 1]) is None
    with pytest.raises(ValueError, match="gold position 5"):
        ranking_auc([1, 2], [5])
    z = standardise([1.0, 2.0, 3.0])
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1) < 1e-12
    assert standardise([2.0, 2.0]).tolist() == [0.0, 0.0] and standardise([]).size == 0
    rec = CandidateRecord(qid="q", question=QUESTION, answers=["Mirren"], docs=DOCS, gold_doc_ids=["d2", "d0", "x"])
    assert gold_positions(rec) == [0, 2]


def random_questions(seed: int, n_layers: int, n: int = 12):
    rng = np.random.default_rng(seed)
    per_layer, gold = [], []
    for _ in range(n):
        k = int(rng.integers(3, 9))
        per_layer.append(rng.normal(size=(n_layers, k)))
        gold.append(sorted(rng.choice(k, size=int(rng.integers(1, 3)), replace=False).tolist()))
    per_layer.append(rng.normal(size=(n_layers, 4)))  # no gold: left out of the mean
    gold.append([])
    per_layer.append(rng.normal(size=(n_layers, 2)))  # only gold: left out too
    gold.append([0, 1])
    return per_layer, gold


def brute_layer_table(per_layer, gold, windows=True):
    """Every candidate layer set (rows) in the documented order, with its mean AUC, by plain loops."""
    n = per_layer[0].shape[0]
    sets = [tuple(range(n))] + ([(i,) for i in range(n)] if n > 1 else [])
    if windows:
        sets += [tuple(range(a, a + w)) for w in range(2, n) for a in range(n - w + 1)]
    table = []
    for rows in sets:
        aucs = [brute_auc([sum(float(s[r, k]) for r in rows) for k in range(s.shape[1])], set(g))
                for s, g in zip(per_layer, gold)]
        aucs = [a for a in aucs if a is not None]
        table.append((rows, sum(aucs) / len(aucs)))
    return table


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_choice_is_the_brute_force_best(seed):
    per_layer, gold = random_questions(seed, n_layers=6)
    got = choose_icr_layers(per_layer, gold)
    table = brute_layer_table(per_layer, gold)
    assert [rows for rows, _ in got.table] == [rows for rows, _ in table]
    np.testing.assert_allclose([a for _, a in got.table], [a for _, a in table], atol=1e-12)
    best = max(range(len(table)), key=lambda i: (table[i][1], -i))  # the first of the maxima
    assert got.layers == table[best][0] and got.auc == pytest.approx(table[best][1])
    assert got.questions == 12 and len(got.table) == 6 * 7 // 2
    assert got.setting == ("all" if best == 0 else list(got.layers))
    singles = choose_icr_layers(per_layer, gold, windows=False)
    assert len(singles.table) == 7
    assert singles.auc == pytest.approx(max(a for _, a in brute_layer_table(per_layer, gold, windows=False)))
    # layer ids name the rows: a list of them is the setting, even for every row
    ids = [10, 11, 12, 13, 14, 15]
    named = choose_icr_layers(per_layer, gold, layer_ids=ids)
    assert named.layers == tuple(ids[r] for r in got.layers) and named.setting == list(named.layers)


def test_layer_choice_finds_the_informative_layer_and_prefers_earlier_sets_on_ties():
    rng = np.random.default_rng(5)
    per_layer, gold = [], []
    for _ in range(20):
        s = rng.normal(size=(4, 6))
        s[2, 1] = 10.0  # only layer 2 ranks the gold passage first
        s[:, 1] -= np.where(np.arange(4) == 2, 0, 12.0)
        per_layer.append(s)
        gold.append([1])
    got = choose_icr_layers(per_layer, gold)
    assert got.layers == (2,) and got.auc == 1.0
    flat = [np.ones((3, 4))] * 2  # every set ties: the first, all, wins
    assert choose_icr_layers(flat, [[0], [1]]).setting == "all"
    with pytest.raises(ValueError, match="no calibration question has both gold and non-gold"):
        choose_icr_layers([np.ones((2, 3))], [[]])
    with pytest.raises(ValueError, match=r"question 1 has scores of shape \(3, 3\)"):
        choose_icr_layers([np.ones((2, 3)), np.ones((3, 3))], [[0], [0]])


@pytest.mark.parametrize("seed", [0, 1])
def test_fusion_weight_is_the_brute_force_best(seed):
    per_layer, gold = random_questions(seed, n_layers=1, n=15)
    scores = [s[0] for s in per_layer]
    grid = (0.0, 0.5, 1.0, 3.0)
    got = choose_fusion_weight(scores, gold, grid)
    brute = []
    for w in grid:
        aucs = []
        for s, g in zip(scores, gold):
            zs = (s - s.mean()) / s.std()
            r = -np.arange(len(s), dtype=float)
            fused = [zs[k] + w * (r[k] - r.mean()) / r.std() for k in range(len(s))]
            a = brute_auc(fused, set(g))
            if a is not None:
                aucs.append(a)
        brute.append(sum(aucs) / len(aucs))
    np.testing.assert_allclose([a for _, a in got.table], brute, atol=1e-12)
    best = max(range(len(grid)), key=lambda i: (brute[i], -i))
    assert got.weight == grid[best] and got.auc == pytest.approx(brute[best]) and got.questions == 15
    # explicit ranks: the reversed positions make "retrieval" favour the last candidates
    ranks = [np.arange(len(s))[::-1].astype(float) for s in scores]
    rev = choose_fusion_weight(scores, gold, grid, ranks=ranks)
    assert rev.table[0] == got.table[0]  # weight 0 ignores the ranks


def test_fusion_ends_and_errors():
    icr = np.array([0.1, 0.5, -0.2, 0.3])
    assert np.argsort(-fuse_with_rank(icr, 0.0), kind="stable").tolist() == [1, 3, 0, 2]  # ICR alone
    assert np.argsort(-fuse_with_rank(icr, 1e6), kind="stable").tolist() == [0, 1, 2, 3]  # retrieval order
    np.testing.assert_allclose(fuse_with_rank(icr, 1.0), standardise(icr) + standardise(-np.arange(4.0)))
    with pytest.raises(ValueError, match="finite number >= 0"):
        fuse_with_rank(icr, -1.0)
    with pytest.raises(ValueError, match="3 ranks for 4 scores"):
        fuse_with_rank(icr, 1.0, ranks=[0, 1, 2])
    with pytest.raises(ValueError, match="grid must be non-empty"):
        choose_fusion_weight([icr], [[1]], grid=[])
    # a question where ICR alone ranks the gold last and retrieval ranks it first: a large weight wins
    s = [np.array([-1.0, 0.0, 1.0])] * 3
    assert choose_fusion_weight(s, [[0]] * 3).weight == 2.0  # the first weight of the grid that reaches AUC 1


# ----------------------------------------------------------------------------- the methods end to end

@pytest.fixture(scope="module")
def tiny_icr_dir(bpe_tok, tmp_path_factory):
    """A tiny random Qwen2 saved with the byte-level BPE (a word-level tokenizer saved beside a Qwen2 config would
    load back as a Qwen2Tokenizer)."""
    out = tmp_path_factory.mktemp("tiny_icr")
    tiny_model(bpe_tok).save_pretrained(out, safe_serialization=True)
    bpe_tok.save_pretrained(out)
    return out


RECORDS = [
    CandidateRecord(qid="q1", question=QUESTION, answers=["Mirren"], docs=DOCS, gold_doc_ids=["d0", "d2"]),
    CandidateRecord(qid="q2", question="Where do the Hollin hills rise?", answers=["west"], docs=DOCS[::-1]),
    CandidateRecord(qid="q3", question="No passages?", answers=["x"], docs=[]),
]


def test_icr_methods_order_by_their_scores(tiny_icr_dir, bpe_tok):
    sel = make_baseline("icr", model_name=str(tiny_icr_dir), layers=[1, -1], max_passage_tokens=16)
    assert isinstance(sel, ICRRerank) and sel._model is None  # the model loads lazily
    rec = RECORDS[0]
    ref = icr_scores(tiny_model(bpe_tok), bpe_tok, rec.question, rec.docs, "all", max_passage_tokens=16)
    want = ref.calibrated[[1, 2]].sum(axis=0)
    np.testing.assert_allclose(sel.scores(rec), want, atol=1e-9)
    order = [int(i) for i in np.argsort(-want, kind="stable")]
    assert sel.select(rec, None, None, 2) == order[:2] and sel.select(rec, None, None, 10) == order
    assert sel.select(RECORDS[2], None, None, 3) == []
    fused = make_baseline("icr_fused", model_name=str(tiny_icr_dir), layers=[1, -1], max_passage_tokens=16,
                          fusion_weight=2.0, share_with=sel)
    assert isinstance(fused, ICRFusedRerank) and fused.model is sel.model  # one model for both
    np.testing.assert_allclose(fused.scores(rec), fuse_with_rank(want, 2.0), atol=1e-9)
    # per_layer: every layer, for choose_icr_layers; the cache then holds them all
    assert sel.per_layer(rec, "all").layers == (0, 1, 2)
    with pytest.raises(ValueError, match="fusion_weight must be a finite number"):
        make_baseline("icr_fused", model_name="x", fusion_weight=-0.5)
    with pytest.raises(ValueError, match="bad arguments"):
        make_baseline("icr")  # model_name is required


def test_icr_methods_through_method_selection(tiny_icr_dir, tmp_path, monkeypatch):
    from purecover.eval.method_selection import select_for_methods
    from purecover.eval.methods import parse_methods

    calls = []
    real = icr_module.icr_scores

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(icr_module, "icr_scores", counting)
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"eval.icr_model={tiny_icr_dir}",
                                "eval.icr_layers=[0, 2]", "eval.icr_fusion_weight=0.5",
                                "eval.icr_max_passage_tokens=16", "eval.device=cpu"])
    specs = parse_methods(["icr", "icr_fused"])
    chosen, fallbacks, _ = select_for_methods(specs, [1, 3], RECORDS, recipe, tmp_path, show_progress=False)
    assert sorted(calls) == sorted(r.question for r in RECORDS if r.docs)  # once per question: budgets and methods share
    direct = ICRRerank(str(tiny_icr_dir), [0, 2], max_passage_tokens=16, device="cpu")
    for k in (1, 3):
        assert chosen[("icr", k)] == [direct.select(r, None, None, k) if r.docs else [] for r in RECORDS]
        want = [[int(i) for i in np.argsort(-fuse_with_rank(direct.scores(r), 0.5), kind="stable")][:k]
                if r.docs else [] for r in RECORDS]
        assert chosen[("icr_fused", k)] == want
    assert fallbacks == {"icr": 0, "icr_fused": 0}
    # icr_model null: the student's base model
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"student.model={tiny_icr_dir}"])
    from purecover.eval.method_selection import _make_selector

    sel = _make_selector(specs[0], recipe, None, {}, {}, [], False)
    assert sel.model_name == str(tiny_icr_dir) and sel.layers == "all" and sel.max_passage_tokens == 192


def test_recipe_keys_are_checked():
    e = load_recipe(None).eval
    assert (e.icr_model, e.icr_layers, e.icr_fusion_weight, e.icr_max_passage_tokens) == (None, "all", 1.0, 192)
    for override, message in [("eval.icr_layers=[]", "eval.icr_layers: must be all or a non-empty list"),
                              ("eval.icr_layers=[1, 1]", "eval.icr_layers: lists a layer twice"),
                              ("eval.icr_layers=middle", "eval.icr_layers"),
                              ("eval.icr_fusion_weight=-1", "eval.icr_fusion_weight: must be >= 0"),
                              ("eval.icr_max_passage_tokens=0", "eval.icr_max_passage_tokens: must be >= 1")]:
        with pytest.raises(ConfigError, match=message):
            load_recipe(None, [override])


def test_the_method_names():
    from purecover.eval.methods import METHODS

    assert list(METHODS)[1:5] == ["cross_encoder", "cross_encoder_ft", "icr", "icr_fused"]
    assert "Chen et al., ICLR 2025" in METHODS["icr"] and "eval.icr_fusion_weight" in METHODS["icr_fused"]


def test_layers_that_see_no_passage_are_refused_not_copied_from_retrieval(bpe_tok):
    """Issue 55 (5): ICR through sliding-window layers whose window ends before the passages (Gemma-3's local
    layers, here a Mistral of window 2) scored every passage 0 and quietly copied the retrieval order: refused,
    naming eval.icr_layers and the window. A model without layers names eval.icr_layers, not teacher.layers."""
    from purecover.demo.tiny import tiny_causal_lm

    sel = make_baseline("icr", model_name="unused", layers="all", max_passage_tokens=16)
    sel._model, sel._tokenizer = tiny_causal_lm("mistral", len(bpe_tok), num_layers=2, sliding_window=2), bpe_tok
    with pytest.raises(ValueError, match=r"eval.icr_layers: every ICR score of question 'q1' is 0.*layers read "
                                         r"\(\[0, 1\]\).*all sliding_attention layers of 2 tokens"):
        sel.select(RECORDS[0], None, None, 2)
    sel._model, sel._cache = tiny_causal_lm("mistral", len(bpe_tok), num_layers=2, sliding_window=4096), {}
    assert len(sel.select(RECORDS[0], None, None, 2)) == 2  # the same layers seeing the passages: scores
    with pytest.raises(ValueError, match=r"eval.icr_layers: the model has no decoder layers \(num_hidden_layers is 0"):
        icr_scores(tiny_causal_lm("qwen2", len(bpe_tok), num_layers=0), bpe_tok, QUESTION, DOCS)
    from purecover.teacher.layers import attention_windows

    with pytest.raises(ValueError, match="config has num_hidden_layers 0: no layer to read"):
        attention_windows(tiny_causal_lm("qwen2", len(bpe_tok), num_layers=0).config)
