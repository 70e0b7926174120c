"""The estimation parameters a labelling run uses, with the defaults that `null` recipe keys resolve to.

Every temperature, the score scale and λ belong to the *signal* they act on, so their defaults
depend on where e and W come from (``teacher.estimator``):

==========================  ==========================  ============  ==========  ================
signal                       key                         absolute      zscore      default scale
==========================  ==========================  ============  ==========  ================
e from attention             ``teacher.tau1``            4e-5 (paper)  0.4         zscore
W from attention             ``teacher.tau2``            4e-5 (paper)  0.4         zscore
e from cosine similarity     ``teacher.embedding_tau_e`` 8.0           4.0         absolute
W from cosine similarity     ``teacher.embedding_tau``   0.15          1.0         absolute
==========================  ==========================  ============  ==========  ================

λ defaults to 0.3 for attention in the absolute scale (the paper) and to 0.1 otherwise.

Where the numbers come from: the absolute attention temperatures and λ = 0.3 are the paper's.
No real teacher's attention can be measured offline, so the zscore attention values are set by
two arguments, not tuned for F1: τ1 = 0.4 is the paper's 4e-5 at the paper's assumed attention
level of 1e-4 (e's zscore unit is the mean step score); τ2 = 0.4 is the softest W (largest τ2 of
0.25 … 1.0) whose fallback rate stayed ≤ 5% at λ = 0.3 on the first half of the HotpotQA sample
with a tiny random Qwen2 teacher (flat attention, the hardest case; 0.8% on the second half).
λ = 0.1 is then the largest of {0.1, 0.2, 0.3} whose fallback stayed ≤ 5% on the first halves of
both random teachers we could run: that tiny one and a random Qwen2.5-7B-shaped teacher in bf16 on
an H100 (120 HotpotQA questions); λ = 0.3 collapses the 7B-shaped one (100% fallback), λ = 0.1 gives
0% on both halves of both. Run ``purecover tune`` with a real teacher to choose them for your data. The cosine-similarity
values (and λ = 0.1, and the absolute scale for cosines) were chosen by
``benchmarks/oracle_labels.py`` (oracle steps, all-MiniLM-L6-v2, BM25 top-20) on the first half of
each of the four real dev samples: the grid point with the best mean label F1 against gold
passages whose fallback rate is at most 5% on every first half (absolute 0.7505, best zscore
0.7456). The large e temperature makes e nearly uniform: with oracle steps, the answer's
similarity to a step says little about the step's weight (a bridge step does not contain the
answer). The second halves are the held-out figures in ``benchmarks/results/oracle_labels.json``.

The score scale (``teacher.normalize``):

- ``absolute``: the softmaxes see the raw scores (mean attention probabilities, or cosines), as in
  the paper; the temperatures are then in those units and depend on the model's attention
  magnitude and on the documents' lengths (attention is a per-token mean).
- ``zscore``: W's scores are divided by the question's within-step spread (the root mean square
  of each step × document score minus that step's mean over documents: with the shift a softmax
  ignores, this standardises each step's scores with one spread shared by the question's steps),
  and e's scores by their mean |score| over steps (so e depends on ratios, never degenerate with
  two steps). The temperatures are then unitless and do not change with the attention magnitude
  or the documents' lengths. A block with no spread gives uniform weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..config import TeacherConfig
from ..records import EstimationSettings

__all__ = ["LAM_DEFAULTS", "SIGNAL_DEFAULTS", "EstimationParams", "SignalDefaults", "resolve_params", "sources"]

Scale = Literal["absolute", "zscore"]


@dataclass(frozen=True)
class SignalDefaults:
    """The defaults of one signal (attention or cosine similarity): its default score scale, and the temperature
    of e and of W in each scale."""

    scale: Scale
    e: dict[Scale, float]
    W: dict[Scale, float]


# signal ("attention" or "similarity") -> its default scale and temperatures
SIGNAL_DEFAULTS: dict[str, SignalDefaults] = {
    "attention": SignalDefaults("zscore", e={"absolute": 4.0e-5, "zscore": 0.4}, W={"absolute": 4.0e-5, "zscore": 0.4}),
    "similarity": SignalDefaults("absolute", e={"absolute": 8.0, "zscore": 4.0}, W={"absolute": 0.15, "zscore": 1.0}),
}
LAM_DEFAULTS = {("attention", "absolute"): 0.3, ("attention", "zscore"): 0.1, ("similarity", "absolute"): 0.1,
                ("similarity", "zscore"): 0.1}


@dataclass(frozen=True)
class EstimationParams:
    """Everything that turns raw scores into e, W and a selected set (resolved; no nulls).

    `e_source` / `w_source` are "attention" or "similarity"; `tau_e` / `tau_w` are the
    temperatures of those signals in the units of `normalize`.
    """

    e_source: str
    w_source: str
    normalize: Scale
    tau_e: float
    tau_w: float
    lam: float
    budget: int
    tau_stop: float
    min_select: int
    cot_weighting: bool
    calibrate: bool
    beta: float
    selection: str
    objective: str = "paper"
    repeated_steps: str = "keep"

    def to_record(self) -> EstimationSettings:
        """The parameters as labels, the label stage's summary and tune.json record them (``objective`` only
        when it is not the paper's, ``repeated_steps`` only when drop, so records of the defaults read as every
        earlier version wrote them)."""
        values = asdict(self)
        if values["objective"] == "paper":
            del values["objective"]
        if values["repeated_steps"] == "keep":
            del values["repeated_steps"]
        return EstimationSettings(**values)


def sources(estimator: str) -> tuple[str, str]:
    """(source of e, source of W) for a `teacher.estimator` value."""
    return {"attention": ("attention", "attention"), "embedding": ("similarity", "similarity"),
            "no_attention": ("attention", "similarity")}[estimator]


def resolve_params(cfg: TeacherConfig, **changes: Any) -> EstimationParams:
    """The parameters of `cfg` with nulls resolved; `changes` override recipe keys by name first
    (``lam``, ``tau_stop``, ``budget``, ``tau1``, ``tau2``, ``embedding_tau``, ``embedding_tau_e``,
    ``normalize``, ``cot_weighting``, ``calibrate``, ``beta``, ``min_select``, ``repeated_steps``), as
    `purecover tune` does."""
    values = {"lam": cfg.lam, "tau_stop": cfg.tau_stop, "budget": cfg.budget, "tau1": cfg.tau1, "tau2": cfg.tau2,
              "embedding_tau": cfg.embedding_tau, "embedding_tau_e": cfg.embedding_tau_e,
              "normalize": cfg.normalize, "cot_weighting": cfg.cot_weighting, "calibrate": cfg.calibrate,
              "beta": cfg.lancer.beta, "min_select": cfg.min_select, "repeated_steps": cfg.repeated_steps}
    unknown = set(changes) - set(values)
    if unknown:
        raise ValueError(f"cannot vary {sorted(unknown)}; choose among {sorted(values)}")
    values.update(changes)
    e_src, w_src = sources(cfg.estimator)
    # One scale per run: the scale of W's signal decides (W carries the selection).
    scale = values["normalize"] or SIGNAL_DEFAULTS[w_src].scale
    if scale not in ("absolute", "zscore"):
        raise ValueError(f"normalize must be 'absolute' or 'zscore', got {scale!r}")
    if values["repeated_steps"] not in ("keep", "drop"):
        raise ValueError(f"repeated_steps must be 'keep' or 'drop', got {values['repeated_steps']!r}")
    e_key = "tau1" if e_src == "attention" else "embedding_tau_e"
    w_key = "tau2" if w_src == "attention" else "embedding_tau"
    tau_e = values[e_key] if values[e_key] is not None else SIGNAL_DEFAULTS[e_src].e[scale]
    tau_w = values[w_key] if values[w_key] is not None else SIGNAL_DEFAULTS[w_src].W[scale]
    lam = values["lam"] if values["lam"] is not None else LAM_DEFAULTS[(w_src, scale)]
    for name, v in (("tau_e", tau_e), ("tau_w", tau_w)):
        if not float(v) > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
    return EstimationParams(
        e_source=e_src, w_source=w_src, normalize=scale, tau_e=float(tau_e), tau_w=float(tau_w), lam=float(lam),
        budget=int(values["budget"]), tau_stop=float(values["tau_stop"]), min_select=int(values["min_select"]),
        cot_weighting=bool(values["cot_weighting"]),
        calibrate=bool(values["calibrate"]) and w_src == "attention",
        beta=float(values["beta"]) if cfg.lancer.enabled else 0.0, selection=cfg.selection,
        objective=cfg.objective, repeated_steps=str(values["repeated_steps"]))
