"""In-context reranking (ICR): a zero-shot reranker read from a causal LM's attention.

ICR (Chen et al., "Attention in Large Language Models Yields Efficient Zero-Shot Re-Rankers", ICLR 2025)
puts the candidate passages and then the question into one causal prompt and scores each passage by how
much attention the question's tokens pay to it; the same prompt with a content-free query ("N/A") measures
what the model pays a passage whatever is asked (its position, its length), and is subtracted.

The prompt (`build_icr_prompt`): a user message, rendered with the tokenizer's chat template when it has one
(`purecover.models.chat.render_chat`)::

    Here are some paragraphs:

    [1] <title>
    <text>

    [2] ...

    Please find information that is relevant to the following query in the paragraphs above.

    Query: <question>

Each passage body is `purecover.data.passage.passage_text` (title and text), cut to `max_passage_tokens`
tokens (`purecover.models.selector_prompt.truncate_text`, the selector prompt's rule). The prompt is
tokenised in pieces (the text before the user message, each fixed piece, each passage body, the question,
the text after it), each without special tokens, and the ids are concatenated: a passage's token span is
exactly the ids of its body, and the question's span exactly the ids of the question.

Scores (`icr_scores`), for a passage d_k and a layer l, in units of attention probability::

    s_l(d_k | q) = (1 / |q|) Σ_{i ∈ q} Σ_{j ∈ d_k} (1 / H) Σ_h A^{l,h}_{ij}

the share of a question token's attention (averaged over the H query heads and over the question's tokens)
that lands on the passage's tokens, in [0, 1]. It is read by `purecover.teacher.capture` in one pass per
prompt, without forming the attention matrix. The calibrated score of a layer is
s_l(d_k | question) − s_l(d_k | "N/A") (same passages, same layers), and the ICR score of a layer set S is
its sum over S. Chen et al. sum over heads and question tokens; averaging divides every score of a prompt by
a constant (heads) and puts the two queries, of different lengths, on one per-token scale, so it changes no
ranking of the question pass while the calibration subtracts like with like.

Choosing what is left open (pure functions, on calibration questions with gold passages):
`choose_icr_layers` (which layers to sum) and `choose_fusion_weight` (the weight of the retrieval rank in
`fuse_with_rank`), both maximising the mean ranking AUC (`ranking_auc`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data.passage import doc_passage_text, passage_text
from ..metrics import gold_mask, ranking_auc, ranking_auc_rows
from ..models.chat import render_chat
from ..models.prompt_tokens import PromptText, encode_plain, encode_prompt
from ..models.selector_prompt import truncate_text
from ..records import CandidateDoc, CandidateRecord

__all__ = [
    "CONTENT_FREE_QUERY",
    "FUSION_GRID",
    "FusionChoice",
    "ICRLayerChoice",
    "ICRPrompt",
    "ICRScores",
    "build_icr_prompt",
    "choose_fusion_weight",
    "choose_icr_layers",
    "fuse_with_rank",
    "gold_positions",
    "icr_attention",
    "icr_scores",
    "model_layer_count",
    "ranking_auc",
    "resolve_icr_layers",
    "standardise",
]

CONTENT_FREE_QUERY = "N/A"  # Chen et al.'s calibration query
ICR_HEADER = "Here are some paragraphs:"
ICR_INSTRUCTION = "Please find information that is relevant to the following query in the paragraphs above."
QUERY_LABEL = "Query: "
FUSION_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


# ----------------------------------------------------------------------------- the prompt

@dataclass(frozen=True)
class ICRPrompt:
    """One ICR prompt, tokenised.

    `input_ids`: the token ids (no padding, special tokens included as the text carries them). `passage_spans`:
    per passage, in candidate order, its body's tokens as ``[start, end)`` positions in `input_ids` (empty for
    an empty passage). `query_span`: the question's tokens, ``[start, end)``. `text`: the rendered prompt text
    (the ids are those of its pieces, which may differ from tokenising `text` whole at the piece boundaries).
    """

    input_ids: tuple[int, ...]
    passage_spans: tuple[tuple[int, int], ...]
    query_span: tuple[int, int]
    text: str


def _body(doc: CandidateDoc | Mapping[str, Any]) -> str:
    if isinstance(doc, CandidateDoc):
        return passage_text(doc.title, doc.text)
    return doc_passage_text(doc)


def _ids(tokenizer: Any, text: str) -> list[int]:
    """`text` (a message piece: ours, a passage or the question) as plain text, control-token strings included."""
    return list(encode_plain(tokenizer, text)["input_ids"])


def build_icr_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc | Mapping[str, Any]],
                     max_passage_tokens: int = 192) -> ICRPrompt:
    """The ICR prompt of `question` over `docs` (`CandidateDoc` records or ``{title, text}`` dicts), with the
    token span of every passage body and of the question (module docstring). ValueError for an empty question
    or a `max_passage_tokens` below 1."""
    q = question.strip()
    if not q:
        raise ValueError("ICR: the question is empty")
    if max_passage_tokens < 1:
        raise ValueError(f"ICR: max_passage_tokens must be >= 1, got {max_passage_tokens}")
    bodies = [truncate_text(tokenizer, _body(d), max_passage_tokens) for d in docs]
    pieces: list[tuple[str, str]] = [("fixed", ICR_HEADER)]  # (kind, text); kinds: fixed, passage, query
    for k, body in enumerate(bodies, start=1):
        pieces += [("fixed", f"\n\n[{k}] "), ("passage", body)]
    pieces += [("fixed", f"\n\n{ICR_INSTRUCTION}\n\n{QUERY_LABEL}"), ("query", q)]
    user = "".join(text for _, text in pieces)
    prompt = render_chat(tokenizer, None, user)
    head = prompt.text[: prompt.user_offset]
    tail = prompt.text[prompt.user_offset + len(user):]
    ids = encode_prompt(tokenizer, PromptText(head, [s for s in prompt.text.control_spans if s[1] <= len(head)]))[0]
    spans: list[tuple[int, int]] = []
    query_span = (0, 0)
    for kind, text in pieces:
        start = len(ids)
        ids += _ids(tokenizer, text)
        if kind == "passage":
            spans.append((start, len(ids)))
        elif kind == "query":
            query_span = (start, len(ids))
    ids += encode_prompt(tokenizer, tail)[0]  # the template's tail: nothing of the data
    if query_span[1] <= query_span[0]:
        raise ValueError(f"ICR: the question {q!r} has no tokens")
    return ICRPrompt(tuple(ids), tuple(spans), query_span, prompt.text)


# ----------------------------------------------------------------------------- attention scores

def resolve_icr_layers(n_layers: int, setting: str | Sequence[int], key: str = "eval.icr_layers") -> tuple[int, ...]:
    """The ascending layer indices `setting` names on a model of `n_layers` decoder layers: ``all``, or a list
    of indices (negative ones count from the end; repeats collapse). ValueError naming `key` otherwise, and for a
    model without decoder layers."""
    if n_layers < 1:
        raise ValueError(f"{key}: the model has no decoder layers (num_hidden_layers is {n_layers}), so ICR has no "
                         "attention to read; use a model with layers as eval.icr_model")
    if isinstance(setting, str):
        if setting != "all":
            raise ValueError(f"{key} must be 'all' or a list of layer indices, got {setting!r}")
        return tuple(range(n_layers))
    values = list(setting)
    if not values or any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) for i in values):
        raise ValueError(f"{key} must be 'all' or a non-empty list of layer indices, got {values!r}")
    out = sorted({int(i) + n_layers if int(i) < 0 else int(i) for i in values})
    if out[0] < 0 or out[-1] >= n_layers:
        raise ValueError(f"{key}: layer indices {values} out of range for a model with {n_layers} layers "
                         f"(0..{n_layers - 1}, or -{n_layers}..-1 from the end)")
    return tuple(out)


@dataclass(frozen=True)
class ICRScores:
    """Per-layer ICR attention of one question's K passages.

    `layers`: the model's layer indices read, ascending (the rows). `question` and `content_free`: float64
    arrays of shape (len(layers), K), s_l(d_k | question) and s_l(d_k | "N/A") in attention probability
    (module docstring), 0 for an empty passage.
    """

    layers: tuple[int, ...]
    question: np.ndarray
    content_free: np.ndarray

    @property
    def calibrated(self) -> np.ndarray:
        """(len(layers), K): question minus content-free attention, per layer."""
        return self.question - self.content_free

    def score(self, layers: str | Sequence[int] = "all") -> np.ndarray:
        """(K,) calibrated ICR score: the sum of `calibrated` over `layers` (``all``: every row read; else
        model layer indices, non-negative, each one of `self.layers`). ValueError for a layer not read."""
        if isinstance(layers, str):
            if layers != "all":
                raise ValueError(f"ICR layers must be 'all' or layer indices, got {layers!r}")
            return self.calibrated.sum(axis=0)
        slots = {layer: i for i, layer in enumerate(self.layers)}
        missing = [i for i in layers if i not in slots]
        if missing:
            raise ValueError(f"ICR layers {missing} were not read (read: {list(self.layers)})")
        return self.calibrated[[slots[i] for i in sorted(set(layers))]].sum(axis=0)


def model_layer_count(model: Any) -> int:
    """The number of decoder layers of `model` (`purecover.teacher.capture.decoder_layers`)."""
    from ..teacher.capture import decoder_layers

    return len(decoder_layers(model))


def icr_attention(model: Any, prompts: Sequence[ICRPrompt], layers: Sequence[int], pad_id: int = 0,
                  max_chunk_bytes: int = 256 << 20) -> list[np.ndarray]:
    """s_l(d_k | query) for each prompt: one float64 array of shape (len(layers), K) per prompt, rows in
    ascending layer order. One forward pass over the prompts, left-padded into one batch on the model's
    device, through `purecover.teacher.capture.capture_segment_attention` (per layer, rows = the query span,
    columns = the passage spans). ValueError when a prompt is longer than the model's positions."""
    import torch

    from ..teacher.capture import SegmentSpec, capture_segment_attention

    if not prompts:
        return []
    t_max = max(len(p.input_ids) for p in prompts)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit and t_max > limit:
        raise ValueError(f"ICR prompt of {t_max} tokens exceeds the model's {limit} positions (lower "
                         "eval.icr_max_passage_tokens or data.k1)")
    ids = torch.full((len(prompts), t_max), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(prompts), t_max), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: spans are positions in the unpadded ids
        ids[i, t_max - len(p.input_ids):] = torch.tensor(p.input_ids, dtype=torch.long)
        mask[i, t_max - len(p.input_ids):] = 1
    specs = [SegmentSpec.of([p.query_span], p.passage_spans or [(0, 0)]) for p in prompts]
    device = next(model.parameters()).device
    means = capture_segment_attention(model, ids.to(device), mask.to(device), specs, layers=list(layers),
                                      max_chunk_bytes=max_chunk_bytes, per_layer=True)
    out = []
    for p, mean in zip(prompts, means):
        sizes = np.array([e - s for s, e in p.passage_spans], dtype=np.float64)  # (K,)
        per_token = mean[:, 0, : len(sizes)].numpy()  # (L, K): mean over query tokens, heads and passage tokens
        out.append(np.where(sizes > 0, np.nan_to_num(per_token) * sizes, 0.0))  # mass: times |d_k|
    return out


