"""Real-model runs on the sample data, first written for `real_models.py` (the experiment, its headline command,
targets and rows are there): the label
sources and the split, recipes and labelled runs (`recipe_for`, `label_source`, `split_for_seed`, `splits_of`),
scoring sets and rankings against the gold passages (`set_figures`, `ranking_auc`, `coverage_purity`,
`chance_coverage`), the baselines, and the teacher, student and QA parts.

`SOURCES`, the split's settings and these helpers are also used by teacher_layers.py, student_sweep.py,
released_code.py (which adds sources to `SOURCES`), student_readout_parts.py and answers.py. The set metrics are
purecover's (`purecover.metrics`); `prf` and `ranking_auc` are imported here for the experiments that read them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from purecover.metrics import prf as prf
from purecover.metrics import ranking_auc as ranking_auc
from purecover.utils.rundir_claim import mark_run_dir

from .harness import log

ROOT = Path(__file__).resolve().parents[2]
EVAL_FRACTION, CALIBRATION_SHARE = 0.4, 0.5
LABEL_SPLIT_SEED = 0  # the split of the parts that train no student (teacher labels, baselines); students: their seed
ORDERS = ("retrieval", "reversed", "shuffled")

# label sources: recipe overrides over configs/recipes/real_cpu/<dataset>.yaml
SOURCES: dict[str, dict[str, Any]] = {
    "oracle_proxy": {"overrides": ["teacher.steps=oracle", "teacher.estimator=embedding"],
                     "what": "oracle steps + all-MiniLM-L6-v2 cosines (no LLM: the oracle proxy)"},
    "smollm2_attention": {"overrides": ["teacher.model=smollm2-135m-instruct", "teacher.steps=oracle",
                                        "teacher.estimator=attention"], "splits": ("test",),
                          "what": "SmolLM2-135M-Instruct's attention, driven by the dataset's oracle steps"},
    "smollm2_attention_layers": {"overrides": ["teacher.model=smollm2-135m-instruct", "teacher.steps=oracle",
                                               "teacher.estimator=attention", "teacher.layers=[18,23]"],
                                 "splits": ("test",),
                                 "what": "SmolLM2-135M-Instruct's attention in layers 18 and 23 (chosen on calibration "
                                         "questions by benchmarks/teacher_layers.py), oracle steps"},
    "gemma_attention": {"overrides": ["teacher.model=gemma-3-270m", "teacher.steps=oracle",
                                      "teacher.estimator=attention"],
                        "what": "Gemma-3-270M's attention (full-attention layers, the default), oracle steps"},
    "gemma_attention_all_layers": {"overrides": ["teacher.model=gemma-3-270m", "teacher.steps=oracle",
                                                 "teacher.estimator=attention", "teacher.layers=all"],
                                   "splits": ("test",),
                                   "what": "Gemma-3-270M's attention averaged over all 18 layers (15 sliding)"},
    "smollm2_own_steps": {"overrides": ["teacher.model=smollm2-135m-instruct", "teacher.steps=model",
                                        "teacher.estimator=attention", "teacher.reply_prefix='[Step 1]:'",
                                        "teacher.max_new_tokens=160"], "splits": ("test",), "own_steps": True,
                          "what": "SmolLM2-135M-Instruct writes its own reasoning (reply started with '[Step 1]:', "
                                  "160 new tokens: chosen on calibration questions); its attention labels"},
}


# Labelling, training and answering in float32, as every stored figure was measured: the HotpotQA recipe labels,
# trains, fine-tunes the cross-encoder and answers in bfloat16 for its headline run's time (CPU-dependent,
# docs/guides/real-models.md); and the teacher's batch of 2, as the stored label runs were made (the label stage's
# hash holds it, so a run made before the recipes' batch of 1 resumes)
AS_MEASURED = ["teacher.dtype=float32", "teacher.batch_size=2", "student.training.bf16=false", "eval.dtype=float32",
               "eval.cross_encoder_ft_bf16=false"]


def recipe_for(dataset: str, run_dir: Path, extra: Sequence[str] = ()) -> Any:
    from purecover.config import load_recipe
    from purecover.data.samples import SAMPLE_FILES, sample_data_dir

    samples = sample_data_dir()
    if samples is None:
        raise SystemExit("real sample data not found: set PURECOVER_SAMPLE_DATA or put ../shared/data beside the repo")
    return load_recipe(ROOT / "configs" / "recipes" / "real_cpu" / f"{dataset}.yaml",
                       [f"run_dir={run_dir}", f"data.path={samples / SAMPLE_FILES[dataset]}", "data.sample=null",
                        f"student.eval_fraction={EVAL_FRACTION}", f"student.calibration_share={CALIBRATION_SHARE}",
                        # the layers every source was measured with (the recipes now read SmolLM2's layers 18 and
                        # 23); a source that reads others says so in its own overrides
                        "teacher.layers=full_attention", *AS_MEASURED, *extra])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class _Qid:
    qid: str


def split_for_seed(qids: Sequence[str], seed: int, eval_fraction: float = EVAL_FRACTION,
                   calibration_share: float = CALIBRATION_SHARE) -> dict[str, str]:
    """``train``, ``calib`` or ``test`` of each of `qids` (in their order) as the train stage splits them at `seed`:
    by its own function, `purecover.train.data.split_examples` (`question_split` of each qid, and its rule that
    with no training question every question trains)."""
    from purecover.train.data import split_examples

    train, calib, test = split_examples([_Qid(q) for q in qids], eval_fraction, seed, calibration_share)
    name = {e.qid: part for part, items in (("train", train), ("calib", calib), ("test", test)) for e in items}
    return {q: name[q] for q in qids}


def splits_of(qids: Sequence[str]) -> dict[str, str]:
    """The split of the parts that train no student (teacher labels and their re-tuning, the baselines, the sources
    that label only some splits; teacher_layers.py, student_sweep.py and released_code.py's label part import it):
    `split_for_seed` at `LABEL_SPLIT_SEED` (0). A student's split is `student_split`, at its own seed."""
    return split_for_seed(qids, LABEL_SPLIT_SEED)


def student_split(run: Path, recipe: Any) -> dict[str, str]:
    """The split the train stage makes of the student run `run` trained with `recipe`: `split_for_seed` at the
    recipe's ``seed``, ``student.eval_fraction`` and ``student.calibration_share``, over the questions it splits
    (those of labels.jsonl with a usable label, `purecover.train.data.read_labelled_questions`)."""
    from purecover.train.data import read_labelled_questions

    questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
    return split_for_seed([q.qid for q in questions], recipe.seed, recipe.student.eval_fraction,
                          recipe.student.calibration_share)


def mean(xs: Sequence[float]) -> float | None:
    return round(float(np.mean(xs)), 4) if len(xs) else None


def support_of(run: Path, method: str, k: str | int, cands: dict[str, dict]) -> dict[str, Any]:
    """Support P/R/F1 against the gold passages and mean |S| of an evaluation's sets of `method` at budget `k`
    (its ``eval/predictions/<method>@<k>.jsonl`` in run directory `run`), over every question it holds."""
    rows = read_jsonl(run / "eval" / "predictions" / f"{method}@{k}.jsonl")
    figs = [(*prf(r["doc_ids"], set(cands[r["qid"]]["gold_doc_ids"])), len(r["doc_ids"])) for r in rows]
    return {"precision": mean([f[0] for f in figs]), "recall": mean([f[1] for f in figs]),
            "f1": mean([f[2] for f in figs]), "mean_size": mean([f[3] for f in figs])}


def set_figures(chosen: dict[str, list[str]], cands: dict[str, dict], qids: Sequence[str]) -> dict[str, Any]:
    """Support P/R/F1 against the gold passages and mean size of the sets `chosen` (doc ids) over `qids`, and
    retrieval top-|S| (the same size per question), top-2 and top-5 on the same questions."""
    rows, top_s, top2, top5 = [], [], [], []
    for q in qids:
        gold = set(cands[q]["gold_doc_ids"])
        ids = [d["doc_id"] for d in cands[q]["docs"]]
        s = chosen[q]
        rows.append((*prf(s, gold), len(s)))
        top_s.append(prf(ids[: max(1, len(s))], gold)[2])
        top2.append(prf(ids[:2], gold)[2])
        top5.append(prf(ids[:5], gold)[2])
    arr = np.array(rows) if rows else np.zeros((0, 4))
    return {"questions": len(qids), "precision": mean(arr[:, 0]), "recall": mean(arr[:, 1]), "f1": mean(arr[:, 2]),
            "mean_size": mean(arr[:, 3]), "retrieval_top_s_f1": mean(top_s), "retrieval_top2_f1": mean(top2),
            "retrieval_top5_f1": mean(top5)}


def stage_seconds(run_dir: Path, stage: str) -> float:
    """Start to end of a complete stage of `run_dir`, from its manifest (``<stage>.run.json``), in seconds."""
    import datetime as dt

    manifest = json.loads((run_dir / f"{stage}.run.json").read_text())
    if manifest["summary"]["status"] != "complete":
        raise RuntimeError(f"{run_dir}: stage {stage} is not complete")
    start, end = (dt.datetime.fromisoformat(manifest[k]) for k in ("started", "finished"))
    return (end - start).total_seconds()


_ENCODER: list[Any] = []


def biencoder_figures(cands: dict[str, dict], qids: Sequence[str], sizes: dict[str, int]) -> dict[str, Any]:
    """The bi-encoder baseline on the same questions: the candidates ranked by all-MiniLM-L6-v2 cosine to the
    question (the bundled copy), support F1 of its top-|S| (`sizes`: the compared set's size per question), top-2
    and top-5."""
    from purecover.data.retrieval.dense import load_sentence_transformer

    if not _ENCODER:
        _ENCODER.append(load_sentence_transformer("sentence-transformers/all-MiniLM-L6-v2"))
    enc = _ENCODER[0]
    top_s, top2, top5 = [], [], []
    for q in qids:
        c = cands[q]
        texts = [f"{d.get('title') or ''}\n{d.get('text') or ''}" for d in c["docs"]]
        emb = enc.encode([c["question"], *texts], normalize_embeddings=True, convert_to_numpy=True)
        ranked = [c["docs"][k]["doc_id"] for k in np.argsort(-(emb[1:] @ emb[0]), kind="stable")]
        gold = set(c["gold_doc_ids"])
        top_s.append(prf(ranked[: max(1, sizes.get(q, 2))], gold)[2])
        top2.append(prf(ranked[:2], gold)[2])
        top5.append(prf(ranked[:5], gold)[2])
    return {"biencoder_top_s_f1": mean(top_s), "biencoder_top2_f1": mean(top2), "biencoder_top5_f1": mean(top5)}


# ----------------------------------------------------------------------------------------------- teacher


def label_source(dataset: str, source: str, work: Path, test_qids: Sequence[str], own_steps: int) -> Path:
    """Data (+ calibrate) + label for `source`; returns the run directory. A source with ``splits`` labels only
    the questions of those splits of `LABEL_SPLIT_SEED` (CPU time: 5-15 s a question for the 135M-270M models on 2
    cores); one with ``own_steps`` only the first `own_steps` test questions. Students need every question
    labelled (`student_part` refuses the others)."""
    from purecover.data.data_stage import run_data_stage
    from purecover.teacher.calibrate_stage import run_calibrate_stage
    from purecover.teacher.label_stage import run_label_stage

    spec = SOURCES[source]
    run = work / dataset / f"teacher-{source}"
    extra = list(spec["overrides"])
    recipe = recipe_for(dataset, run, extra)
    run_data_stage(recipe, show_progress=False)
    if spec.get("splits"):  # only some questions: keep just their candidates
        cands = read_jsonl(run / "candidates.jsonl")
        split = splits_of([c["qid"] for c in cands])
        keep = set(list(test_qids)[:own_steps]) if spec.get("own_steps") else {
            q for q, s in split.items() if s in spec["splits"]}
        kept = [c for c in cands if c["qid"] in keep]
        if len(kept) != len(cands):
            from purecover.utils.io import write_jsonl_atomic

            write_jsonl_atomic(run / "candidates.jsonl", kept)
            (run / "data.run.json").unlink(missing_ok=True)  # not the data stage's output any more
    if recipe.teacher.estimator == "attention" and recipe.teacher.calibrate:
        run_calibrate_stage(recipe, show_progress=False)
    t0 = time.perf_counter()
    summary = run_label_stage(recipe, show_progress=False)
    log(f"{dataset} {source}: labelled {summary.questions} questions in {time.perf_counter() - t0:.0f} s "
        f"(fallback {summary.fallback_rate})")
    return run


def tuned_on_calibration(run: Path, dataset: str, source: str, calib: Sequence[str], test: Sequence[str]
                         ) -> dict[str, Any] | None:
    """Re-solve the stored scores over `purecover.teacher.tune`'s default grid: chosen on `calib`, shown on `test`."""
    from purecover.teacher.defaults import resolve_params
    from purecover.teacher.tune import (
        default_grid,
        evaluate_setting,
        grid_points,
        labels_bias,
        setting_estimates,
    )
    from purecover.teacher.tune import load_questions as tune_questions

    recipe = recipe_for(dataset, run, SOURCES[source]["overrides"])
    questions = {q.qid: q for q in tune_questions(run / "labels.jsonl", run / "candidates.jsonl")}
    cq = [questions[q] for q in calib if q in questions and questions[q].gold]
    tq = [questions[q] for q in test if q in questions and questions[q].gold]
    if not cq or not tq:
        return None
    base = resolve_params(recipe.teacher)
    bias = labels_bias(recipe, run / "labels.jsonl") if base.w_source == "attention" else None
    best = None
    for point in grid_points(default_grid(base)):
        params = resolve_params(recipe.teacher, **point)
        fig = evaluate_setting(cq, params, pairs=setting_estimates(cq, params, bias))
        if fig["fallback_rate"] <= 0.05 and (best is None or fig["f1"] > best[1]["f1"]):
            best = (point, fig, params)
    if best is None:
        return None
    point, fig, params = best
    held = evaluate_setting(tq, params, pairs=setting_estimates(tq, params, bias))
    return {"setting": point, "calib_f1": fig["f1"], "test": dict(held)}


def baselines_part(dataset: str, work: Path) -> dict[str, Any]:
    """Retrieval (BM25) and bi-encoder (all-MiniLM-L6-v2) top-2 / top-5 support figures on the test split of
    `LABEL_SPLIT_SEED` (`splits_of`)."""
    from purecover.data.data_stage import run_data_stage

    probe = recipe_for(dataset, work / dataset / "split-probe")
    run_data_stage(probe, show_progress=False)
    cands = {c["qid"]: c for c in read_jsonl(probe.run_path / "candidates.jsonl")}
    split = splits_of(list(cands))
    test = sorted(q for q, s in split.items() if s == "test" and cands[q]["gold_doc_ids"])
    out: dict[str, Any] = {"questions": len(test), "split_seed": LABEL_SPLIT_SEED}
    for k in (2, 5):
        fig = set_figures({q: [d["doc_id"] for d in cands[q]["docs"][:k]] for q in test}, cands, test)
        out[f"retrieval_top{k}"] = {key: fig[key] for key in ("precision", "recall", "f1")}
    out.update(biencoder_figures(cands, test, {q: 2 for q in test}))
    out.pop("biencoder_top_s_f1", None)
    return out


def teacher_part(dataset: str, sources: Sequence[str], work: Path, own_steps: int) -> dict[str, Any]:
    """Label `sources` and score the labels on the calibration and test splits of `LABEL_SPLIT_SEED` (`splits_of`)."""
    out: dict[str, Any] = {}
    from purecover.data.data_stage import run_data_stage

    probe = recipe_for(dataset, work / dataset / "split-probe")  # the questions and their split, once
    run_data_stage(probe, show_progress=False)
    split = splits_of([c["qid"] for c in read_jsonl(probe.run_path / "candidates.jsonl")])
    test_qids = sorted(q for q, s in split.items() if s == "test")
    for source in sources:
        t0 = time.perf_counter()
        run = label_source(dataset, source, work, test_qids, own_steps)
        seconds = time.perf_counter() - t0
        cands = {c["qid"]: c for c in read_jsonl(run / "candidates.jsonl")}
        labels = {r["qid"]: r for r in read_jsonl(run / "labels.jsonl")}
        chosen = {q: [cands[q]["docs"][k]["doc_id"] for k in r.get("selected") or []] for q, r in labels.items()}
        row: dict[str, Any] = {"what": SOURCES[source]["what"], "overrides": SOURCES[source]["overrides"],
                               "split_seed": LABEL_SPLIT_SEED, "seconds_total": round(seconds, 1),
                               "seconds_per_question": round(seconds / max(len(labels), 1), 2)}
        for name in ("calib", "test"):
            qids = [q for q in labels if split.get(q) == name and cands[q]["gold_doc_ids"]
                    and labels[q].get("status") != "error"]
            fig = set_figures(chosen, cands, qids)
            fig["fallback_rate"] = mean([float(labels[q].get("status") == "fallback") for q in qids])
            row[name] = fig
        parsed = [r for r in labels.values() if r.get("status") != "error"]
        row["parse_rate"] = mean([float(not any(c != "min_select" for c in (r.get("fallback_reasons") or [])))
                                  for r in parsed])
        if any(r.get("attention") for r in labels.values()):
            calib = [q for q, s in split.items() if s == "calib"]
            try:
                row["tuned_on_calib"] = tuned_on_calibration(run, dataset, source, calib, test_qids)
            except ValueError as exc:  # e.g. labels resumed across a change of the bias key's wording
                row["tuned_on_calib"] = {"error": str(exc)}
        label_run = json.loads((run / "label.run.json").read_text())
        row["layers"] = label_run["summary"].get("layers")
        out[source] = row
        log(f"{dataset} {source}: test F1 {row['test']['f1']} (P {row['test']['precision']}, |S| "
            f"{row['test']['mean_size']}) vs retrieval top-|S| {row['test']['retrieval_top_s_f1']}, top-2 "
            f"{row['test']['retrieval_top2_f1']}; tuned {((row.get('tuned_on_calib') or {}).get('test') or {}).get('f1')}")
    return out


# ----------------------------------------------------------------------------------------------- student


def shown(name: str, qid: str, n: int, seed: int) -> list[int]:
    if name == "retrieval":
        return list(range(n))
    if name == "reversed":
        return list(range(n - 1, -1, -1))
    from purecover.train.data import candidate_order

    return candidate_order(qid, n, seed, 10_000)  # a view no training epoch uses


def coverage_purity(ranked: list[str], gold: set[str], k: int) -> tuple[float, float]:
    """Coverage@k (gold passages among the first `k` of `ranked`, over every gold passage, retrieved or not) and
    Purity@k (over the passages among the first `k`)."""
    top = ranked[:k]
    hit = len(set(top) & gold)
    return (hit / len(gold) if gold else 0.0), (hit / len(top) if top else 0.0)


def chance_coverage(n: int, g: int, n_gold: int, k: int) -> float:
    """The expected `coverage_purity` Coverage@k of a uniformly random order of `n` candidates of which `g` are
    gold, with `n_gold` gold passages in all (retrieved or not): each of the first min(k, n) positions holds a gold
    candidate with probability g / n, so g · min(k, n) / (n · n_gold); 0.0 without a candidate or a gold passage."""
    return g * min(k, n) / (n * n_gold) if n and n_gold else 0.0


# The student of this benchmark: the paper's form (issue 29), pinned here because the real_cpu recipes have since
# moved to the passage readout (benchmarks/student_readout.py measures that one): the identifier readout, L_CL +
# L_LM, 150 steps of 2 questions at learning rate 5e-4 (the recipe's), a fixed seeded shuffle per question.
# `--student-set` overrides come after these.
PAPER_FORM_STUDENT = ("student.readout=identifier", "student.lm_weight=1.0", "student.bce_weight=0.0",
                      "student.reshuffle_each_epoch=false", "student.training.max_steps=150",
                      "student.training.per_device_train_batch_size=2")


def student_part(dataset: str, source: str, seed: int, work: Path, settings: Sequence[str], tag: str = ""
                 ) -> dict[str, Any]:
    """Train the pretrained student (`PAPER_FORM_STUDENT`, then `settings`) on `source`'s labels at recipe seed
    `seed`, export it, and score the exported `Selector` (either readout, as a user runs it) on the test split of
    that seed (`student_split`, the train stage's split) in every order. `tag` names a student run of other
    settings beside the plain one (run directory ``student-{source}{tag}-seed{seed}``)."""
    from purecover.models.selector import Selector
    from purecover.train.export_stage import run_export_stage
    from purecover.train.train_stage import run_train_stage

    if SOURCES[source].get("splits") or SOURCES[source].get("own_steps"):
        raise SystemExit(f"{source} labels only some questions of the seed-{LABEL_SPLIT_SEED} split: a student "
                         "needs labels of every question (choose another --student-sources)")
    labelled = work / dataset / f"teacher-{source}"
    run = work / dataset / f"student-{source}{tag}-seed{seed}"
    mark_run_dir(run)  # assembled here: the stages may write into it
    for name in ("candidates.jsonl", "labels.jsonl"):
        if not (run / name).is_file() or (run / name).read_bytes() != (labelled / name).read_bytes():
            shutil.copyfile(labelled / name, run / name)
    recipe = recipe_for(dataset, run, [f"seed={seed}", *PAPER_FORM_STUDENT, *settings])
    t0 = time.perf_counter()
    summary = run_train_stage(recipe, show_progress=False).to_json_dict()
    train_seconds = time.perf_counter() - t0
    run_export_stage(recipe)
    cands = {c["qid"]: c for c in read_jsonl(run / "candidates.jsonl")}
    split = student_split(run, recipe)
    counts = Counter(split.values())
    if any(counts[k] != summary[f"{k}_questions"] for k in ("train", "calib", "test")):
        raise RuntimeError(f"{run}: the split at seed {recipe.seed} ({dict(counts)}) is not the train stage's "
                           f"({ {k: summary[f'{k}_questions'] for k in ('train', 'calib', 'test')} })")
    test = sorted(q for q, s in split.items() if s == "test" and cands[q]["gold_doc_ids"])
    selector = Selector.from_pretrained(run / "selector", device="cpu", dtype="float32")
    out: dict[str, Any] = {"source": source, "seed": seed, "split_seed": recipe.seed,
                           "readout": selector.config.readout, "settings": [*PAPER_FORM_STUDENT, *settings],
                           "train_seconds": round(train_seconds, 1),
                           "steps": summary["global_step"], "train_examples": summary.get("train_examples"),
                           "tau3": summary["tau3"], "questions": {k: summary[f"{k}_questions"]
                                                                  for k in ("train", "calib", "test")},
                           "orders": {}}
    for name in ORDERS:
        t1 = time.perf_counter()
        orders = {q: shown(name, q, len(cands[q]["docs"]), seed) for q in test}
        results = selector.select_batch([cands[q]["question"] for q in test],
                                        [[cands[q]["docs"][k] for k in orders[q]] for q in test])
        chosen, aucs, cov, pur, cov2_chance = {}, [], {2: [], 5: []}, {2: [], 5: []}, []
        for q, res in zip(test, results):
            s, kept = res.logits, res.indices
            ids = [cands[q]["docs"][orders[q][k]]["doc_id"] for k in kept]
            chosen[q] = ids
            shown_ids = [cands[q]["docs"][k]["doc_id"] for k in orders[q]]
            ranked = [shown_ids[k] for k in sorted(range(len(s)), key=lambda k: -s[k])]
            gold = set(cands[q]["gold_doc_ids"])
            auc = ranking_auc([float(x) for x in s], [k for k, d in enumerate(shown_ids) if d in gold])
            if auc is not None:
                aucs.append(auc)
            cov2_chance.append(chance_coverage(len(shown_ids), sum(d in gold for d in shown_ids), len(gold), 2))
            for k in (2, 5):
                c, p = coverage_purity(ranked, gold, k)
                cov[k].append(c)
                pur[k].append(p)
        fig = set_figures(chosen, cands, test)
        fig.update(biencoder_figures(cands, test, {q: len(chosen[q]) for q in test}))
        fig.update({"auc": mean(aucs), "auc_questions": len(aucs), "auc_chance": 0.5, "coverage@2": mean(cov[2]),
                    "coverage@2_chance": mean(cov2_chance), "coverage@5": mean(cov[5]),
                    "purity@2": mean(pur[2]), "purity@5": mean(pur[5]),
                    "seconds_per_question": round((time.perf_counter() - t1) / max(len(test), 1), 3)})
        out["orders"][name] = fig
        if name == "retrieval":
            from purecover.utils.io import write_jsonl_atomic

            write_jsonl_atomic(run / "student_test_selections.jsonl",
                               [{"qid": q, "selected_doc_ids": chosen[q]} for q in test])
    selector.close()
    r = out["orders"]
    log(f"{dataset} student[{source}] seed {seed}: test F1 retrieval-order {r['retrieval']['f1']} reversed "
        f"{r['reversed']['f1']} shuffled {r['shuffled']['f1']} (|S| {r['retrieval']['mean_size']}) vs retrieval "
        f"top-|S| {r['retrieval']['retrieval_top_s_f1']} top-2 {r['retrieval']['retrieval_top2_f1']} top-5 "
        f"{r['retrieval']['retrieval_top5_f1']}; AUC retrieval-order {r['retrieval']['auc']} (chance 0.5), "
        f"Coverage@2 {r['retrieval']['coverage@2']} (chance {r['retrieval']['coverage@2_chance']}); test split of "
        f"seed {recipe.seed}; trained {train_seconds:.0f} s")
    return out


# ---------------------------------------------------------------------------------------------------- qa


def qa_part(dataset: str, source: str, seed: int, work: Path, generator: str) -> dict[str, Any]:
    """The evaluate stage on the test split: retrieval, gold passages, none, and the student's sets."""
    from purecover.eval.evaluate_stage import run_evaluate_stage

    student_run = work / dataset / f"student-{source}-seed{seed}"
    run = work / dataset / f"qa-{source}-seed{seed}"
    mark_run_dir(run)  # assembled here: the stages may write into it
    shutil.copyfile(student_run / "candidates.jsonl", run / "candidates.jsonl")
    sel = student_run / "student_test_selections.jsonl"
    qids = [json.loads(line)["qid"] for line in sel.read_text().splitlines() if line.strip()]
    cands = [c for c in read_jsonl(run / "candidates.jsonl") if c["qid"] in set(qids)]
    from purecover.utils.io import write_jsonl_atomic

    write_jsonl_atomic(run / "candidates.jsonl", cands)
    recipe = recipe_for(dataset, run, [f"seed={seed}", f"eval.generator={generator}", "eval.questions=all",
                                       f"eval.methods=[retrieval, gold_support, none, selections:{sel}=student]",
                                       "eval.budgets=[2, 5, 10]", "eval.table_budget=5"])
    t0 = time.perf_counter()
    run_evaluate_stage(recipe, show_progress=False)
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    out: dict[str, Any] = {"generator": generator, "questions": metrics["questions"],
                           "seconds": round(time.perf_counter() - t0, 1), "results": {}}
    for method, by_k in metrics["results"].items():
        for k, res in by_k.items():
            ci = res.get("ci") or {}
            out["results"][f"{method}@{k}"] = {"em": res.get("em"), "f1": res.get("f1"), "em_ci": ci.get("em"),
                                               "f1_ci": ci.get("f1"), "mean_k": res.get("mean_k")}
    log(f"{dataset} QA ({generator}): " + ", ".join(f"{m} EM {r['em']} F1 {r['f1']}" for m, r in out["results"].items()))
    return out

