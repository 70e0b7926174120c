"""Greedy vs exact coverage objective, and batched greedy throughput on one core (JSON output).

    python benchmarks/solver.py [--out benchmarks/results/solver.json] [--instances 1000] [--seed 0]

(a) Objective ratio greedy / exact over `--instances` random questions per distribution at
    K1 = 20, K = 5, N = 5 (target: mean ratio ≥ 0.98 for every distribution):
      dirichlet   e ~ Dirichlet(1), W[:, i] = softmax over documents of N(0, 3²) logits, λ = 0.3
      lam0        as dirichlet with λ = 0 (monotone case)
      flat        logits N(0, 0.1²) (W ≈ 1/K1, many near-ties), λ = 0.01
      peaked      logits N(0, 5²) (W nearly one-hot per step), λ = 0.3
      maxcover01  W ∈ {0, 1}, each (doc, step) covered with probability 0.3 (overlapping sets),
                  e uniform (1/N), λ = 0.1
    The greedy runs with min_select = 0 (the pure algorithm; the min_select fallback is a
    labelling policy, not part of the optimisation) and τ_stop = 0. The ratio greedy/exact is
    defined only when the exact optimum is > 0. Since f(∅) = 0 the optimum is never negative; an
    instance whose optimum is 0 (the empty set is optimal) is counted in `n_zero_optimum` and
    excluded from the ratio statistics, and the check `greedy_matches_zero_optimum` confirms that
    the greedy also returns f = 0 on all of them. `frac_exact` = share of instances (ratio
    defined) whose greedy objective is within 1e-9 of the optimum.
(b) Batched greedy throughput with every BLAS/OpenMP pool limited to one thread (environment
    set before numpy is imported, plus threadpoolctl when installed); best of `--repeats` runs:
      K1 = 20,  N = 5, K = 5,  100,000 questions: target ≥ 200,000 questions/s
      K1 = 100, N = 5, K = 10,  20,000 questions: target ≤ 30 µs per question
Rows (see rows.py): the mean ratio per distribution and the throughput per setting and dtype.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import contextlib  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from benchlib import harness  # noqa: E402
from benchlib.rows import Rows, at_least, at_most, machine_info, now  # noqa: E402

from purecover.teacher.solvers import exact_select, greedy_select  # noqa: E402
from purecover.utils.provenance import package_versions  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - the environment variables above already apply
    threadpool_limits = None

K1_RATIO, K_RATIO, N_RATIO = 20, 5, 5
RATIO_TARGET = 0.98
# throughput settings (questions, K1, N, K) and their claims: K1 = 20 in questions per second, K1 = 100 in µs each
THROUGHPUT = {(100_000, 20, 5, 5): ("questions_per_second", 200_000), (20_000, 100, 5, 10): ("us_per_question", 30.0)}


def _softmax_over_docs(logits: np.ndarray) -> np.ndarray:
    """logits (B, K1, N) -> W with each step column a distribution over the K1 documents."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _softmax_instances(scale: float) -> Callable[[np.random.Generator, int, int, int], tuple[np.ndarray, np.ndarray]]:
    def draw(rng: np.random.Generator, B: int, K1: int, N: int) -> tuple[np.ndarray, np.ndarray]:
        e = rng.dirichlet(np.ones(N), size=B)
        W = _softmax_over_docs(scale * rng.standard_normal((B, K1, N)))
        return e, W

    return draw