def icr_scores(model: Any, tokenizer: Any, question: str, docs: Sequence[CandidateDoc | Mapping[str, Any]],
               layers: str | Sequence[int] = "all", *, max_passage_tokens: int = 192,
               content_free_query: str = CONTENT_FREE_QUERY, max_chunk_bytes: int = 256 << 20) -> ICRScores:
    """Per-layer ICR attention of `question` and of the content-free query over `docs`: both prompts in one
    batch (`icr_attention`). `layers`: ``all`` or layer indices (`resolve_icr_layers`); only those are read,
    and the forward pass stops after the last of them."""
    chosen = resolve_icr_layers(model_layer_count(model), layers)
    prompts = [build_icr_prompt(tokenizer, question, docs, max_passage_tokens),
               build_icr_prompt(tokenizer, content_free_query, docs, max_passage_tokens)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    real, free = icr_attention(model, prompts, chosen, pad, max_chunk_bytes)
    return ICRScores(chosen, real, free)


# ----------------------------------------------------------------------------- ranking, layers and fusion

def gold_positions(candidate_record: CandidateRecord) -> list[int]:
    """Positions of the candidates that are gold passages (``doc_id`` in ``gold_doc_ids``)."""
    gold = set(candidate_record.gold_doc_ids)
    return [i for i, d in enumerate(candidate_record.docs) if d.doc_id is not None and d.doc_id in gold]


def standardise(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """z-scores of one question's values: (x − mean) / std (population std); all zeros when std is 0."""
    v = np.asarray(x, dtype=np.float64)
    if v.size == 0:
        return v.copy()
    sd = float(v.std())
    return (v - v.mean()) / sd if sd > 0 and math.isfinite(sd) else np.zeros_like(v)


def fuse_with_rank(icr: Sequence[float] | np.ndarray, weight: float,
                   ranks: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
    """(K,) fused score of one question: z(icr) + weight · z(−rank). `ranks`: the candidates' retrieval ranks
    (0 = best); None: their positions 0..K−1 (candidates.jsonl lists them best first). weight 0 is ICR alone; a
    large weight tends to the retrieval order."""
    if not weight >= 0 or not math.isfinite(weight):
        raise ValueError(f"ICR fusion weight must be a finite number >= 0, got {weight!r}")
    s = np.asarray(icr, dtype=np.float64)
    r = np.arange(s.size, dtype=np.float64) if ranks is None else np.asarray(ranks, dtype=np.float64)
    if r.shape != s.shape:
        raise ValueError(f"ICR fusion: {r.size} ranks for {s.size} scores")
    return standardise(s) + weight * standardise(-r)


def _usable(scores: Sequence[np.ndarray], gold: Sequence[Sequence[int]], what: str) -> list[tuple[np.ndarray, np.ndarray, int]]:
    if len(scores) != len(gold):
        raise ValueError(f"{what}: {len(scores)} questions of scores but {len(gold)} of gold positions")
    out = []
    for q, (s, g) in enumerate(zip(scores, gold)):
        s = np.asarray(s, dtype=np.float64)
        mask = gold_mask(g, s.shape[-1], f"{what}: question {q}")
        if mask.any() and not mask.all():
            out.append((s, mask, q))
    if not out:
        raise ValueError(f"{what}: no calibration question has both gold and non-gold candidates")
    return out


@dataclass(frozen=True)
class ICRLayerChoice:
    """The layer set `choose_icr_layers` picked.

    `setting`: the value for ``eval.icr_layers`` (``all``, or the list of layer indices). `layers`: the layer
    indices summed. `auc`: its mean ranking AUC. `table`: every candidate set with its mean AUC, in the order
    they were tried. `questions`: how many questions had both gold and non-gold candidates (the mean's count).
    """

    setting: str | list[int]
    layers: tuple[int, ...]
    auc: float
    table: tuple[tuple[tuple[int, ...], float], ...]
    questions: int


def choose_icr_layers(per_layer: Sequence[np.ndarray], gold: Sequence[Sequence[int]],
                      layer_ids: Sequence[int] | None = None, windows: bool = True) -> ICRLayerChoice:
    """The layer set whose summed calibrated ICR score has the highest mean ranking AUC over questions.

    `per_layer[q]`: question q's calibrated per-layer scores, shape (L, K_q) (`ICRScores.calibrated`; the
    same L rows for every question, K_q may vary). `gold[q]`: its gold candidate positions. `layer_ids`: the
    model layer of each row (None: rows are layers 0..L−1, and the set of every row is ``all``). Questions
    without gold, or with only gold, candidates are left out of the mean (ValueError when none is left).

    Candidate sets, tried in this order: every row (``all``), each single row, then (`windows`) each run of
    2..L−1 consecutive rows, shorter first, then by start. A later set must beat the best so far strictly,
    so ties go to the earlier set. L(L+1)/2 sets in all with windows, L + 1 without.
    """
    usable = _usable(per_layer, gold, "choose_icr_layers")
    n_rows = usable[0][0].shape[0]
    for s, _, q in usable:
        if s.ndim != 2 or s.shape[0] != n_rows:
            raise ValueError(f"choose_icr_layers: question {q} has scores of shape {s.shape}, expected ({n_rows}, K)")
    ids = tuple(range(n_rows)) if layer_ids is None else tuple(int(i) for i in layer_ids)
    if len(ids) != n_rows:
        raise ValueError(f"choose_icr_layers: {len(ids)} layer ids for {n_rows} rows of scores")
    ranges = [(0, n_rows)] + [(i, i + 1) for i in range(n_rows) if n_rows > 1]
    if windows:
        ranges += [(a, a + w) for w in range(2, n_rows) for a in range(n_rows - w + 1)]
    total = np.zeros(len(ranges), dtype=np.float64)
    for s, mask, _ in usable:
        cum = np.vstack([np.zeros((1, s.shape[1])), np.cumsum(s, axis=0)])  # (L + 1, K)
        sums = np.stack([cum[b] - cum[a] for a, b in ranges])  # (n_sets, K)
        total += ranking_auc_rows(sums, mask)  # type: ignore[operator]  # both kinds are present
    mean = total / len(usable)
    best = 0
    for i in range(1, len(ranges)):
        if mean[i] > mean[best]:
            best = i
    table = tuple((ids[a:b], float(m)) for (a, b), m in zip(ranges, mean))
    a, b = ranges[best]
    setting: str | list[int] = "all" if best == 0 and layer_ids is None else list(ids[a:b])
    return ICRLayerChoice(setting, ids[a:b], float(mean[best]), table, len(usable))


@dataclass(frozen=True)
class FusionChoice:
    """The fusion weight `choose_fusion_weight` picked: `weight`, its mean ranking AUC `auc`, every weight of
    the grid with its mean AUC (`table`), and the number of questions in the mean (`questions`)."""

    weight: float
    auc: float
    table: tuple[tuple[float, float], ...]
    questions: int


def choose_fusion_weight(scores: Sequence[np.ndarray], gold: Sequence[Sequence[int]],
                         grid: Sequence[float] = FUSION_GRID,
                         ranks: Sequence[Sequence[float] | np.ndarray] | None = None) -> FusionChoice:
    """The weight w of `grid` whose fused score z(icr) + w · z(−rank) (`fuse_with_rank`) has the highest mean
    ranking AUC over questions (the criterion; ties go to the earlier weight of the grid, the smaller one in
    the default ascending grid).

    `scores[q]`: question q's (K_q,) ICR scores (`ICRScores.score`); `gold[q]`: its gold positions; `ranks`:
    per question the retrieval ranks (None: positions). Questions without both gold and non-gold candidates
    are left out (ValueError when none is left).
    """
    weights = [float(w) for w in grid]
    if not weights or any(not (w >= 0 and math.isfinite(w)) for w in weights):
        raise ValueError(f"choose_fusion_weight: the grid must be non-empty finite weights >= 0, got {list(grid)}")
    if ranks is not None and len(ranks) != len(scores):
        raise ValueError(f"choose_fusion_weight: {len(ranks)} questions of ranks for {len(scores)} of scores")
    usable = _usable(scores, gold, "choose_fusion_weight")
    total = np.zeros(len(weights), dtype=np.float64)
    for s, mask, q in usable:
        r = np.arange(s.size, dtype=np.float64) if ranks is None else np.asarray(ranks[q], dtype=np.float64)
        if r.shape != s.shape:
            raise ValueError(f"choose_fusion_weight: question {q} has {r.size} ranks for {s.size} scores")
        zs, zr = standardise(s), standardise(-r)
        fused = zs[None, :] + np.asarray(weights)[:, None] * zr[None, :]
        total += ranking_auc_rows(fused, mask)  # type: ignore[operator]
    mean = total / len(usable)
    best = 0
    for i in range(1, len(weights)):
        if mean[i] > mean[best]:
            best = i
    return FusionChoice(weights[best], float(mean[best]), tuple(zip(weights, map(float, mean))), len(usable))
