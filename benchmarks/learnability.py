"""Learnability: does a tiny student learn *which passages answer this question*? (JSON + plot)

    python benchmarks/learnability.py [--tasks colour hotpotqa] [--variants cl+lm cl lm] [--seeds 0,1,2]
                                      [--out benchmarks/results/learnability.json] [--threads 2] [--jobs 2]
                                      [--candidate-shuffles N] [--student PATH]

Each task writes candidates.jsonl and labels.jsonl, then the real train stage (`run_train_stage`,
SelectorTrainer, the project's prompt and identifiers) trains a tiny Qwen2 built from a config
(random init, the real Qwen2 tokenizer of the sample data) with L_CL + L_LM, L_CL only
(``student.lm_weight=0``) and L_LM only (``student.cl_weight=0``). The stage's own splits are
used (train / calibration / test by qid hash): τ3 is calibrated on the calibration split and
every figure below is on the test split, which neither training nor τ3 saw.

Tasks (all question-dependent: whether a passage is in the subset depends on the question)
  colour     synthetic, lexical. The question names a colour ("Which passages mention a blue
             item?"); each of the K1 passages describes one coloured object; the subset is the
             1 to 3 passages of the question's colour, at random positions; every distractor
             carries another colour, so there is no marker, and neither position nor "select
             all" helps. BM25 solves it (the colour word is shared), the tiny student must learn it.
  category   synthetic, not lexical. The question names a category ("... a kind of fruit?"),
             passages name members ("a plum"), so the question and its passages share no word
             and BM25 is at chance; the student must learn the category-member association.
  hotpotqa   real: the HotpotQA sample (`purecover.data.samples`), BM25 top-K1 over the sample's
             corpus (data stage), labels from the label stage with oracle steps and the
             embedding estimator (all-MiniLM-L6-v2, shipped defaults); the student reproduces
             the teacher's subsets. Its figures are reported whatever they are.

Baselines, on the same test questions, against the same (teacher) subsets:
  select all           every candidate
  random |S|           |S| = the teacher's subset size, uniformly at random: expected F1 = |S|/K1 exactly
  position top-|S|     the first |S| candidates (candidates order)
  retrieval top-|S|    the |S| candidates with the best BM25 score (synthetic: BM25 of the question
                       against its K1 passages; hotpotqa: the data stage's retrieval order)
The student is reported at τ3 (the deployed rule) and at the teacher's |S| taken from the top of
its scores (threshold-free, comparable with the top-|S| baselines).

Order check (every run since it exists; ``orders`` of each variant): after training, the student is scored
on the same test questions with each question's candidates shown in retrieval order, reversed, and in one
seeded random order (`shown_order`), its selections mapped back to candidate positions, so every order is
scored against the same teacher subsets. A student that reads the passages scores about the same in each;
one that learned the position prior (e.g. "the first two") collapses on the reversed order, and
``top_size_first_slots`` (share of questions whose |S| best are the first |S| shown) stays near 1.
Rows: ``learnability.test_subset_f1_reversed`` and ``..._shuffled`` next to the retrieval-order figure.

Training order (``--candidate-shuffles N``, ``student.candidate_shuffles``, recorded in each run's
``settings`` and variant): 0 (default here) trains in retrieval order, as every committed figure made
before the setting existed (their ``settings`` have no ``candidate_shuffles``: read 0); N >= 1 trains on
N seeded random orders per question with the labels moved with their passages (the train stage's default
is 1). Rows of a shuffled run say so in their note.

Pretrained student (``--student PATH``): a transformers causal-LM folder (config.json, *.safetensors,
tokenizer) replaces the tiny random-init model, with its own tokenizer, trained as a LoRA adapter with the
recipe's ``student.lora`` settings (``student.lora.*`` defaults: r 16, alpha 32, dropout 0.05, all-linear);
meant for the hotpotqa task (the synthetic tasks' settings are tuned for the tiny model). Recorded in
``student`` and each run's ``settings.student`` (``tiny`` otherwise).

The student (per task): a tiny Llama-architecture model built from a config (hidden 128, 2 layers (3 for category),
8 heads, 2 key/value heads, intermediate 256, initializer_range 0.05, random init) with a
word-level tokenizer built from the task's own text (`purecover.demo.tiny.build_word_tokenizer`:
one token per word, punctuation mark and newline; the constant system prompt and instruction
sentence one token each), so the selector prompt is the project's (plain layout: the tokenizer
has no chat template). All weights are trained except the token embedding, tied with the output
projection and kept fixed (``student.freeze_embeddings``, the LoRA recipes' situation), drawn at
std 0.1. Gradient clipping is off (``max_grad_norm 0``). Why these choices (measured on the
colour task; docs/development/benchmarks.md, learnability): with the Qwen2 tokenizer the 151,936-token output layer
costs most of each step (~1 s per batch of 8 against ~0.1 s here), the ~55 tokens of constant
instructions dilute a from-scratch model's attention, and the Trainer's default clipping at 1.0
(gradient norms are ~1-2 here) and the config's initializer_range 0.02 each lengthen the plateau
before the content match between question and passage is learned; with all of them the student
stays at chance for 2,000+ steps. Llama rather than Qwen2: transformers loads a qwen2 checkpoint's
tokenizer as Qwen2Tokenizer whatever its tokenizer_config says. Learning curve: the trainer's own
evaluation on the calibration split every ``eval_steps`` (subset F1 with the teacher's |S| from
the top), plotted next to the baselines on that split (learnability.png beside the JSON).
Target (issue 13): on the synthetic colour task, L_CL + L_LM reaches test subset F1 ≥ 0.85 at τ3,
at least 0.3 above "select all", within 600 s of CPU (training + τ3, this machine).

Seeds: the committed figures are reported on seeds 1, 2 and 3; the settings were chosen at seed 0 and the
category task's failure was diagnosed at seed 7 (docs/development/benchmarks.md, learnability). ``--merge A.json
B.json --report-seeds 1,2,3`` combines runs into one results file whose mean and worst are over the report
seeds (`make bench` does this). ``--seeds 0,1,2`` runs every task at each seed (the seed draws the synthetic questions, the
split, the student's initialisation and the training order); ``results[task][seed]`` holds each run.
Rows (see rows.py): per task, seed and loss variant the test subset F1 at τ3 (and, for the target's
task and variant, its margin over select all and its seconds), the best baseline; with several seeds
also the mean and the worst of each over the seeds (figure ids ending in ``_mean`` / ``_worst``; the
worst is the lowest value, or the highest for a figure whose target is an upper bound).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rows import ROWS_ONLY_HELP, Rows, at_least, at_most, machine_info, now, rewrite, with_rows

from purecover.utils.rundir_claim import mark_run_dir

TARGET_TASK, TARGET_VARIANT = "colour", "cl+lm"
TARGET_F1 = 0.85
TARGET_MARGIN = 0.3  # above "select all"
TARGET_SECONDS = 600.0
COLOURS = ["red", "blue", "green", "yellow", "black", "white"]
OBJECTS = ["kettle", "lamp", "boat", "chair", "kite", "drum", "coat", "bell", "vase", "cart", "cup", "hat"]
CATEGORIES = {
    "fruit": ["plum", "pear", "cherry", "lemon"],
    "tool": ["hammer", "saw", "drill", "wrench"],
    "animal": ["horse", "goat", "rabbit", "sheep"],
    "instrument": ["violin", "flute", "harp", "trumpet"],
    "vehicle": ["truck", "bus", "tractor", "bicycle"],
    "garment": ["scarf", "jacket", "glove", "sweater"],
}
NAMES = ["Anna", "Ben", "Cleo", "Dev", "Ema", "Finn", "Gus", "Hana", "Ivo", "Jade"]
PLACES = ["near the door", "by the river", "in the garden", "at the market", "on the roof", "in the hall"]
VARIANTS = {"cl+lm": {"lm_weight": 1.0, "cl_weight": 1.0}, "cl": {"lm_weight": 0.0, "cl_weight": 1.0},
            "lm": {"lm_weight": 1.0, "cl_weight": 0.0}}
BASELINES = {"select_all": "select all", "random_size": "random |S|", "position_top_size": "position top-|S|",
             "retrieval_top_size": "retrieval top-|S|"}
TINY = {"hidden_size": 128, "num_layers": 2, "num_heads": 8, "num_kv_heads": 2, "intermediate_size": 256,
        "initializer_range": 0.05}
EMBED_STD = 0.1
ARCH = "llama"
CHAT = False  # the word tokenizer gets no chat template: the prompt's plain layout
TEXT_LAYOUT = "{thing}."  # a passage: "red kettle." (names and places only lengthened the prompt)


# ------------------------------------------------------------------------------------------- student


def student_shape(task: str) -> dict[str, Any]:
    """The tiny student's config sizes for `task`: `TINY`, with the task's own ``num_layers`` when it sets one."""
    return {**TINY, **{k: v for k, v in TASK_SETTINGS[task].items() if k == "num_layers"}}


def build_student(out_dir: Path, texts: Sequence[str], samples: Path, seed: int, shape: dict[str, Any]) -> Path:
    """Word-level tokenizer over `texts` + a tiny random model of `shape` (`student_shape`) sized to it."""
    from purecover.demo.tiny import build_tiny_model, build_word_tokenizer
    from purecover.models.selector_prompt import SELECTOR_INSTRUCTIONS, SELECTOR_SYSTEM

    template = (json.loads((samples / "qwen2_tokenizer" / "tokenizer_config.json").read_text())["chat_template"]
                if CHAT else None)
    fixed = [SELECTOR_SYSTEM, SELECTOR_INSTRUCTIONS, "Question: Passages: system user assistant"]
    build_word_tokenizer(out_dir / "tokenizer", [*fixed, *texts], chat_template=template,
                         phrases=[SELECTOR_SYSTEM, SELECTOR_INSTRUCTIONS])
    # llama: transformers maps a qwen2 config to the Qwen2 tokenizer class whatever tokenizer_config says
    tiny = build_tiny_model(out_dir / "model", out_dir / "tokenizer", ARCH, seed=seed, **shape)  # tied embeddings
    rescale_embedding(tiny, EMBED_STD, seed)
    return tiny


def task_texts(cands: Sequence[dict]) -> list[str]:
    return [t for c in cands for t in (c["question"], *(f"{d.get('title', '')} {d['text']}" for d in c["docs"]))]


# ------------------------------------------------------------------------------------------- tasks


def synthetic_records(task: str, n_questions: int, k1: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Candidates and teacher-label records of a synthetic task (the data and label stages' formats)."""
    rng = random.Random(f"{task}:{seed}")
    groups = {c: [c] for c in COLOURS} if task == "colour" else CATEGORIES
    cands, labels = [], []
    for q in range(n_questions):
        target = rng.choice(sorted(groups))
        n_pos = rng.randint(1, 3)
        positives = set(rng.sample(range(k1), n_pos))
        docs = []
        for k in range(k1):
            group = target if k in positives else rng.choice([g for g in sorted(groups) if g != target])
            member = rng.choice(groups[group])
            thing = f"{member} {rng.choice(OBJECTS)}" if task == "colour" else member
            text = TEXT_LAYOUT.format(name=rng.choice(NAMES), thing=thing, place=rng.choice(PLACES))
            docs.append({"doc_id": f"{task}-q{q}-d{k}", "title": "", "text": text, "score": 0.0})
        question = (f"Which passages mention a {target} item?" if task == "colour"
                    else f"Which passages mention a kind of {target}?")
        for d, s in zip(docs, bm25_scores(question, [d["text"] for d in docs])):
            d["score"] = s
        qid = f"{task}-{q:05d}"
        selected = sorted(positives)
        cands.append({"qid": qid, "dataset": f"synthetic-{task}", "question": question, "answers": [target],
                      "docs": docs, "gold_doc_ids": [docs[k]["doc_id"] for k in selected], "gold_titles": [],
                      "oracle_steps": [], "meta": {}})
        labels.append({"qid": qid, "selected": selected, "selected_doc_ids": [docs[k]["doc_id"] for k in selected],
                       "gains": [0.0] * len(selected), "objective": 0.0, "steps": [], "answer": target, "e": [],
                       "W": [], "bias_key": None, "status": "ok", "reason": None, "teacher": {"model": "rule"}})
    return cands, labels