def _maxcover01(rng: np.random.Generator, B: int, K1: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    e = np.full((B, N), 1.0 / N)
    W = (rng.random((B, K1, N)) < 0.3).astype(np.float64)
    return e, W


DISTRIBUTIONS: dict[str, tuple[Callable[..., tuple[np.ndarray, np.ndarray]], float]] = {
    "dirichlet": (_softmax_instances(3.0), 0.3),
    "lam0": (_softmax_instances(3.0), 0.0),
    "flat": (_softmax_instances(0.1), 0.01),
    "peaked": (_softmax_instances(5.0), 0.3),
    "maxcover01": (_maxcover01, 0.1),
}


def ratio_study(name: str, rng: np.random.Generator, instances: int) -> dict:
    draw, lam = DISTRIBUTIONS[name]
    e, W = draw(rng, instances, K1_RATIO, N_RATIO)
    t0 = time.perf_counter()
    greedy = greedy_select(e, W, lam, K_RATIO, tau_stop=0.0, min_select=0)
    t_greedy = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = np.array([exact_select(e[b], W[b], lam, K_RATIO).objective for b in range(instances)])
    t_exact = time.perf_counter() - t0
    g = greedy.objective.astype(np.float64)
    positive = exact > 0
    ratios = g[positive] / exact[positive]
    zero = ~positive
    return {
        "lam": lam,
        "instances": instances,
        "n_ratio_defined": int(positive.sum()),
        "mean_ratio": float(ratios.mean()) if ratios.size else None,
        "worst_ratio": float(ratios.min()) if ratios.size else None,
        "frac_exact": float((g[positive] >= exact[positive] - 1e-9).mean()) if ratios.size else None,
        "n_zero_optimum": int(zero.sum()),
        "greedy_matches_zero_optimum": bool(np.all(np.abs(g[zero]) <= 1e-12)),
        "greedy_never_above_exact": bool(np.all(g <= exact + 1e-9)),
        "mean_picks_greedy": float(greedy.n_selected.mean()),
        "target_mean_ratio": RATIO_TARGET,
        "pass": bool(ratios.size > 0 and ratios.mean() >= RATIO_TARGET),
        "greedy_seconds": t_greedy,
        "exact_seconds": t_exact,
    }


def throughput(rng: np.random.Generator, B: int, K1: int, N: int, K: int, repeats: int, dtype: type) -> dict:
    e, W = _softmax_instances(2.0)(rng, B, K1, N)
    e, W = e.astype(dtype), W.astype(dtype)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        greedy_select(e, W, 0.3, K)
        times.append(time.perf_counter() - t0)
    best = min(times)
    return {"questions": B, "K1": K1, "N": N, "K": K, "dtype": np.dtype(dtype).name, "best_seconds": best,
            "median_seconds": float(np.median(times)), "questions_per_second": B / best,
            "us_per_question": 1e6 * best / B}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/solver.json")
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    rng = np.random.default_rng(args.seed)
    t_start = time.perf_counter()

    ratios = {}
    for name in DISTRIBUTIONS:
        ratios[name] = ratio_study(name, rng, args.instances)
        r = ratios[name]
        mean = "n/a" if r["mean_ratio"] is None else f"{r['mean_ratio']:.5f}"
        worst = "n/a" if r["worst_ratio"] is None else f"{r['worst_ratio']:.4f}"
        exact_frac = "n/a" if r["frac_exact"] is None else f"{r['frac_exact']:.3f}"
        print(f"[ratio] {name:11s} λ={r['lam']:<5} mean {mean} worst {worst} exact {exact_frac} "
              f"(defined {r['n_ratio_defined']}/{r['instances']}, zero optimum {r['n_zero_optimum']}, "
              f"greedy=0 there: {r['greedy_matches_zero_optimum']}) target ≥ {RATIO_TARGET} "
              f"{'PASS' if r['pass'] else 'FAIL'}  [exact {r['exact_seconds']:.1f}s]")

    limiter = threadpool_limits(limits=1) if threadpool_limits is not None else contextlib.nullcontext()
    with limiter:
        tp = {}
        for dtype in (np.float64, np.float32):
            for (B, K1, N, K), (measure, bound) in THROUGHPUT.items():
                r = throughput(rng, B, K1, N, K, args.repeats, dtype)
                r[f"target_{measure}"] = bound
                r["pass"] = r[measure] >= bound if measure == "questions_per_second" else r[measure] <= bound
                tp[f"K1={K1},N={N},K={K},{np.dtype(dtype).name}"] = r
    for key, r in tp.items():
        print(f"[throughput] {key:26s} {r['questions_per_second']:>12,.0f} q/s  {r['us_per_question']:7.2f} µs/q  "
              + (f"target ≥ {r['target_questions_per_second']:,} q/s" if "target_questions_per_second" in r
                 else f"target ≤ {r['target_us_per_question']} µs/q")
              + f"  {'PASS' if r['pass'] else 'FAIL'}")

    result = {
        "benchmark": "solver",
        "date": now(),
        "seed": args.seed,
        "ratio_setting": {"K1": K1_RATIO, "K": K_RATIO, "N": N_RATIO, "tau_stop": 0.0, "min_select": 0},
        "ratio": ratios,
        "throughput": tp,
        "threads": {"env": {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "MKL_NUM_THREADS")},
                    "threadpoolctl": threadpool_limits is not None},
        "machine": machine_info(),
        "total_seconds": time.perf_counter() - t_start,
        "versions": package_versions(extra=("threadpoolctl",)),
    }
    harness.write(args.out, result, rows)
    print(f"wrote {args.out} ({result['total_seconds']:.1f}s)")
    return 0


def rows(result: dict) -> list[dict]:
    """The summary rows of a solver result: mean greedy/exact ratio per distribution, throughput per setting."""
    table = Rows(result)
    s = result["ratio_setting"]
    for name, r in result["ratio"].items():
        worst = "n/a" if r["worst_ratio"] is None else f"{r['worst_ratio']:.3f}"
        table.add("solver.greedy_over_exact_mean_ratio", r["mean_ratio"], "ratio", at_least(RATIO_TARGET),
                  variant=name, note=f"λ={r['lam']:g}, K1={s['K1']}, K={s['K']}, N={s['N']}; "
                                     f"worst {worst} over {r['n_ratio_defined']:,} instances")
    for r in result["throughput"].values():
        measure, bound = THROUGHPUT[(r["questions"], r["K1"], r["N"], r["K"])]
        variant = f"K1={r['K1']}, N={r['N']}, K={r['K']}, {r['dtype']}"
        if measure == "questions_per_second":
            table.add("solver.greedy_questions_per_second", r[measure], "questions/s", at_least(bound),
                      variant=variant, note=f"one core; {r['us_per_question']:.2f} µs/question")
        else:
            table.add("solver.greedy_us_per_question", r[measure], "µs/question", at_most(bound),
                      variant=variant, note=f"one core; {r['questions_per_second']:,.0f} questions/s")
    return table.rows


if __name__ == "__main__":
    raise SystemExit(main())
