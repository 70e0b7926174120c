"""Which layers of a small real teacher carry the passage signal? Layers chosen on calibration questions only.

    python benchmarks/teacher_layers.py [--dataset hotpotqa] [--models smollm2-135m-instruct,gemma-3-270m]
                                        [--ks 1,2,3,4,6] [--work build/real_models]
                                        [--out benchmarks/results/teacher_layers.json]

The real_models benchmark's split (`real_models.splits_of`) and recipe (`configs/recipes/real_cpu/<dataset>.yaml`
with ``teacher.steps: oracle``, ``teacher.estimator: attention``): the dataset's oracle reasoning steps drive each
model's attention over the real candidates. One capture pass per question keeps every layer apart
(`capture_segment_attention(..., per_layer=True)`); the position bias is measured per layer the same way on the
calibration sequence. Per layer, the label stage's own estimation and greedy (`estimate`, `fuse`, `solve`, the
recipe's λ, τ and temperatures) give the labels, scored against the gold passages:

* ``auc``: mean over questions of P(c_gold > c_other) for the coverage c_k = Σ_i e_i W_ki, 0.5 reads nothing;
* ``f1``: label F1 of the selected set (the figure real_models reports).

Choosing: among the layers the label stage would read for these questions (full-attention layers, and sliding ones
whose window reaches from the steps back to the first document), layers are ranked by their calibration AUC; the
top-k layers (k in ``--ks``) are averaged (the capture's
mean over layers and the bias's, exactly what ``teacher.layers: [..]`` computes) and the k with the best
calibration label F1 is kept. Only that choice is shown on the test split, beside ``full_attention`` (the
default), ``all`` and retrieval top-2 on the same questions. Per-layer test figures are stored for the plot but
never used to choose. Writes a per-layer plot beside the JSON (``teacher_layers.png``).

Target: on HotpotQA, the chosen layers' test label F1 above retrieval top-2 on the same questions. A run adds its
models and dataset to the figures already in --out.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import log
from benchlib.rows import Rows, above, machine_info, now

from purecover.metrics import prf, ranking_auc

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ("teacher.steps=oracle", "teacher.estimator=attention")


def score_layers(mats: Sequence[Any], biases: Any, questions: Sequence[dict], layer_sets: dict[str, list[int]],
                 params: Any) -> dict[str, dict[str, float]]:
    """Label figures of each named layer set (slots into the per-layer captures) over `questions`.

    mats[q]: (L, steps + 1, K1 + steps) per-layer capture of question q; biases: (L, K1) per-layer position bias.
    """
    import numpy as np

    from purecover.teacher.estimation import SegmentAttention, estimate
    from purecover.teacher.selection import fuse, solve

    out: dict[str, dict[str, float]] = {}
    for name, slots in layer_sets.items():
        pairs, aucs = [], []
        for m, q in zip(mats, questions):
            avg = np.asarray(m)[slots].mean(axis=0)
            attn = SegmentAttention.from_matrix(avg, len(q["doc_ids"]), len(q["steps"]))
            est = estimate(params, attn, None, np.asarray(biases)[slots].mean(axis=0))
            e, w = fuse(est.e, est.W, None, params)
            pairs.append((e, w))
            a = ranking_auc(list(np.asarray(w) @ np.asarray(e)),
                            [k for k, d in enumerate(q["doc_ids"]) if d in q["gold"]])
            if a is not None:
                aucs.append(a)
        result = solve(pairs, params)
        figs = []
        for i, q in enumerate(questions):
            n = int(result.n_selected[i])
            figs.append((*prf([q["doc_ids"][k] for k in result.selected[i, :n]], q["gold"]), n))
        out[name] = {"precision": round(statistics.mean(f[0] for f in figs), 4),
                     "recall": round(statistics.mean(f[1] for f in figs), 4),
                     "f1": round(statistics.mean(f[2] for f in figs), 4),
                     "mean_size": round(statistics.mean(f[3] for f in figs), 4),
                     "auc": round(statistics.mean(aucs), 4) if aucs else None}
    return out


def retrieval_top2(questions: Sequence[dict]) -> float:
    return round(statistics.mean(prf(q["doc_ids"][:2], q["gold"])[2] for q in questions), 4)


def capture_all(model: Any, tok: Any, records: Sequence[Any], prompt: Any, chunk_mb: int
                ) -> tuple[list[Any], list[int]]:
    """Per-layer segment attention of each question (oracle steps), one question per pass; and each question's
    distance in tokens from its first document to its first step (what a sliding layer must reach)."""
    import torch

    from purecover.teacher.capture import SegmentSpec, capture_segment_attention
    from purecover.teacher.layers import sequence_distance
    from purecover.teacher.prompts import build_reasoning_prompt, build_teacher_sequence

    mats, reach = [], []
    t0 = time.perf_counter()
    for i, rec in enumerate(records):
        steps = [s for s in rec.oracle_steps if s.strip()]
        text, doc_chars = build_reasoning_prompt(tok, rec.question, rec.docs, prompt)
        seq = build_teacher_sequence(tok, text, doc_chars, steps, (rec.answers or [""])[0])
        ids = torch.tensor([seq.input_ids])
        spec = SegmentSpec.of([*seq.step_spans, seq.answer_span], [*seq.doc_spans, *seq.step_spans])
        (m,) = capture_segment_attention(model, ids, torch.ones_like(ids), [spec], layers="all",
                                         max_chunk_bytes=chunk_mb << 20, per_layer=True)
        mats.append(m.numpy())
        reach.append(sequence_distance(seq.step_spans, seq.doc_spans) or 0)
        if (i + 1) % 10 == 0:
            log(f"  {i + 1}/{len(records)} questions, {(time.perf_counter() - t0) / (i + 1):.2f} s/question")
    return mats, reach


def run_model(dataset: str, model_name: str, work: Path, ks: Sequence[int], limit: int | None) -> dict[str, Any]:
    """Per-layer and chosen-layer label figures of `model_name` on the calibration and test splits."""

    from benchlib.real_runs import recipe_for, splits_of

    from purecover.data.data_stage import read_candidate_records, run_data_stage
    from purecover.teacher.calibration import calibration_lengths, calibration_sequence
    from purecover.teacher.capture import SegmentSpec, capture_segment_attention
    from purecover.teacher.defaults import resolve_params
    from purecover.teacher.layers import attention_windows, load_layer_plan
    from purecover.teacher.loading import TeacherResources
    from purecover.teacher.prompts import ReasoningPrompt

    run = work / dataset / f"teacher-layers-{model_name}"
    recipe = recipe_for(dataset, run, [f"teacher.model={model_name}", *OVERRIDES])
    run_data_stage(recipe, show_progress=False)
    cfg = recipe.teacher
    records = list(read_candidate_records(run / "candidates.jsonl"))
    split = splits_of([r.qid for r in records])
    by_split = {s: [r for r in records if split[r.qid] == s and r.gold_doc_ids and any(x.strip() for x in r.oracle_steps)]
                for s in ("calib", "test")}
    if limit:
        by_split = {s: rs[:limit] for s, rs in by_split.items()}
    res = TeacherResources(cfg)
    tok, model = res.tokenizer(), res.model()
    prompt = ReasoningPrompt.from_config(cfg)
    n_layers = model.config.get_text_config().num_hidden_layers
    default_read = list(load_layer_plan(cfg.model, "full_attention").read)
    lengths = calibration_lengths(tok, recipe.data.k1, cfg.calibration_lengths, run / "candidates.jsonl")
    seq = calibration_sequence(tok, lengths.target, prompt)
    import torch

    ids = torch.tensor([seq.input_ids])
    (cal,) = capture_segment_attention(model, ids, torch.ones_like(ids), [SegmentSpec.of(seq.step_spans, seq.doc_spans)],
                                       layers="all", max_chunk_bytes=cfg.capture_chunk_mb << 20, per_layer=True)
    biases = cal.numpy().mean(axis=1)  # (L, K1): mean over the dummy steps
    params = resolve_params(cfg)
    out: dict[str, Any] = {"layers": n_layers, "full_attention_layers": default_read, "params": {
        "lam": params.lam, "tau_stop": params.tau_stop, "tau_e": params.tau_e, "tau_w": params.tau_w,
        "calibrate": params.calibrate, "normalize": params.normalize}}
    questions, mats, reach = {}, {}, {}
    for s, recs in by_split.items():
        log(f"{dataset} {model_name}: capturing {len(recs)} {s} questions, {n_layers} layers")
        t0 = time.perf_counter()
        mats[s], reach[s] = capture_all(model, tok, recs, prompt, cfg.capture_chunk_mb)
        out[f"{s}_seconds_per_question"] = round((time.perf_counter() - t0) / max(len(recs), 1), 2)
        questions[s] = [{"doc_ids": [d.doc_id for d in r.docs], "gold": set(r.gold_doc_ids),
                         "steps": [x for x in r.oracle_steps if x.strip()]} for r in recs]
        out[f"{s}_questions"] = len(recs)
    single = {str(layer): [layer] for layer in range(n_layers)}
    per_layer = {s: score_layers(mats[s], biases, questions[s], single, params) for s in mats}
    out["per_layer"] = {layer: {"calib": per_layer["calib"][layer], "test": per_layer["test"][layer]}
                        for layer in single}
    # candidates: the layers the label stage would read for these questions (a sliding layer whose window does
    # not reach from the steps to the first document is refused there: `LayerPlan.check_reach`)
    _, windows = attention_windows(model.config)
    longest = max(max(reach["calib"]), max(reach["test"]))
    usable = [layer for layer in range(n_layers) if windows[layer] is None or windows[layer] > longest]
    out["usable_layers"] = usable
    ranked = sorted(usable, key=lambda layer: -(per_layer["calib"][str(layer)]["auc"] or 0.0))
    sets = {f"top{k}": sorted(ranked[:k]) for k in ks if k <= len(ranked)}
    calib_sets = score_layers(mats["calib"], biases, questions["calib"], sets, params)
    best = max(sets, key=lambda name: (calib_sets[name]["f1"], -len(sets[name])))  # ties: fewer layers
    fixed = {"chosen": sets[best], "full_attention": default_read, "all": list(range(n_layers))}
    test = score_layers(mats["test"], biases, questions["test"], fixed, params)
    calib_fixed = score_layers(mats["calib"], biases, questions["calib"], fixed, params)
    out.update({"ranked_by_calib_auc": ranked, "candidates_calib": {n: {"layers": sets[n], **calib_sets[n]}
                                                                    for n in sets},
                "chosen": {"name": best, "layers": sets[best]},
                "calib": calib_fixed, "test": test,
                "retrieval_top2_f1": {s: retrieval_top2(questions[s]) for s in questions}})
    log(f"{dataset} {model_name}: chose {best} = layers {sets[best]} (calib F1 {calib_sets[best]['f1']}); test F1 "
        f"{test['chosen']['f1']} vs full_attention {test['full_attention']['f1']}, all {test['all']['f1']}, "
        f"retrieval top-2 {out['retrieval_top2_f1']['test']}")
    return out


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Per-layer calibration AUC and label F1 of each model: where the signal is."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    datasets = list(result.get("datasets", {}))
    names = sorted({m for ms in result.get("datasets", {}).values() for m in ms})
    if not names:
        return None
    fig, axes = plt.subplots(len(datasets), len(names), figsize=(5.5 * len(names), 3.2 * len(datasets)),
                             squeeze=False)  # a row per dataset, a column per model
    for i, dataset in enumerate(datasets):
        for j, model in enumerate(names):
            r = result["datasets"][dataset].get(model)
            if r is None:
                axes[i][j].set_axis_off()
                continue
            _plot_model(axes[i][j], dataset, model, r)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_model(ax: Any, dataset: str, model: str, r: dict[str, Any]) -> None:
    """One panel: per-layer calibration AUC and F1, retrieval top-2 F1, the full-attention layers shaded."""
    layers = sorted(int(k) for k in r["per_layer"])
    for metric, style in (("auc", "-o"), ("f1", "-s")):
        ax.plot(layers, [r["per_layer"][str(k)]["calib"][metric] for k in layers], style, ms=3,
                label=f"calibration {metric.upper()}")
    ax.axhline(r["retrieval_top2_f1"]["calib"], color="grey", ls="--", lw=1, label="retrieval top-2 F1")
    for k in r["full_attention_layers"]:
        ax.axvline(k, color="tab:green", alpha=0.15, lw=4)
    ax.set_title(f"{model} ({dataset}); green: full-attention layers", fontsize=9)
    ax.set_xlabel("layer")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)


def rows(result: dict) -> list[dict]:
    table = Rows(result)
    for dataset, models in result.get("datasets", {}).items():
        for model, r in models.items():
            base = r["retrieval_top2_f1"]["test"]
            chosen = r["test"]["chosen"]
            table.add(f"teacher_layers.label_f1_chosen.{model}", chosen["f1"], "F1",
                      above(base) if dataset == "hotpotqa" else None, variant=dataset,
                      note=f"layers {r['chosen']['layers']} ({r['chosen']['name']} by calibration AUC, k by "
                           f"calibration F1); P {chosen['precision']}, |S| {chosen['mean_size']}; retrieval top-2 "
                           f"{base}; {r['test_questions']} test questions")
            for name in ("full_attention", "all"):
                fig = r["test"][name]
                table.add(f"teacher_layers.label_f1_{name}.{model}", fig["f1"], "F1", None, variant=dataset,
                          note=f"AUC {fig['auc']}, P {fig['precision']}, |S| {fig['mean_size']}")
            best_layer = max(r["per_layer"], key=lambda k: r["per_layer"][k]["calib"]["auc"] or 0.0)
            table.add(f"teacher_layers.best_single_layer_calib_auc.{model}", r["per_layer"][best_layer]["calib"]["auc"],
                      "AUC", None, variant=dataset,
                      note=f"layer {best_layer} of {r['layers']}; calibration F1 "
                           f"{r['per_layer'][best_layer]['calib']['f1']} vs retrieval top-2 "
                           f"{r['retrieval_top2_f1']['calib']}")
    return table.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=ROOT / "benchmarks" / "results" / "teacher_layers.json")
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m")
    parser.add_argument("--ks", default="1,2,3,4,6")
    parser.add_argument("--limit", type=int, default=None, help="at most this many questions per split (smoke runs)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=str(ROOT / "build" / "real_models"))
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from purecover.utils.provenance import package_versions

    torch.set_num_threads(args.threads)
    result: dict[str, Any] = harness.load(args.out) or {}  # other models' and datasets' figures are kept
    result.update({"date": now(), "machine": machine_info(), "command": sys.argv, "versions": package_versions(),
                   "threads": args.threads, "limit": args.limit})
    for model in args.models.split(","):
        result.setdefault("datasets", {}).setdefault(args.dataset, {})[model] = run_model(
            args.dataset, model, Path(args.work), [int(k) for k in args.ks.split(",")], args.limit)
        harness.write(args.out, result, rows)
    png = plot(result, args.out.with_suffix(".png"))
    print(f"written to {args.out}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
