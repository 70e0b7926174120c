"""The passage-readout students the experiments train on a label run's questions (`student`: the real ``purecover
train`` and ``export`` commands, then the exported selector on the seed's test questions in every candidate order of
`ORDERS`), with the training settings of benchmarks/student_readout.py (`STUDENT`, `READOUTS`, `settings`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .harness import log
from .readout_runs import check_disjoint, copy_labels, load, run_command, split_of
from .real_runs import chance_coverage, coverage_purity, mean, prf, ranking_auc, read_jsonl, shown

# Training settings shared by every readout: one pass over the training questions, each shown once in a seeded
# random order, one question a step; the same loss for each readout (L_CL + per-passage BCE, no L_LM), so a
# comparison of readouts is of where the scores are read.
STUDENT = ["student.training.max_steps=-1", "student.training.num_train_epochs=1",
           "student.training.per_device_train_batch_size=1", "student.training.learning_rate=5e-4",
           "student.training.warmup_steps=10", "student.training.save_steps=100", "student.lm_weight=0.0",
           "student.bce_weight=1.0", "student.candidate_shuffles=1"]
READOUTS = {"passage": ["student.readout=passage"], "identifier": ["student.readout=identifier"],
            # the passage readout scored by a trained linear head instead of the ' yes' logit (student.passage_score)
            "passage_head": ["student.readout=passage", "student.passage_score=head"]}


def settings(readout: str) -> list[str]:
    """The recipe overrides of a `readout` student: `STUDENT`, then the readout's own (`READOUTS`)."""
    return [*STUDENT, *READOUTS[readout]]


ORDERS = ("retrieval", "reversed", "shuffled")


def score_orders(selector: Any, cands: dict[str, dict], qids: Sequence[str], seed: int) -> dict[str, Any]:
    """The selector on `qids` in every order of `ORDERS`: support figures, AUC, Coverage@2, seconds/question."""
    out: dict[str, Any] = {}
    for name in ORDERS:
        chosen, aucs, cov2, cov2_chance, t_sel = {}, [], [], [], 0.0
        for q in qids:
            c = cands[q]
            order = shown(name, q, len(c["docs"]), seed)
            docs = [c["docs"][k] for k in order]
            t0 = time.perf_counter()
            res = selector.select(c["question"], docs)
            t_sel += time.perf_counter() - t0
            ids = [d["doc_id"] for d in docs]
            gold = set(c["gold_doc_ids"])
            chosen[q] = [ids[k] for k in res.indices]
            ranked = [ids[k] for k in sorted(range(len(ids)), key=lambda k: (-res.logits[k], k))]
            auc = ranking_auc(res.logits, [k for k, d in enumerate(ids) if d in gold])
            if auc is not None:
                aucs.append(auc)
            cov2.append(coverage_purity(ranked, gold, 2)[0])
            cov2_chance.append(chance_coverage(len(ids), sum(d in gold for d in ids), len(gold), 2))
        fig = support_figures(chosen, cands, qids)
        fig.update({"auc": mean(aucs), "auc_chance": 0.5, "coverage@2": mean(cov2),
                    "coverage@2_chance": mean(cov2_chance),
                    "seconds_per_question": round(t_sel / max(len(qids), 1), 4)})
        out[name] = fig
    return out


def support_figures(chosen: dict[str, list[str]], cands: dict[str, dict], qids: Sequence[str]) -> dict[str, Any]:
    """Support P/R/F1 of the sets `chosen` against the gold passages, mean |S|, and retrieval top-|S| of the same
    sizes."""
    rows, top_s = [], []
    for q in qids:
        gold = set(cands[q]["gold_doc_ids"])
        rows.append((*prf(chosen[q], gold), len(chosen[q])))
        top_s.append(prf([d["doc_id"] for d in cands[q]["docs"]][: max(1, len(chosen[q]))], gold)[2])
    arr = np.array(rows) if rows else np.zeros((0, 4))
    return {"questions": len(qids), "precision": mean(arr[:, 0]), "recall": mean(arr[:, 1]), "f1": mean(arr[:, 2]),
            "mean_size": mean(arr[:, 3]), "retrieval_top_s_f1": mean(top_s)}


def student(dataset: str, readout: str, seed: int, work: Path, source: Path, settings: Sequence[str],
            tag: str = "", keep: set[str] | None = None) -> dict[str, Any]:
    """Train + export one student of `readout` with the recipe overrides `settings` (subprocesses), then score it
    on its seed's test questions."""
    from purecover.models.selector import Selector

    run = work / dataset / f"{readout}{tag}-seed{seed}"
    copy_labels(source, run, keep)
    extra = [f"seed={seed}", *settings]
    recipe = load(dataset, run, extra)
    train = run_command("train", dataset, run, extra)
    export = run_command("export", dataset, run, extra)
    summary = json.loads((run / "train.run.json").read_text())["summary"]
    split = split_of(run, seed, recipe)
    check_disjoint(split, summary, str(run))
    cands = {c["qid"]: c for c in read_jsonl(run / "candidates.jsonl")}
    test = sorted(q for q, s in split.items() if s == "test" and cands[q]["gold_doc_ids"])
    trained = {q for q, s in split.items() if s == "train"}
    assert not trained & set(test), "a test question was trained on"
    selector = Selector.from_pretrained(run / "selector", device="cpu", dtype="float32")
    out = {"readout": readout, "seed": seed, "train": train, "export": export, "steps": summary["global_step"],
           "tau3": summary["tau3"], "calib_subset_f1": summary.get("calib_subset_f1"),
           "questions": {k: summary[f"{k}_questions"] for k in ("train", "calib", "test")},
           "test_qids_sha": qids_digest(test), "orders": score_orders(selector, cands, test, seed)}
    selector.close()
    r = out["orders"]
    log(f"{dataset} {readout}{tag} seed {seed}: F1 {r['retrieval']['f1']} / {r['reversed']['f1']} / "
        f"{r['shuffled']['f1']} (retrieval / reversed / shuffled order), |S| {r['retrieval']['mean_size']}, AUC "
        f"{r['retrieval']['auc']}, Coverage@2 {r['retrieval']['coverage@2']} (chance "
        f"{r['retrieval']['coverage@2_chance']}); trained {train['seconds']} s, peak RSS {train['peak_rss_mb']} MB")
    return out


def qids_digest(qids: Sequence[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(sorted(qids)).encode()).hexdigest()[:16]
