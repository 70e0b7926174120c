"""`purecover tune RECIPE --grid lam=0.05,0.1,0.3 --grid tau_stop=0,0.02`: choose λ, τ_stop and temperatures on gold passages.

Estimation runs once: the label stage (resumed or skipped when complete) stores every raw score
(`attention`, `similarity`, LANCER `ratings`) in labels.jsonl. Each grid point then only re-solves:
e and W from the stored scores (`estimation.estimate`), fusion and the greedy (`selection`), which
is milliseconds per question. The row of the recipe's own setting reproduces labels.jsonl exactly.

Split: the questions whose candidates carry gold passages, in candidates order; the first
`tune_fraction` of them choose the setting, the rest are held out and only reported. The chosen
setting is the best mean label F1 on the tuning questions among the points whose fallback rate
there is at most `max_fallback` (if none qualifies, the lowest fallback rate, then F1); ties go to
the earlier grid point. Held-out figures are computed for every row but never used to choose.

Metrics per split (means over questions; gold = every gold passage, retrieved or not): label
precision, recall and F1 of the selected set (F1 = 0 without a hit), mean |S|, fallback rate
(status fallback, as the label stage counts it), first-step-stop rate, and the precision of
retrieval's top-|S| (the same size per question) for comparison.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Recipe, parse_override, recipe_to_dict
from ..metrics import prf
from ..records import (
    CandidateRecord,
    GridValue,
    LabelRecord,
    SplitFigures,
    TuneChosen,
    TuneQuestionCounts,
    TuneRecipeSetting,
    TuneResult,
    TuneRow,
    validate_line,
)
from ..rundir import FILES, RunDir
from ..utils.io import atomic_write_json, atomic_write_text, read_jsonl
from ..utils.provenance import package_versions
from ..utils.rundir_lock import locked_stage
from .defaults import EstimationParams, resolve_params
from .estimation import Estimate, SegmentAttention, SimilarityScores, estimate
from .selection import fuse, solve, stop_reason

log = logging.getLogger(__name__)

__all__ = ["GRID_KEYS", "TuneQuestion", "default_grid", "evaluate_setting", "labels_bias", "load_questions",
           "parse_grid", "setting_estimates", "split_questions", "tune"]

TUNE_DIR = FILES["tune"]
# recipe keys a grid may vary (teacher section; `beta` is teacher.lancer.beta)
GRID_KEYS: dict[str, type] = {"lam": float, "tau_stop": float, "budget": int, "min_select": int, "tau1": float,
                              "tau2": float, "embedding_tau": float, "embedding_tau_e": float, "normalize": str,
                              "cot_weighting": bool, "calibrate": bool, "beta": float, "repeated_steps": str}
# the values of each string key
_CHOICES: dict[str, tuple[str, ...]] = {"normalize": ("absolute", "zscore"), "repeated_steps": ("keep", "drop")}
# which parameters change e and W (the rest only change the solver): estimates are cached on these
_ESTIMATE_FIELDS = ("normalize", "tau_e", "tau_w", "cot_weighting", "calibrate", "beta", "repeated_steps")


# --------------------------------------------------------------------------- grid


def parse_grid(items: Sequence[str]) -> dict[str, list[GridValue]]:
    """``["lam=0.1,0.3", "tau_stop=0,0.05"]`` (or one item ``"lam=0.1,0.3,tau_stop=0,0.05"``) -> values by key.

    Values are YAML scalars (``1e-5``, ``true``, ``zscore``); a comma-separated piece holding ``=``
    starts the next key. Unknown keys and values of the wrong type are errors naming them.
    """
    grid: dict[str, list[GridValue]] = {}
    key: str | None = None
    for item in items:
        for piece in item.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if "=" in piece:
                key, piece = (x.strip() for x in piece.split("=", 1))
                key = key.removeprefix("teacher.").removeprefix("lancer.")
                if key not in GRID_KEYS:
                    raise ValueError(f"--grid: unknown key {key!r}; valid keys: {', '.join(GRID_KEYS)}")
                if key in grid:
                    raise ValueError(f"--grid: key {key!r} given twice")
                grid[key] = []
                if not piece:
                    continue
            if key is None:
                raise ValueError(f"--grid: {piece!r} has no key; write key=v1,v2,...")
            grid[key].append(_grid_value(key, piece))
    empty = [k for k, v in grid.items() if not v]
    if empty:
        raise ValueError(f"--grid: key {empty[0]!r} has no values")
    return grid


def _grid_value(key: str, raw: str) -> GridValue:
    value = parse_override(f"{key}={raw}")[1]  # the recipe's YAML 1.2 scalars: 1e-1 is a float
    kind = GRID_KEYS[key]
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is bool and isinstance(value, bool):
        return value
    if kind is str and value in _CHOICES[key]:
        return value
    raise ValueError(f"--grid: {key}={raw!r} is not a valid "
                     f"{' | '.join(_CHOICES[key]) if kind is str else kind.__name__}")


def default_grid(params: EstimationParams) -> dict[str, list[GridValue]]:
    """λ over {0, 0.05, 0.1, 0.2, 0.3, 0.5} × the resolved W and e temperatures × {0.5, 1, 2}."""
    w_key = "tau2" if params.w_source == "attention" else "embedding_tau"
    e_key = "tau1" if params.e_source == "attention" else "embedding_tau_e"
    return {"lam": [0.0, 0.05, 0.1, 0.2, 0.3, 0.5],
            w_key: [params.tau_w * f for f in (0.5, 1.0, 2.0)],
            e_key: [params.tau_e * f for f in (0.5, 1.0, 2.0)]}


def grid_points(grid: dict[str, list[GridValue]]) -> list[dict[str, GridValue]]:
    """Every combination of the grid's values, the last key varying fastest."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


