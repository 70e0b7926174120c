"""Learnability check: a tiny Qwen2 student learns a synthetic selection rule on CPU (JSON output).

    python benchmarks/learnability.py [--steps 300] [--out benchmarks/results/learnability.json]

Task: each question names a colour ("Which passages mention the blue items?"); each of the K1
passages describes one item of one colour; the correct subset is the passages with the
question's colour (1 to 3 of them). Candidates and labels are written as the data and label
stages would, and the real train stage trains a tiny randomly initialised Qwen2 (real Qwen2
tokenizer, all weights trained) with L_CL + L_LM, L_CL only, and L_LM only; the held-out subset
F1 at the calibrated threshold τ3 is reported for each.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

COLOURS = ["red", "blue", "green", "yellow", "black", "white"]
LR = 1e-3
TASK = "marker"
ITEMS = ["kettle", "lamp", "boat", "chair", "kite", "drum", "coat", "bell", "vase", "cart"]


def make_task(run_dir: Path, n_questions: int, k1: int, seed: int) -> None:
    """Write candidates.jsonl and labels.jsonl for the synthetic task."""
    rng = random.Random(seed)
    cands, labels = [], []
    for q in range(n_questions):
        colour = rng.choice(COLOURS) if TASK == "colour" else "gold"
        n_pos = rng.randint(1, 3)
        positions = set(rng.sample(range(k1), n_pos))
        docs = []
        for k in range(k1):
            c = colour if k in positions else rng.choice([x for x in COLOURS if x != colour])
            if TASK == "marker":
                c = "gold" if k in positions else "plain"
            docs.append({"doc_id": f"q{q}d{k}", "title": "", "text": f"The {c} {rng.choice(ITEMS)} is here.",
                         "score": 0.0})
        qid = f"syn-{q:04d}"
        cands.append({"qid": qid, "dataset": "synthetic", "question": f"Which passages mention the {colour} items?",
                      "answers": [colour], "docs": docs, "gold_doc_ids": [d["doc_id"] for i, d in enumerate(docs)
                                                                          if i in positions],
                      "gold_titles": [], "oracle_steps": [], "meta": {}})
        selected = sorted(positions)
        labels.append({"qid": qid, "selected": selected, "selected_doc_ids": [docs[k]["doc_id"] for k in selected],
                       "gains": [0.0] * len(selected), "objective": 0.0, "steps": [], "answer": colour, "e": [],
                       "W": [], "bias_key": None, "status": "ok", "reason": None, "teacher": {"model": "rule"}})
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cands))
    (run_dir / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))


def train_variant(base: Path, tiny: Path, name: str, lm_weight: float, cl: bool, steps: int, n_questions: int,
                  k1: int, seed: int) -> dict:
    from purecover.config import load_recipe
    from purecover.train.run import run_train_stage

    run = base / name
    make_task(run, n_questions, k1, seed)
    overrides = [f"run_dir={run}", f"seed={seed}", f"data.k1={k1}", f"student.model={tiny}", "student.lora.enabled=false",
                 "student.dtype=float32", f"student.lm_weight={lm_weight}", "student.eval_fraction=0.2",
                 "student.min_select=1", f"student.k_max={k1}", f"student.training.max_steps={steps}",
                 f"student.training.learning_rate={LR}", "student.training.per_device_train_batch_size=8",
                 "student.training.warmup_steps=20", "student.training.save_steps=100000",
                 "student.training.logging_steps=50", "student.training.eval_strategy=no",
                 "student.training.weight_decay=0.0"]
    recipe = load_recipe(None, overrides)
    if not cl:
        # L_LM only: the contrastive term is switched off by training on the LM loss alone.
        import purecover.train.losses as losses

        original = losses.contrastive_loss
        losses.contrastive_loss = lambda scores, selected: scores.sum() * 0.0
    t0 = time.perf_counter()
    try:
        summary = run_train_stage(recipe, show_progress=False)
    finally:
        if not cl:
            losses.contrastive_loss = original
    return {"lm_weight": lm_weight, "contrastive": cl, "steps": steps, "seconds": round(time.perf_counter() - t0, 1),
            # held out = the student's test split (used for neither training nor τ3)
            "heldout_subset_f1": summary["test_subset_f1"], "tau3": summary["tau3"],
            "train_loss": summary["train_loss"], "heldout_questions": summary["test_questions"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--k1", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=["cl+lm", "cl", "lm"])
    parser.add_argument("--out", default="benchmarks/results/learnability.json")
    args = parser.parse_args()

    from purecover.data.samples import sample_data_dir
    from purecover.demo.tiny import build_tiny_model
    from purecover.utils.io import atomic_write_json
    from purecover.utils.provenance import package_versions

    samples = sample_data_dir()
    if samples is None:
        print("the Qwen2 tokenizer of the sample data is needed (set PURECOVER_SAMPLE_DATA)", file=sys.stderr)
        return 1
    settings = {"cl+lm": (1.0, True), "cl": (0.0, True), "lm": (1.0, False)}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny_model(Path(tmp) / "tiny", samples / "qwen2_tokenizer", hidden_size=128, num_layers=2,
                                num_heads=4, num_kv_heads=2, intermediate_size=256, seed=args.seed)
        for name in args.variants:
            lm_weight, cl = settings[name]
            results[name] = train_variant(Path(tmp), tiny, name, lm_weight, cl, args.steps, args.questions, args.k1,
                                          args.seed)
            print(name, json.dumps(results[name]), flush=True)
    atomic_write_json(args.out, {"benchmark": "learnability", "task": "colour-match", "k1": args.k1,
                                 "questions": args.questions, "target_f1": 0.9, "results": results,
                                 "pass": results.get("cl+lm", {}).get("heldout_subset_f1", 0) >= 0.9,
                                 "versions": package_versions()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
