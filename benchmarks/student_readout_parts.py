"""The helpers of `student_readout.py` (the experiment, its targets and rows are there): the baselines (retrieval,
bi-encoder, ICR), the overfit check and the selection timing. The students themselves (`student`, `score_orders`,
the settings) are the library's (`benchlib.students`, shared with own_steps.py), as are the questions, their
labels, the runs' recipes and stages and the split (`benchlib.readout_runs`, shared with answers.py); the scoring
and split functions shared with real_models.py are in `benchlib.real_runs`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from benchlib.harness import log
from benchlib.readout_runs import (
    copy_labels,
    load,
    run_command,
    split_of,
)
from benchlib.real_runs import (
    biencoder_figures,
    mean,
    prf,
    ranking_auc,
    read_jsonl,
)
from benchlib.students import ORDERS as ORDERS
from benchlib.students import qids_digest, score_orders
from benchlib.students import student as student

# ------------------------------------------------------------------------------------------------ baselines


def icr_per_layer(dataset: str, source: Path, work: Path, qids: Sequence[str]) -> dict[str, np.ndarray]:
    """ICR's per-layer calibrated scores (layers, K) of each question, with SmolLM2, cached in work/.../icr.json."""
    cache = work / dataset / "icr.json"
    stored: dict[str, list[list[float]]] = json.loads(cache.read_text()) if cache.is_file() else {}
    todo = [q for q in qids if q not in stored]
    if todo:
        from purecover.eval.icr import icr_scores
        from purecover.models.loading import load_causal_lm, load_tokenizer
        from purecover.utils.io import atomic_write_json

        model = load_causal_lm("smollm2-135m-instruct", dtype="float32", device="cpu").eval()
        tokenizer = load_tokenizer("smollm2-135m-instruct")
        cands = {c["qid"]: c for c in read_jsonl(source / "candidates.jsonl")}
        t0 = time.perf_counter()
        for i, q in enumerate(todo, 1):
            scores = icr_scores(model, tokenizer, cands[q]["question"], cands[q]["docs"], "all",
                                max_passage_tokens=64)
            stored[q] = scores.calibrated.tolist()  # (layers, K): every layer, rows in layer order
            if i % 50 == 0 or i == len(todo):
                atomic_write_json(cache, stored)
                log(f"{dataset} ICR: {i}/{len(todo)} questions, {(time.perf_counter() - t0) / i:.2f} s each")
    return {q: np.asarray(stored[q]) for q in qids}


def baselines(dataset: str, seed: int, source: Path, work: Path, icr: bool = True) -> dict[str, Any]:
    """Retrieval, bi-encoder, ICR and ICR + retrieval on the test questions of `seed` (ICR's layers and fusion
    weight chosen on that seed's calibration questions). Retrieval top-|S| is with each student's figures."""
    from purecover.eval.icr import choose_fusion_weight, choose_icr_layers, fuse_with_rank

    recipe = load(dataset, work / dataset / "probe", [f"seed={seed}"])
    split = split_of(source, seed, recipe)
    cands = {c["qid"]: c for c in read_jsonl(source / "candidates.jsonl")}
    calib = sorted(q for q, s in split.items() if s == "calib" and cands[q]["gold_doc_ids"])
    test = sorted(q for q, s in split.items() if s == "test" and cands[q]["gold_doc_ids"])

    def gold_pos(q: str) -> list[int]:
        gold = set(cands[q]["gold_doc_ids"])
        return [k for k, d in enumerate(cands[q]["docs"]) if d["doc_id"] in gold]

    def top(q: str, scores: Sequence[float], k: int) -> list[str]:
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [cands[q]["docs"][i]["doc_id"] for i in order[:k]]

    def f1_of(ranked: dict[str, list[str]]) -> float | None:
        return mean([prf(ranked[q], set(cands[q]["gold_doc_ids"]))[2] for q in test])

    out: dict[str, Any] = {"seed": seed, "questions": len(test), "calib_questions": len(calib),
                           "test_qids_sha": qids_digest(test)}
    for k in (2, 5):
        out[f"retrieval_top{k}_f1"] = f1_of({q: [d["doc_id"] for d in cands[q]["docs"][:k]] for q in test})
    out["biencoder_top2_f1"] = biencoder_figures(cands, test, {q: 2 for q in test})["biencoder_top2_f1"]
    if not icr:
        log(f"{dataset} seed {seed} baselines: retrieval top-2 {out['retrieval_top2_f1']} top-5 "
            f"{out['retrieval_top5_f1']}, bi-encoder top-2 {out['biencoder_top2_f1']} (ICR not run)")
        return out
    per_layer = icr_per_layer(dataset, source, work, [*calib, *test])
    choice = choose_icr_layers([per_layer[q] for q in calib], [gold_pos(q) for q in calib])
    icr = {q: per_layer[q][list(choice.layers)].sum(0) for q in [*calib, *test]}
    fusion = choose_fusion_weight([icr[q] for q in calib], [gold_pos(q) for q in calib])
    fused = {q: fuse_with_rank(icr[q], fusion.weight) for q in test}
    out["icr"] = {"layers": choice.setting, "calib_auc": round(choice.auc, 4),
                  "auc": mean([a for q in test if (a := ranking_auc(list(icr[q]), gold_pos(q))) is not None]),
                  "top2_f1": f1_of({q: top(q, icr[q], 2) for q in test})}
    out["icr_fused"] = {"weight": fusion.weight,
                        "auc": mean([a for q in test if (a := ranking_auc(list(fused[q]), gold_pos(q)))
                                     is not None]),
                        "top2_f1": f1_of({q: top(q, fused[q], 2) for q in test})}
    log(f"{dataset} seed {seed} baselines: retrieval top-2 {out['retrieval_top2_f1']} top-5 {out['retrieval_top5_f1']}"
        f", bi-encoder top-2 {out['biencoder_top2_f1']}, ICR top-2 {out['icr']['top2_f1']} (layers "
        f"{choice.setting}), ICR + retrieval top-2 {out['icr_fused']['top2_f1']} (weight {fusion.weight})")
    return out