def bm25_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 (bm25s defaults, English stopwords) of `query` against `texts` as their own corpus."""
    import bm25s

    model = bm25s.BM25()
    model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
    return [round(float(s), 6) for s in model.get_scores(tokens)]


def write_jsonl(path: Path, records: Sequence[dict]) -> None:
    from purecover.utils.io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def hotpotqa_run(work: Path, k1: int) -> tuple[Path, dict]:
    """Data + label stages on the HotpotQA sample (oracle steps, embedding estimator); returns the run dir."""
    from purecover.config import load_recipe
    from purecover.data.candidates import run_data_stage
    from purecover.data.samples import SAMPLE_FILES, sample_data_dir
    from purecover.teacher.job import run_label_stage

    run = work / "hotpotqa-labels"
    overrides = [f"run_dir={run}", "data.dataset=hotpotqa", f"data.path={sample_data_dir() / SAMPLE_FILES['hotpotqa']}",
                 f"data.k1={k1}", "teacher.steps=oracle", "teacher.estimator=embedding", "teacher.batch_size=16"]
    recipe = load_recipe(None, overrides)
    t0 = time.perf_counter()
    run_data_stage(recipe, show_progress=False)
    label = run_label_stage(recipe, show_progress=False)
    info = {"label_seconds": round(time.perf_counter() - t0, 1), "labelled_questions": label.questions,
            "teacher_mean_size": label.mean_size, "teacher_fallback_rate": label.fallback_rate,
            "label_overrides": overrides[1:]}
    return run, info


# --------------------------------------------------------------------------------- scoring


def subset_f1(predicted: Sequence[int], gold: Sequence[int]) -> float:
    from purecover.train.trainer import subset_f1 as f1

    return f1(predicted, gold)


def baselines(cands: dict[str, dict], labels: dict[str, list[int]], qids: Sequence[str]) -> dict[str, float]:
    """Mean subset F1 of the heuristics over `qids` (against the teacher's subsets)."""
    rows: dict[str, list[float]] = {"select_all": [], "random_size": [], "position_top_size": [],
                                    "retrieval_top_size": []}
    for qid in qids:
        gold, docs = labels[qid], cands[qid]["docs"]
        n, g = len(docs), len(gold)
        by_score = sorted(range(n), key=lambda k: (-float(docs[k].get("score", 0.0)), k))
        rows["select_all"].append(subset_f1(range(n), gold))
        rows["random_size"].append(g / n if g else 1.0)  # E[hits] = g²/n, F1 = hits/g when |pred| = |gold|
        rows["position_top_size"].append(subset_f1(range(g), gold))
        rows["retrieval_top_size"].append(subset_f1(by_score[:g], gold))
    return {k: round(sum(v) / len(v), 4) for k, v in rows.items()} if qids else {}


ORDERS = ("retrieval", "reversed", "shuffled")
ORDER_CHECK_VIEW = 1000  # the shuffled check's view index: one no training run draws (candidate_shuffles <= 16)


def shown_order(name: str, qid: str, n: int, seed: int) -> list[int]:
    """How the order check shows a question's `n` candidates: shown position i holds candidate ``order[i]``
    (retrieval: as retrieved; reversed; shuffled: one seeded order per question, `candidate_order`)."""
    from purecover.train.data import candidate_order

    if name == "retrieval":
        return list(range(n))
    if name == "reversed":
        return list(range(n - 1, -1, -1))
    if name == "shuffled":
        return candidate_order(qid, n, seed, ORDER_CHECK_VIEW)
    raise ValueError(f"unknown order {name!r}; expected one of {', '.join(ORDERS)}")


def student_order_check(final: Path, cands: dict[str, dict], labels: dict[str, list[int]], qids: Sequence[str],
                        seed: int) -> dict[str, dict[str, float]]:
    """The trained student on the test questions with their candidates in each of `ORDERS`: its selections
    (shown positions) mapped back to candidate positions and scored against the teacher's subset.

    Per order: ``test_subset_f1`` (at τ3, with the stored min_select and k_max: the deployed rule),
    ``test_subset_f1_at_teacher_size`` (the teacher's |S| best-scored passages) and ``top_size_first_slots``
    (share of questions whose |S| best-scored passages are the first |S| shown: 1.0 for a student that only
    learned position). A student that reads the passages scores about the same in every order.
    """
    import torch

    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.loading import load_causal_lm, load_tokenizer
    from purecover.models.selector_prompt import build_selector_prompt
    from purecover.train.run import STUDENT_META, first_position_logits

    meta = json.loads((final / STUDENT_META).read_text())
    tokenizer = load_tokenizer(str(final), padding_side="left")
    model = load_causal_lm(str(final), dtype="float32", device="cpu").eval()
    scheme = IdentifierScheme.from_dict(meta["identifiers"]).check(tokenizer, meta["k1"])
    out: dict[str, dict[str, float]] = {}
    for name in ORDERS:
        orders = {q: shown_order(name, q, len(cands[q]["docs"]), seed) for q in qids}
        prompts = [build_selector_prompt(tokenizer, cands[q]["question"], [cands[q]["docs"][k] for k in orders[q]],
                                         scheme, meta["max_passage_tokens"]).input_ids for q in qids]
        with torch.no_grad():
            scores = first_position_logits(model, prompts, scheme.token_ids, [len(orders[q]) for q in qids])
        rows = [score_in_order(s, orders[q], labels[q], meta["tau3"], meta["min_select"], meta["k_max"])
                for q, s in zip(qids, scores)]
        out[name] = {key: round(sum(r[key] for r in rows) / len(rows), 4) if rows else float("nan")
                     for key in ("test_subset_f1", "test_subset_f1_at_teacher_size", "top_size_first_slots")}
    return out


def score_in_order(scores: Sequence[float], order: Sequence[int], gold: Sequence[int], tau: float, min_select: int,
                   k_max: int | None) -> dict[str, float]:
    """One question's figures from its identifier scores in a shown order (``scores[i]``: shown position i,
    which holds candidate ``order[i]``); `gold`: the teacher's subset as candidate positions.

    Keys: ``test_subset_f1`` (kept at `tau`, within [min_select, k_max]), ``test_subset_f1_at_teacher_size``
    (the |gold| best), ``top_size_first_slots`` (1.0 when the |gold| best are the first |gold| shown, else 0.0).
    """
    from purecover.models.selection import select_from_scores

    kept = select_from_scores(scores, tau, min_select, k_max)
    top = sorted(range(len(scores)), key=lambda k: (-scores[k], k))[: len(gold)]
    return {"test_subset_f1": subset_f1([order[k] for k in kept], gold),  # shown position -> candidate position
            "test_subset_f1_at_teacher_size": subset_f1([order[k] for k in top], gold),
            "top_size_first_slots": float(sorted(top) == list(range(len(gold))))}


def learning_curve(final: Path) -> list[dict[str, float]]:
    """(step, calibration-split subset F1 at the teacher's |S|, at logit > 0, eval L_LM) from the trainer's log."""
    from purecover.train.run import STUDENT_META

    history = json.loads((final / STUDENT_META).read_text())["log_history"]
    return [{"step": h["step"], "f1_at_size": h.get("eval_subset_f1@size"), "f1_at_zero": h.get("eval_subset_f1@0"),
             "eval_l_lm": h.get("eval_l_lm"), "eval_l_cl": h.get("eval_l_cl")}
            for h in history if "eval_subset_f1@size" in h]


# -------------------------------------------------------------------------------- training


def student_overrides(student: Path, pretrained: bool) -> list[str]:
    """The recipe's student model and what is trained: the tiny model's every weight but its frozen embedding,
    or, for a pretrained `student`, a LoRA adapter with the recipe's ``student.lora`` settings."""
    if pretrained:
        return [f"student.model={student}", "student.lora.enabled=true", "student.dtype=float32"]
    return [f"student.model={student}", "student.lora.enabled=false", "student.freeze_embeddings=true",
            "student.dtype=float32"]


def train_variant(run: Path, student: Path, variant: str, task_settings: dict, seed: int) -> dict[str, Any]:
    from purecover.config import load_recipe
    from purecover.train.run import run_train_stage

    weights = VARIANTS[variant]
    s = task_settings
    overrides = [f"run_dir={run}", f"seed={seed}", f"data.k1={s['k1']}",
                 *student_overrides(student, s.get("student", "tiny") != "tiny"),
                 f"student.candidate_shuffles={s.get('candidate_shuffles', 0)}",
                 f"student.lm_weight={weights['lm_weight']}", f"student.cl_weight={weights['cl_weight']}",
                 f"student.eval_fraction={s['eval_fraction']}", f"student.calibration_share={s['calibration_share']}",
                 f"student.max_passage_tokens={s['max_passage_tokens']}", "student.min_select=1",
                 f"student.k_max={s['k1']}", f"student.training.max_steps={s['steps']}",
                 f"student.training.learning_rate={s['learning_rate']}",
                 f"student.training.per_device_train_batch_size={s['batch_size']}",
                 f"student.training.warmup_steps={s['warmup_steps']}", "student.training.save_steps=100000",
                 "student.training.logging_steps=25", "student.training.eval_strategy=steps",
                 f"student.training.eval_steps={s['eval_steps']}", "student.training.per_device_eval_batch_size=8",
                 "student.training.weight_decay=0.0", f"student.training.max_grad_norm={s.get('max_grad_norm', 1.0)}"]
    t0 = time.perf_counter()
    summary = run_train_stage(load_recipe(None, overrides), show_progress=False).to_json_dict()
    return {**weights, "seconds": round(time.perf_counter() - t0, 1), "steps": summary["global_step"],
            "test_subset_f1": summary["test_subset_f1"], "calib_subset_f1": summary.get("calib_subset_f1"),
            "tau3": summary["tau3"], "train_loss": summary["train_loss"],
            "questions": {k: summary[f"{k}_questions"] for k in ("train", "calib", "test")},
            "candidate_shuffles": summary["candidate_shuffles"], "train_examples": summary["train_examples"],
            "final": summary["final"]}


def run_task(task: str, work: Path, samples: Path, variants: Sequence[str], settings: dict, seed: int) -> dict:
    from purecover.data.splits import question_split

    base = work / f"{task}-seed{seed}"
    info: dict[str, Any] = {}
    if task == "hotpotqa":
        label_run, info = hotpotqa_run(work, settings["k1"])
        cands_path, labels_path = label_run / "candidates.jsonl", label_run / "labels.jsonl"
        cand_list = [json.loads(line) for line in cands_path.read_text().splitlines() if line.strip()]
        label_list = [json.loads(line) for line in labels_path.read_text().splitlines() if line.strip()]
    else:
        cand_list, label_list = synthetic_records(task, settings["questions"], settings["k1"], seed)
    label_list = [r for r in label_list if r.get("status") != "error"]
    init_seed = settings.get("init_seed", seed)
    if settings.get("student", "tiny") == "tiny":
        student = build_student(base / "student", task_texts(cand_list), samples, init_seed, student_shape(task))
    else:
        student = Path(settings["student"])
    cands = {c["qid"]: c for c in cand_list}
    labels = {r["qid"]: list(r["selected"]) for r in label_list}
    split = {q: question_split(q, settings["eval_fraction"], settings["calibration_share"], seed) for q in labels}
    test_qids = sorted(q for q, s in split.items() if s == "test")
    calib_qids = sorted(q for q, s in split.items() if s == "calib")
    from transformers import AutoTokenizer

    out: dict[str, Any] = {
        "settings": settings, **info, "vocabulary": len(AutoTokenizer.from_pretrained(student)),
        "mean_teacher_size_test": round(sum(len(labels[q]) for q in test_qids) / max(len(test_qids), 1), 3),
        "baselines_test": baselines(cands, labels, test_qids),
        "baselines_calib": baselines(cands, labels, calib_qids), "variants": {}}
    for variant in variants:
        run = base / variant
        mark_run_dir(run)  # assembled here: the stages may write into it
        write_jsonl(run / "candidates.jsonl", cand_list)
        write_jsonl(run / "labels.jsonl", label_list)
        row = train_variant(run, student, variant, settings, seed)
        final = Path(row.pop("final"))
        row["orders"] = student_order_check(final, cands, labels, test_qids, seed)
        row["test_subset_f1_at_teacher_size"] = row["orders"]["retrieval"]["test_subset_f1_at_teacher_size"]
        row["curve"] = learning_curve(final)
        out["variants"][variant] = row
        by_order = ", ".join(f"{name} {o['test_subset_f1']}" for name, o in row["orders"].items())
        print(f"{task} {variant}: test F1 {row['test_subset_f1']} (at |S|: {row['test_subset_f1_at_teacher_size']}) "
              f"in {row['seconds']} s; by candidate order at τ3: {by_order}; baselines {out['baselines_test']}",
              flush=True)
    return out


# ------------------------------------------------------------------------------------ output


def plot(results: dict[str, dict[str, dict]], path: Path) -> Path | None:
    """One panel per task: calibration-split F1 at the teacher's |S| per step (one line per variant and seed,
    later seeds paler), the first seed's baselines as lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tasks = [t for t in results if any(run["variants"] for run in results[t].values())]
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4), squeeze=False)
    styles = {"select_all": ":", "random_size": "--", "retrieval_top_size": "-."}
    for ax, task in zip(axes[0], tasks):
        by_seed = results[task]
        for i, run in enumerate(by_seed.values()):  # a colour per loss variant, the first seed labelled
            for variant, row in run["variants"].items():
                pts = [(c["step"], c["f1_at_size"]) for c in row["curve"] if c["f1_at_size"] is not None]
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3, color=f"C{list(VARIANTS).index(variant)}",
                            alpha=1.0 if i == 0 else 0.45, label=None if i else f"student {variant}")
        res = next(iter(by_seed.values()))
        for name, style in styles.items():
            if name in res["baselines_calib"]:
                ax.axhline(res["baselines_calib"][name], color="grey", ls=style, lw=1, label=name.replace("_", " "))
        ax.set_title(f"{task} (calibration split)")
        ax.set_xlabel("training step")
        ax.set_ylabel("subset F1, teacher's |S| from the top")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


TASK_SETTINGS = {
    "colour": {"questions": 1500, "k1": 6, "eval_fraction": 0.3, "calibration_share": 0.4, "max_passage_tokens": 64,
               "steps": 3000, "batch_size": 16, "learning_rate": 1.5e-3, "warmup_steps": 30, "eval_steps": 300,
               "max_grad_norm": 0.0},
    # three layers: a member must be matched to the question's category and bound to its identifier before
    # the reply position can read it (docs/development/benchmarks.md, learnability); with two it plateaus at ~0.58
    "category": {"questions": 1500, "k1": 6, "eval_fraction": 0.3, "calibration_share": 0.4,
                 "max_passage_tokens": 64, "steps": 1500, "batch_size": 16, "learning_rate": 1.5e-3,
                 "warmup_steps": 30, "eval_steps": 150, "max_grad_norm": 0.0, "num_layers": 3},
    "hotpotqa": {"k1": 10, "eval_fraction": 0.4, "calibration_share": 0.5, "max_passage_tokens": 64, "steps": 400,
                 "batch_size": 8, "learning_rate": 3e-3, "warmup_steps": 20, "eval_steps": 50, "max_grad_norm": 0.0},
}


# Measured seconds of each task's three variants on this machine (one core each; hotpotqa with its labels),
# used only to start the longest (task, seed) runs first under --jobs.
TASK_SECONDS = {"colour": 1400.0, "category": 1100.0, "hotpotqa": 1000.0}


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2] (distinct, in the order given)."""
    seeds = [int(x) for x in text.split(",") if x.strip()]
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct comma-separated integers, got {text!r}")
    return seeds


def student_dir_problem(path: Path) -> str | None:
    """What a ``--student`` directory lacks to be loaded as a transformers causal LM (None when it has it all)."""
    if not path.is_dir():
        return "not a directory (give a transformers model folder: config.json, *.safetensors, tokenizer files)"
    if not (path / "config.json").is_file():
        return "no config.json"
    if not any(path.glob("*.safetensors")):
        return "no *.safetensors weights (safetensors only)"
    if not any((path / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        return "no tokenizer (tokenizer.json, tokenizer_config.json or tokenizer.model)"
    return None


def student_description(student: Path | None, results: dict[str, dict[str, dict]]) -> dict[str, Any]:
    """The results file's ``student``: the tiny random-init model, or the pretrained folder and its LoRA settings."""
    if student is None:
        return {**TINY, "init": "random", "embedding": f"frozen, tied, std {EMBED_STD}",
                "tokenizer": "word-level, per task",
                "num_layers_by_task": {t: student_shape(t)["num_layers"] for t in results}}
    import dataclasses

    from purecover.config import load_recipe

    lora = dataclasses.asdict(load_recipe(None, []).student.lora)
    return {"init": "pretrained", "model": str(student), "lora": lora, "tokenizer": "the model's own"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["colour", "category", "hotpotqa"], choices=list(TASK_SETTINGS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help="override every task's training steps")
    parser.add_argument("--learning-rate", type=float, default=None, help="override every task's learning rate")
    parser.add_argument("--questions", type=int, default=None, help="override the synthetic tasks' question count")
    parser.add_argument("--init-seed", type=int, default=None,
                        help="initialise the student with this seed instead of the run's (to tell the data draw "
                             "from the initialisation)")
    parser.add_argument("--candidate-shuffles", type=int, default=0, metavar="N",
                        help="student.candidate_shuffles of every run: N seeded random candidate orders per training "
                             "question (default 0, retrieval order: the setting of the committed figures)")
    parser.add_argument("--student", type=Path, default=None, metavar="PATH",
                        help="a pretrained student: a transformers causal-LM directory (config.json, *.safetensors, "
                             "tokenizer), trained with a LoRA adapter (the recipe's student.lora settings) instead "
                             "of the tiny random-init model; meant for the hotpotqa task")
    parser.add_argument("--seeds", type=seed_list, default=[0], help="comma-separated seeds, each task runs at each")
    parser.add_argument("--seed", type=int, default=None, help="one seed (the same as --seeds N)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="run (task, seed) pairs in this many processes at once (one core per job)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/learnability.json"))
    parser.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="RESULTS",
                        help="combine these results files (their runs by task, seed and variant) into --out; no training")
    parser.add_argument("--report-seeds", type=seed_list, default=None,
                        help="the seeds the figures are reported on (mean and worst, targets); the others are the "
                             "seeds settings were chosen on")
    args = parser.parse_args()
    if args.rows_only:
        return rewrite(args.out, rows)
    if args.merge:
        return merge(args.merge, args.out, args.report_seeds)
    if args.seed is not None:
        args.seeds = [args.seed]
    if not 0 <= args.candidate_shuffles <= 16:
        parser.error(f"--candidate-shuffles must be in [0, 16] (student.candidate_shuffles), got "
                     f"{args.candidate_shuffles}")
    if args.student is not None:
        problem = student_dir_problem(args.student)
        if problem:
            parser.error(f"--student {args.student}: {problem}")
        args.student = args.student.resolve()

    import torch

    from purecover.data.samples import sample_data_dir
    from purecover.utils.io import atomic_write_json
    from purecover.utils.provenance import package_versions

    samples = sample_data_dir()
    if samples is None:
        print("the Qwen2 tokenizer and HotpotQA sample of the sample data folder are needed "
              "(set PURECOVER_SAMPLE_DATA)", file=sys.stderr)
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="purecover-learnability-"))
    results: dict[str, dict[str, dict]] = {}
    try:
        if args.jobs > 1 and len(args.tasks) * len(args.seeds) > 1:
            results = run_jobs(args, work)
        for task in args.tasks:
            for seed in args.seeds:
                if str(seed) in results.get(task, {}):
                    continue
                settings = dict(TASK_SETTINGS[task])
                if args.steps:
                    settings["steps"] = args.steps
                if args.learning_rate:
                    settings["learning_rate"] = args.learning_rate
                if args.init_seed is not None:
                    settings["init_seed"] = args.init_seed
                if args.questions and "questions" in settings:
                    settings["questions"] = args.questions
                settings["candidate_shuffles"] = args.candidate_shuffles  # recorded: which order each run trained in
                settings["student"] = str(args.student) if args.student else "tiny"
                run = run_task(task, work, samples, args.variants, settings, seed)
                results.setdefault(task, {})[str(seed)] = run
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    figure = plot(results, args.out.with_suffix(".png"))
    passed = target_passed(results, None)
    result = {
        "benchmark": "learnability", "date": now(), "tasks": list(results), "seeds": args.seeds,
        "student": student_description(args.student, results),
        "threads": torch.get_num_threads(), "jobs": args.jobs, "results": results,
        "target": {"task": TARGET_TASK, "variant": TARGET_VARIANT, "test_subset_f1_min": TARGET_F1,
                   "margin_over_select_all_min": TARGET_MARGIN, "seconds_max": TARGET_SECONDS, "pass": passed},
        "plot": str(figure) if figure else None, "machine": machine_info(), "versions": package_versions()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, with_rows(result, rows))
    print(f"-> {args.out}" + (f", {figure}" if figure else ""))
    return 0


def target_passed(results: dict[str, dict[str, dict]], report_seeds: list[int] | None) -> bool | None:
    """Whether the target holds at every (report) seed of the target's task and variant; None without a run."""
    headlines = [(run["variants"][TARGET_VARIANT], run["baselines_test"]["select_all"])
                 for seed, run in results.get(TARGET_TASK, {}).items()
                 if TARGET_VARIANT in run["variants"] and (not report_seeds or int(seed) in report_seeds)]
    if not headlines:
        return None
    return all(h["test_subset_f1"] >= TARGET_F1 and h["test_subset_f1"] >= select_all + TARGET_MARGIN
               and h["seconds"] <= TARGET_SECONDS for h, select_all in headlines)


def merge(paths: Sequence[Path], out: Path, report_seeds: list[int] | None) -> int:
    """Write `out`: the runs of the results files `paths` combined (a later file's variant of the same task and
    seed replaces an earlier one's), ``seeds`` their union, ``report_seeds`` as given, rows and plot redone."""
    from purecover.utils.io import atomic_write_json

    loaded = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    results: dict[str, dict[str, dict]] = {}
    for data in loaded:
        for task, by_seed in data["results"].items():
            for seed, run in by_seed.items():
                known = results.setdefault(task, {}).setdefault(seed, {**run, "variants": {}})
                known["variants"].update(run["variants"])
    for by_seed in results.values():
        by_seed_sorted = dict(sorted(by_seed.items(), key=lambda kv: int(kv[0])))
        by_seed.clear()
        by_seed.update(by_seed_sorted)
    seeds = sorted({int(s) for by_seed in results.values() for s in by_seed})
    missing = [s for s in report_seeds or [] if s not in seeds]
    if missing:
        print(f"--report-seeds {missing} have no runs in {[str(p) for p in paths]}", file=sys.stderr)
        return 1
    figure = plot(results, out.with_suffix(".png"))
    result = {**loaded[-1], "date": now(), "tasks": list(results), "seeds": seeds, "report_seeds": report_seeds,
              "merged_from": [{"file": p.name, "date": d.get("date"), "seeds": d.get("seeds")}
                              for p, d in zip(paths, loaded)],
              "results": results, "plot": str(figure) if figure else None,
              "target": {**loaded[-1]["target"], "pass": target_passed(results, report_seeds)}}
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, with_rows(result, rows))
    print(f"-> {out}" + (f", {figure}" if figure else ""))
    return 0


def run_jobs(args: argparse.Namespace, work: Path) -> dict[str, dict[str, dict]]:
    """Run every (task, seed) pair in its own child process of this script, `args.jobs` at a time (longest
    first, by `TASK_SECONDS`); their results, ``{task: {seed: run}}``."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    units = sorted(((t, s) for t in args.tasks for s in args.seeds), key=lambda u: -TASK_SECONDS.get(u[0], 0.0))

    def child(unit: tuple[str, int]) -> dict:
        task, seed = unit
        name = f"{task}-seed{seed}"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--tasks", task, "--variants", *args.variants,
               "--seeds", str(seed), "--threads", str(args.threads or 1), "--work", str(work / name),
               "--out", str(work / f"{name}.json")]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.learning_rate:
            cmd += ["--learning-rate", str(args.learning_rate)]
        if args.init_seed is not None:
            cmd += ["--init-seed", str(args.init_seed)]
        if args.questions:
            cmd += ["--questions", str(args.questions)]
        cmd += ["--candidate-shuffles", str(args.candidate_shuffles)]
        if args.student:
            cmd += ["--student", str(args.student)]
        proc = subprocess.run(cmd, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed (exit {proc.returncode}): {' '.join(cmd)}")
        return json.loads((work / f"{name}.json").read_text())["results"][task][str(seed)]

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = dict(zip(units, pool.map(child, units)))
    return {t: {str(s): runs[(t, s)] for s in args.seeds} for t in args.tasks}


def rows(result: dict) -> list[dict]:
    """The summary rows, per task: each seed's figures (`run_rows`), then their mean and worst over the seeds.

    With ``report_seeds`` in `result`, the other seeds are the ones settings were chosen on: their rows carry
    no target (and say so), and the mean and worst are over the report seeds only.
    """
    table = Rows(result)
    report = {str(s) for s in result.get("report_seeds") or []}
    for task, by_seed in result["results"].items():
        first = len(table.rows)
        for seed, run in by_seed.items():
            run_rows(table, task, int(seed), run, chosen_on=bool(report) and seed not in report)
        reported = [r for r in table.rows[first:] if not report or str(r["seed"]) in report]
        if len({r["seed"] for r in reported}) > 1:
            over_seeds(table, reported)
    return table.rows


def run_rows(table: Rows, task: str, seed: int, run: dict, chosen_on: bool = False) -> None:
    """One run's rows: test subset F1 at τ3 per loss variant (the target's variant also: margin over select all,
    seconds), then the best baseline on the same test questions. `chosen_on`: settings were chosen at this
    seed, so its rows carry no target."""
    base = run["baselines_test"]
    chosen = "; settings chosen at this seed" if chosen_on else ""
    settings = run.get("settings", {})
    shuffles = settings.get("candidate_shuffles", 0)  # absent: a run from before the setting, retrieval order
    trained = (f"; trained on {shuffles} shuffled candidate order{'s' if shuffles > 1 else ''} per question"
               if shuffles else "")
    if settings.get("student", "tiny") != "tiny":
        trained += f"; pretrained student {Path(settings['student']).name} + LoRA"
    for key, v in run["variants"].items():
        variant = f"{task}, {key}"
        is_target = (task, key) == (TARGET_TASK, TARGET_VARIANT) and not chosen_on
        table.add("learnability.test_subset_f1", v["test_subset_f1"], "F1", at_least(TARGET_F1) if is_target else None,
                  variant=variant, seed=seed, note=f"{v['test_subset_f1_at_teacher_size']:.3f} at the teacher's |S|; "
                                                   f"{v['steps']:,} steps, {v['seconds']:.0f} s{trained}{chosen}")
        orders = v.get("orders")  # the order check: absent from runs before it
        if orders:
            plain = orders["retrieval"]
            for name in ORDERS[1:]:
                o = orders[name]
                table.add(f"learnability.test_subset_f1_{name}", o["test_subset_f1"], "F1", variant=variant,
                          seed=seed, note=f"test candidates {name}, selections mapped back; retrieval order "
                                          f"{plain['test_subset_f1']:.3f}; top-|S| = the first |S| shown on "
                                          f"{o['top_size_first_slots']:.0%} of questions (retrieval order "
                                          f"{plain['top_size_first_slots']:.0%}){trained}")
        if is_target:
            table.add("learnability.f1_over_select_all", round(v["test_subset_f1"] - base["select_all"], 4), "F1",
                      at_least(TARGET_MARGIN), variant=variant, seed=seed, note=f"select all {base['select_all']:.3f}")
            table.add("learnability.train_seconds", v["seconds"], "s", at_most(TARGET_SECONDS), variant=variant,
                      seed=seed, note="training and τ3 calibration")
    name, value = max(base.items(), key=lambda kv: kv[1])
    table.add("learnability.best_baseline_f1", value, "F1", variant=task, seed=seed,
              note=BASELINES[name] + ("" if name == "select_all" else f"; select all {base['select_all']:.3f}"))


def over_seeds(table: Rows, seed_rows: list[dict]) -> None:
    """Mean and worst over the seeds of each (figure, variant) in `seed_rows`; the worst keeps the target."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in seed_rows:
        groups.setdefault((r["figure"], r["variant"]), []).append(r)
    for (figure, variant), group in groups.items():
        measured = [r for r in group if r["value"] is not None]
        if not measured:
            continue
        target = group[0].get("target")
        upper_bound = target is not None and target.startswith("<")
        worst = (max if upper_bound else min)(measured, key=lambda r: r["value"])
        seeds = ", ".join(str(r["seed"]) for r in measured)
        table.add(f"{figure}_mean", round(sum(r["value"] for r in measured) / len(measured), 4), group[0]["unit"],
                  variant=variant, note=f"seeds {seeds}")
        table.add(f"{figure}_worst", worst["value"], group[0]["unit"], target, variant=variant,
                  note=f"seed {worst['seed']} of {seeds}")


def rescale_embedding(model_dir: Path, std: float, seed: int) -> None:
    """Redraw the (tied) token embedding of the saved tiny model at `std` (see the module docstring)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"
    state = load_file(path)
    key = next(k for k in state if k.endswith("embed_tokens.weight"))
    gen = torch.Generator().manual_seed(seed)
    state[key] = torch.randn(state[key].shape, generator=gen) * std
    save_file(state, path, metadata={"format": "pt"})


if __name__ == "__main__":
    sys.exit(main())