# --------------------------------------------------------------------------- questions


@dataclass
class TuneQuestion:
    """What re-solving one question needs: its stored scores, candidates and gold passages."""

    qid: str
    doc_ids: list[str]
    gold: set[str]
    attention: SegmentAttention | None
    similarity: SimilarityScores | None
    ratings: list[list[float]] | None
    parse_fallback: bool
    steps: list[str] | None = None  # the label's reasoning steps (teacher.repeated_steps: drop reads them)


def load_questions(labels_path: Path, candidates_path: Path) -> list[TuneQuestion]:
    """Questions of labels.jsonl (each line checked as a `LabelRecord`; error records skipped) joined with their
    candidates, in candidates order."""
    labels: dict[str, LabelRecord] = {}
    for lineno, rec in read_jsonl(labels_path):
        label = validate_line(LabelRecord, rec, labels_path, lineno)
        if label.status == "error":
            continue
        if label.attention is None and label.similarity is None:
            raise ValueError(f"{labels_path}:{lineno}: record {label.qid!r} has no stored scores "
                             "(`attention` / `similarity`); relabel with this version of purecover")
        labels[label.qid] = label
    out = []
    for lineno, line in read_jsonl(candidates_path):
        cand = validate_line(CandidateRecord, line, candidates_path, lineno)
        found = labels.get(cand.qid)
        if found is None:
            continue
        out.append(TuneQuestion(
            qid=cand.qid, doc_ids=[d.doc_id for d in cand.docs], gold=set(cand.gold_doc_ids),
            attention=SegmentAttention.from_record(found.attention) if found.attention is not None else None,
            similarity=SimilarityScores.from_record(found.similarity) if found.similarity is not None else None,
            ratings=found.ratings, parse_fallback=any(c != "min_select" for c in found.fallback_reasons),
            steps=list(found.steps)))
    return out


def split_questions(questions: Sequence[TuneQuestion], tune_fraction: float
                    ) -> tuple[list[TuneQuestion], list[TuneQuestion]]:
    """(tuning, held-out): the first `tune_fraction` of the questions with gold passages, and the rest."""
    if not 0.0 < tune_fraction < 1.0:
        raise ValueError(f"tune_fraction must be in (0, 1), got {tune_fraction}")
    gold = [q for q in questions if q.gold]
    cut = round(len(gold) * tune_fraction)
    if cut < 1 or cut >= len(gold):
        raise ValueError(f"{len(gold)} questions with gold passages: too few to split at {tune_fraction} "
                         "(the candidates need gold_doc_ids; use a dataset with supporting passages)")
    return gold[:cut], gold[cut:]