# ------------------------------------------------------------------------------------------------ overfit


def overfit(dataset: str, readout: str, source: Path, work: Path, settings: Sequence[str], reshuffle: bool = False
            ) -> dict[str, Any]:
    """`readout` (its recipe overrides `settings`) trained on 4 training questions (seed 0) for 20 steps at lr 2e-3,
    then its train AUC on those questions in retrieval order and reversed. `reshuffle` False: trained in retrieval
    order (the slots can be memorised, whatever the readout); True: a fresh random order each epoch (5 epochs), so
    only a student that ties the score to the passage's content can fit them."""
    from purecover.models.selector import Selector

    recipe = load(dataset, work / dataset / "probe", ["seed=0"])
    split = split_of(source, 0, recipe)
    cands = {c["qid"]: c for c in read_jsonl(source / "candidates.jsonl")}
    four = sorted(q for q, s in split.items() if s == "train" and cands[q]["gold_doc_ids"])[:4]
    run = work / dataset / f"overfit-{readout}{'-reshuffled' if reshuffle else ''}"
    copy_labels(source, run, set(four))
    order = ["student.candidate_shuffles=1", "student.reshuffle_each_epoch=true"] if reshuffle else [
        "student.candidate_shuffles=0", "student.reshuffle_each_epoch=false"]
    extra = ["seed=0", *settings, "student.eval_fraction=0", "student.training.max_steps=20",
             "student.training.num_train_epochs=5", "student.training.learning_rate=2e-3",
             "student.training.warmup_steps=0", *order]
    run_command("train", dataset, run, extra)
    run_command("export", dataset, run, extra)
    selector = Selector.from_pretrained(run / "selector", device="cpu", dtype="float32")
    out = {"questions": four}
    for name in ("retrieval", "reversed"):
        out[f"train_auc_{name}"] = score_orders(selector, cands, four, 0)[name]["auc"]
    selector.close()
    log(f"{dataset} overfit {readout}{' (fresh order each epoch)' if reshuffle else ''}: train AUC "
        f"{out['train_auc_retrieval']} in retrieval order, {out['train_auc_reversed']} reversed")
    return out


def timing(dataset: str, work: Path, seed: int, readouts: Sequence[str], n: int = 40) -> dict[str, Any] | None:
    """Selection seconds per question of the `readouts`' exported selectors (seed `seed`'s students, else the
    overfit part's: the time does not depend on the weights) on the same `n` questions, interleaved question by
    question (one torch thread)."""
    import torch

    from purecover.models.selector import Selector

    dirs = {r: work / dataset / f"{r}-seed{seed}" / "selector" for r in readouts}
    if not all(d.is_dir() for d in dirs.values()):
        dirs = {r: work / dataset / f"overfit-{r}" / "selector" for r in readouts}
    if not all(d.is_dir() for d in dirs.values()):
        return None
    torch.set_num_threads(1)
    sel = {r: Selector.from_pretrained(d, device="cpu", dtype="float32") for r, d in dirs.items()}
    cands = [c for c in read_jsonl(dirs["passage"].parent / "candidates.jsonl")][-n:]
    seconds = {r: 0.0 for r in sel}
    for c in cands:
        for r, s in sel.items():
            t0 = time.perf_counter()
            s.select(c["question"], c["docs"])
            seconds[r] += time.perf_counter() - t0
    out = {f"{r}_seconds_per_question": round(t / len(cands), 4) for r, t in seconds.items()}
    out["ratio"] = round(seconds["passage"] / seconds["identifier"], 3)
    out["questions"] = len(cands)
    out["selectors"] = dirs["passage"].parent.name.replace("passage", "<readout>")
    log(f"{dataset} timing: {out}")
    return out

