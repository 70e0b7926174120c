"""The helpers of `learnability.py` (the experiment, its settings, targets and rows are there): the tiny student,
the tasks' questions and labels, the scoring (baselines, the order check), one task's training and the plot.

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
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from purecover.metrics import subset_f1
from purecover.utils.rundir_claim import mark_run_dir

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
TINY = {"hidden_size": 128, "num_layers": 2, "num_heads": 8, "num_kv_heads": 2, "intermediate_size": 256,
        "initializer_range": 0.05}
EMBED_STD = 0.1
ARCH = "llama"
CHAT = False  # the word tokenizer gets no chat template: the prompt's plain layout
TEXT_LAYOUT = "{thing}."  # a passage: "red kettle." (names and places only lengthened the prompt)


# ------------------------------------------------------------------------------------------------- student


def student_shape(settings: dict[str, Any]) -> dict[str, Any]:
    """The tiny student's config sizes for a task's `settings`: `TINY`, with the task's own ``num_layers`` when
    it sets one."""
    return {**TINY, **{k: v for k, v in settings.items() if k == "num_layers"}}


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

# --------------------------------------------------------------------------------------------------- tasks


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
    from purecover.data.data_stage import run_data_stage
    from purecover.data.samples import SAMPLE_FILES, sample_data_dir
    from purecover.teacher.label_stage import run_label_stage

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

# ------------------------------------------------------------------------------------------------- scoring


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
    from purecover.train.train_stage import STUDENT_META, first_position_logits

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
    from purecover.train.train_stage import STUDENT_META

    history = json.loads((final / STUDENT_META).read_text())["log_history"]
    return [{"step": h["step"], "f1_at_size": h.get("eval_subset_f1@size"), "f1_at_zero": h.get("eval_subset_f1@0"),
             "eval_l_lm": h.get("eval_l_lm"), "eval_l_cl": h.get("eval_l_cl")}
            for h in history if "eval_subset_f1@size" in h]

# ------------------------------------------------------------------------------------------------ training


def student_overrides(student: Path, pretrained: bool) -> list[str]:
    """The recipe's student model and what is trained: the tiny model's every weight but its frozen embedding,
    or, for a pretrained `student`, a LoRA adapter with the recipe's ``student.lora`` settings."""
    if pretrained:
        return [f"student.model={student}", "student.lora.enabled=true", "student.dtype=float32"]
    return [f"student.model={student}", "student.lora.enabled=false", "student.freeze_embeddings=true",
            "student.dtype=float32"]


def train_variant(run: Path, student: Path, weights: dict[str, float], task_settings: dict, seed: int
                  ) -> dict[str, Any]:
    """Train one loss variant (`weights`: ``lm_weight``, ``cl_weight``) with the real train stage in `run`."""
    from purecover.config import load_recipe
    from purecover.train.train_stage import run_train_stage

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


def run_task(task: str, work: Path, samples: Path, variants: dict[str, dict[str, float]], settings: dict,
             seed: int) -> dict:
    """One task at one seed: its questions and teacher labels, the baselines on the test and calibration splits,
    then each loss variant (`variants`: name -> loss weights) trained, order-checked and its curve read."""
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
        student = build_student(base / "student", task_texts(cand_list), samples, init_seed, student_shape(settings))
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
    for variant, weights in variants.items():
        run = base / variant
        mark_run_dir(run)  # assembled here: the stages may write into it
        write_jsonl(run / "candidates.jsonl", cand_list)
        write_jsonl(run / "labels.jsonl", label_list)
        row = train_variant(run, student, weights, settings, seed)
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

# -------------------------------------------------------------------------------------------------- output


def plot_curves(results: dict[str, dict[str, dict]], path: Path, variants: Sequence[str]) -> Path | None:
    """One panel per task: calibration-split F1 at the teacher's |S| per step (one line per variant and seed,
    later seeds paler; a colour per variant, in the order of `variants`), the first seed's baselines as lines."""
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
                    ax.plot(*zip(*pts), marker="o", ms=3, color=f"C{list(variants).index(variant)}",
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