# --------------------------------------------------------------------------- evaluation


def setting_estimates(questions: Sequence[TuneQuestion], params: EstimationParams, bias: np.ndarray | None
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question, the (e, W) pair the solver reads under `params`: the estimate from its stored attention
    or similarity (less the position `bias` when given), fused with its LANCER ratings when it has them."""
    pairs = []
    for q in questions:
        est: Estimate = estimate(params, q.attention, q.similarity, bias, q.steps)
        pairs.append(fuse(est.e, est.W, q.ratings, params))
    return pairs


def evaluate_setting(questions: Sequence[TuneQuestion], params: EstimationParams, bias: np.ndarray | None = None,
                     pairs: list[tuple[np.ndarray, np.ndarray]] | None = None) -> SplitFigures:
    """Label quality of `params` on `questions` (module docstring); `pairs` reuses precomputed (e, W)."""
    if not questions:
        raise ValueError("no questions to evaluate")
    pairs = pairs if pairs is not None else setting_estimates(questions, params, bias)
    result = solve(pairs, params)
    sums = dict.fromkeys(("precision", "recall", "f1", "size", "fallback", "first_step", "top_s_precision"), 0.0)
    for i, q in enumerate(questions):
        n = int(result.n_selected[i])
        chosen = [q.doc_ids[k] for k in result.selected[i, :n]]
        gains = [float(g) for g in result.gains[i, :n]]
        p, r, f = prf(chosen, q.gold)
        sums["precision"] += p
        sums["recall"] += r
        sums["f1"] += f
        sums["size"] += n
        sums["fallback"] += bool(result.fallback[i]) or q.parse_fallback
        sums["first_step"] += stop_reason(gains, len(q.doc_ids), params, n_steps=len(pairs[i][0])) == "first_step"
        sums["top_s_precision"] += prf(q.doc_ids[:n], q.gold)[0]
    m = len(questions)
    return SplitFigures(precision=round(sums["precision"] / m, 4), recall=round(sums["recall"] / m, 4),
                        f1=round(sums["f1"] / m, 4), mean_size=round(sums["size"] / m, 4),
                        fallback_rate=round(sums["fallback"] / m, 4),
                        first_step_stop_rate=round(sums["first_step"] / m, 4),
                        top_s_precision=round(sums["top_s_precision"] / m, 4))


def retrieval_baselines(questions: Sequence[TuneQuestion], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """Retrieval top-k precision, recall and F1 for each k."""
    out = {}
    for k in ks:
        rows = np.array([prf(q.doc_ids[:k], q.gold) for q in questions])
        out[f"top{k}"] = dict(zip(("precision", "recall", "f1"), (round(float(x), 4) for x in rows.mean(axis=0))))
    return out


# --------------------------------------------------------------------------- the command


def labels_bias(recipe: Recipe, labels_path: Path) -> np.ndarray | None:
    """The position bias the labels were made with (bias.json, checked against the records' bias_key)."""
    from ..records import BiasFile, load_json_record
    from .calibration import BIAS_FILE, key_string

    bias_key = None
    for lineno, rec in read_jsonl(labels_path):
        bias_key = validate_line(LabelRecord, rec, labels_path, lineno).bias_key
        break
    if bias_key is None:
        return None
    path = recipe.run_path / BIAS_FILE
    data = load_json_record(path, BiasFile)
    if key_string(data.keys) != bias_key:
        raise ValueError(f"{path} is not the calibration labels.jsonl was made with; rerun `purecover label`")
    return np.asarray(data.bias, dtype=np.float64)


@locked_stage("tune")
def tune(recipe: Recipe, grid: dict[str, list[GridValue]] | None = None, tune_fraction: float = 0.5,
         max_fallback: float = 0.05, show_progress: bool = True, plot: bool = True) -> TuneResult:
    """Label once (if needed), re-solve every grid point, choose on the tuning split; write run_dir/tune/ and
    return tune.json's `TuneResult`."""
    from .label_stage import run_label_stage

    started = _dt.datetime.now(_dt.timezone.utc)
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    # Estimation runs once: the label stage returns at once when it is complete for this recipe.
    run_label_stage(recipe, show_progress=show_progress)
    labels_path = rd.path_of("labels")
    questions = load_questions(labels_path, rd.path_of("candidates"))
    tune_qs, held_qs = split_questions(questions, tune_fraction)
    base = resolve_params(recipe.teacher)
    grid = grid or default_grid(base)
    for key in grid:
        resolve_params(recipe.teacher, **{key: grid[key][0]})  # reject keys this estimator cannot vary early
    bias = labels_bias(recipe, labels_path) if base.w_source == "attention" else None
    points = grid_points(grid)
    if bias is None and any(resolve_params(recipe.teacher, **p).calibrate for p in points):
        raise ValueError("the grid asks for calibration, but labels.jsonl was made without it (teacher.calibrate "
                         "false): relabel with calibration, or keep calibrate=false in the grid")
    rows: list[TuneRow] = []
    cache: dict[tuple[Any, ...], tuple[list[Any], list[Any]]] = {}
    from ..utils.progress import tqdm

    for point in tqdm(points, desc="tune", unit="setting", disable=not show_progress):
        params = resolve_params(recipe.teacher, **point)
        key = tuple(getattr(params, f) for f in _ESTIMATE_FIELDS)
        if key not in cache:
            cache[key] = (setting_estimates(tune_qs, params, bias), setting_estimates(held_qs, params, bias))
        tune_pairs, held_pairs = cache[key]
        rows.append(TuneRow(setting=point, params=params.to_record(),
                            tune=evaluate_setting(tune_qs, params, pairs=tune_pairs),
                            heldout=evaluate_setting(held_qs, params, pairs=held_pairs)))
    chosen = choose(rows, max_fallback)
    budget = base.budget
    result = TuneResult(
        command="purecover tune", created=started.isoformat(timespec="seconds"),
        recipe=recipe_to_dict(recipe), versions=package_versions(), grid=grid,
        tune_fraction=tune_fraction, max_fallback=max_fallback,
        questions=TuneQuestionCounts(with_gold=len(tune_qs) + len(held_qs), tune=len(tune_qs), heldout=len(held_qs),
                                     without_gold=len(questions) - len(tune_qs) - len(held_qs),
                                     first_tune_qids=[q.qid for q in tune_qs[:3]]),
        recipe_setting=TuneRecipeSetting(params=base.to_record(), tune=evaluate_setting(tune_qs, base, bias),
                                         heldout=evaluate_setting(held_qs, base, bias)),
        retrieval={"tune": retrieval_baselines(tune_qs, sorted({2, budget})),
                   "heldout": retrieval_baselines(held_qs, sorted({2, budget}))},
        chosen=TuneChosen(**rows[chosen], index=chosen, overrides=overrides(rows[chosen]["setting"])),
        rows=rows,
    )
    out = run_dir / TUNE_DIR
    atomic_write_json(out / "tune.json", result.to_json_dict())
    atomic_write_text(out / "tune.md", tune_markdown(result))
    if plot:
        result.plots = [str(p) for p in tune_plots(result, out / "plots")]
        atomic_write_json(out / "tune.json", result.to_json_dict())
    return result


def choose(rows: Sequence[TuneRow], max_fallback: float) -> int:
    """Index of the best tuning F1 among rows with tuning fallback ≤ `max_fallback` (see module docstring)."""
    ok = [i for i, r in enumerate(rows) if r["tune"]["fallback_rate"] <= max_fallback]
    if ok:
        return max(ok, key=lambda i: (rows[i]["tune"]["f1"], -i))
    return min(range(len(rows)), key=lambda i: (rows[i]["tune"]["fallback_rate"], -rows[i]["tune"]["f1"], i))


def overrides(setting: dict[str, GridValue]) -> str:
    """The chosen setting as `--set` arguments."""
    parts = []
    for key, value in setting.items():
        name = f"teacher.lancer.{key}" if key == "beta" else f"teacher.{key}"
        text = str(value).lower() if isinstance(value, bool) else (f"{value:g}" if isinstance(value, float) else value)
        parts.append(f"--set {name}={text}")
    return " ".join(parts)


def tune_markdown(result: TuneResult) -> str:
    """The tuning table: one row per grid point, the chosen one marked."""
    keys = list(result.grid)
    q = result.questions
    lines = [f"# purecover tune: {q.tune} tuning / {q.heldout} held-out questions with gold passages", "",
             f"Chosen (best tuning F1 with fallback ≤ {result.max_fallback:.0%}): `{result.chosen['overrides']}`",
             "", "| " + " | ".join([*keys, "tune F1", "tune P", "tune |S|", "tune fallback", "held-out F1",
                                      "held-out P", "held-out top-|S| P", "held-out |S|", "held-out fallback"]) + " |",
             "|" + "---|" * (len(keys) + 9)]
    for i, row in enumerate(result.rows):
        t, h = row["tune"], row["heldout"]
        mark = " **←**" if i == result.chosen["index"] else ""
        cells = [_cell(row["setting"][k]) for k in keys]
        cells += [f"{t['f1']:.3f}{mark}", f"{t['precision']:.3f}", f"{t['mean_size']:.2f}", f"{t['fallback_rate']:.1%}",
                  f"{h['f1']:.3f}", f"{h['precision']:.3f}", f"{h['top_s_precision']:.3f}", f"{h['mean_size']:.2f}",
                  f"{h['fallback_rate']:.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    ret = result.retrieval["heldout"]
    lines += ["", "Retrieval on the held-out questions: " + ", ".join(
        f"{k} F1 {v['f1']:.3f} (P {v['precision']:.3f})" for k, v in ret.items())]
    rs = result.recipe_setting.heldout
    lines += [f"The recipe's own setting on the held-out questions: F1 {rs['f1']:.3f}, |S| {rs['mean_size']:.2f}, "
              f"fallback {rs['fallback_rate']:.1%}", ""]
    return "\n".join(lines)


def _cell(value: GridValue) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def tune_plots(result: TuneResult, out: Path) -> list[Path]:
    """F1 against mean |S| for every grid point (tuning split), the chosen point marked; F1 against λ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    rows = result.rows
    chosen = result.chosen["index"]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    size = [r["tune"]["mean_size"] for r in rows]
    f1 = [r["tune"]["f1"] for r in rows]
    fb = [r["tune"]["fallback_rate"] for r in rows]
    sc = ax.scatter(size, f1, c=fb, cmap="viridis_r", vmin=0, vmax=max(0.2, max(fb)))
    ax.scatter([size[chosen]], [f1[chosen]], s=160, facecolors="none", edgecolors="red", label="chosen")
    fig.colorbar(sc, ax=ax, label="fallback rate")
    ax.set_xlabel("mean |S| (tuning questions)")
    ax.set_ylabel("label F1 vs gold passages")
    ax.set_title("purecover tune: every grid point")
    ax.legend(loc="lower right")
    fig.tight_layout()
    paths.append(out / "tune_f1_vs_size.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    if "lam" in result.grid and len(result.grid["lam"]) > 1:
        others = {k: v for k, v in rows[chosen]["setting"].items() if k != "lam"}
        line = [r for r in rows if all(r["setting"].get(k) == v for k, v in others.items())]
        fig, ax = plt.subplots(figsize=(6, 4))
        lams = [r["setting"]["lam"] for r in line]
        for split, style in (("tune", "o-"), ("heldout", "s--")):
            ax.plot(lams, [r[split]["f1"] for r in line], style, label=f"F1 ({split})")
        ax.plot(lams, [r["tune"]["fallback_rate"] for r in line], "x:", label="fallback (tune)")
        ax.set_xlabel("λ (other keys at the chosen setting)")
        ax.set_ylabel("rate")
        ax.legend()
        fig.tight_layout()
        paths.append(out / "tune_f1_vs_lam.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
