"""The deployed selector: one forward pass over the prompt, each candidate's score as its readout reads it
(`purecover.models.readouts`), threshold τ3.

    from purecover.models.selector import Selector

    selector = Selector.from_pretrained("runs/demo/selector")            # HF transformers, CPU or GPU
    result = selector.select("Who ...?", [{"title": "...", "text": "..."}, ...])
    result.indices         # kept passages, best first
    result.logits          # score s_k (the readout's logit) of every candidate, in candidate order
    result.probabilities   # softmax of the scores over the candidates, in candidate order

A selector directory holds the model (merged safetensors, or a LoRA adapter to load on
``base_model``), the tokenizer and ``selector_config.json`` (docs/concepts/file-formats.md). Decisions follow
docs/concepts/method.md#inference: keep {k : s_k > τ3}, ordered by s_k (ties: earlier candidate), at most k_max, at
least min_select.

Two backends behind one interface (`SelectorBackend`):

- ``hf``: transformers. One forward pass per left-padded batch with position ids from the
  attention mask and ``logits_to_keep=1``; the logits of every identifier are read from the full
  vocabulary row at the first reply position (never a truncated top-k).
- ``vllm`` (``pip install -e '.[vllm]'``, needs a merged export): one generated token per
  prompt (sent as token ids, ``max_tokens=1``, greedy) with ``allowed_token_ids`` = the identifiers of
  the prompt's candidates. The engine is started in the first ``logprobs_mode`` it accepts, in this
  order: ``processed_logits`` (the identifiers' logits: score space ``logit``), ``processed_logprobs``
  (log-probabilities over the allowed identifiers), then the engine's default (raw log-probabilities
  over the whole vocabulary). Then it reads the identifiers in one of two ways (`VLLM_READ_MODES`):
  *label reads* when the installed ``vllm.SamplingParams`` has ``logprob_token_ids`` (detected from the
  class; vLLM PR #34539, spring 2026): each request asks for exactly its identifier ids and gets each
  one's value whatever its rank; otherwise the *top-k read* (``logprobs`` = the number of identifiers:
  exact in the processed modes, where the mask leaves only the identifiers; in the default mode usable
  only when every identifier is in the top-k). Label reads return log-probabilities of the processed
  logits in vLLM before PR #43125 and follow ``logprobs_mode`` after it, so in ``processed_logits`` mode
  a start-up check compares them with the top-k read: label reads stay in score space ``logit`` when
  they return the logits, else the (exact) top-k read is kept. Log-probabilities are log p_k = s_k - c
  with c constant per prompt, so renormalising them over the present identifiers
  (`identifier_log_softmax`) gives s_k - logsumexp_j s_j exactly, whatever the mode or read: score space
  ``logprob``, thresholded with ``tau3_logprob`` (τ3 calibrated on the same held-out scores in that
  space). A missing identifier is an error, never a silently dropped candidate;
  `VLLMSelectorBackend.read_info` records the read mode, the logprobs mode and the score space.

`SelectionResult.score_space` records which space the scores (and the threshold) are in.

The passage readout (``readout: passage`` in selector_config.json, our extension; docs/guides/student.md#readouts):
s_k is the logit of a fixed token at the marker after passage k, read in the same single forward pass
(`SelectorBackend.passage_logits`; the HF backend: `purecover.models.passage_scores.hf_passage_logits`), or with
``passage_score: head`` a linear head on the hidden state there (``score_head.safetensors``,
`purecover.models.score_head`; the HF backend loads it). The vLLM backend reads identifier logits only, so a
passage selector is refused there with one line (`passage_backend_refusal`), before any engine starts. What each
readout needs is asked of it (`purecover.models.readouts`), never branched on by name here.

The vLLM backend is `purecover.models.selector_vllm` (its names are re-exported here).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from pydantic import JsonValue

from ..records import SelectorConfig, load_json_record, validate_record
from .identifiers import IdentifierScheme
from .passage_scores import hf_passage_logits, left_pad, passage_backend_refusal
from .readouts import Readout, get_readout
from .score_head import SCORE_HEAD_FILE, HeadReadout, ScoreHead, output_projection
from .selection import select_from_scores, softmax_probabilities
from .selection_result import (
    NonFiniteScoresError,
    SelectionResult,
    SelectionRow,
    as_candidate_doc,
    check_finite_scores,
)
from .selector_prompt import SelectorWording, build_selector_prompt, head_token_ids
from .selector_vllm import VLLM_LOGPROBS_MODES, VLLM_READ_MODES, VLLMSelectorBackend

log = logging.getLogger(__name__)

__all__ = [
    "MAX_QUESTION_TOKENS",
    "SCORE_SPACES",
    "SELECTOR_CONFIG",
    "VLLM_LOGPROBS_MODES",
    "VLLM_READ_MODES",
    "HFSelectorBackend",
    "NonFiniteScoresError",
    "SelectionResult",
    "SelectionRow",
    "Selector",
    "SelectorBackend",
    "VLLMSelectorBackend",
    "as_candidate_doc",
    "hf_identifier_logits",
    "passage_backend_refusal",
    "read_selector_config",
]

SELECTOR_CONFIG = "selector_config.json"
MAX_QUESTION_TOKENS = 256  # longer questions are cut to this many tokens (see `Selector`)
_CONFIG_HINT = "re-export the selector with `purecover export RECIPE`, or correct the value"
# Score spaces: "logit" (first-token logits s_k, threshold tau3) and "logprob" (s_k - logsumexp over the
# present identifiers, threshold tau3_logprob).
SCORE_SPACES = ("logit", "logprob")


class SelectorBackend(Protocol):
    """Computes first-reply-position scores of given identifier tokens for tokenised prompts.

    `score_space`: "logit" (raw logits) or "logprob" (renormalised over the given identifiers).
    """

    score_space: str

    def identifier_logits(self, prompts: Sequence[Sequence[int]],
                          identifier_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """For prompt i, the logit of each token of `identifier_ids[i]` (same order) at the next position."""
        ...

    def close(self) -> None:
        """Free the backend's memory."""
        ...


# --------------------------------------------------------------------------- HF


@torch.no_grad()
def hf_identifier_logits(model: Any, prompts: Sequence[Sequence[int]], identifier_ids: Sequence[Sequence[int]],
                         batch_size: int = 8, pad_id: int = 0) -> list[list[float]]:
    """Identifier logits at the first reply position: one forward pass per left-padded batch.

    Position ids come from the attention mask (so padding does not shift positions) and only the
    last position's logits are computed (``logits_to_keep=1``); the full vocabulary row is kept
    and indexed, so every identifier gets its logit.
    """
    if len(prompts) != len(identifier_ids):
        raise ValueError(f"{len(prompts)} prompts but {len(identifier_ids)} identifier lists")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out: list[list[float]] = []
    try:
        for i in range(0, len(prompts), batch_size):
            batch = prompts[i : i + batch_size]
            ids, mask, pos, _ = left_pad(batch, pad_id, device)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                           logits_to_keep=1).logits[:, -1].float()
            for j in range(len(batch)):
                tok = torch.tensor(list(identifier_ids[i + j]), dtype=torch.long, device=logits.device)
                out.append(logits[j, tok].cpu().tolist())
    finally:
        model.train(was_training)
    return out


class HFSelectorBackend:
    """A transformers causal LM (merged selector, or base + LoRA adapter)."""

    score_space = "logit"

    def __init__(self, model: Any, pad_id: int = 0, batch_size: int = 8, score_head: ScoreHead | None = None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.model = model
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.head_readout: HeadReadout | None = None
        if score_head is not None:  # passage_score head: on the model's device and in its dtype
            proj = output_projection(model)
            weight = next(proj.parameters())
            self.head_readout = HeadReadout(score_head.to(device=weight.device, dtype=weight.dtype).eval(), proj)

    @classmethod
    def load(cls, path: str | Path, config: SelectorConfig, *, pad_id: int = 0, device: str = "auto",
             dtype: str = "auto", device_map: str | None = None, trust_remote_code: bool = False,
             batch_size: int = 8, attn_implementation: str = "sdpa") -> HFSelectorBackend:
        from .loading import load_causal_lm

        kwargs = {"dtype": dtype, "device": device, "device_map": device_map,
                  "trust_remote_code": trust_remote_code, "attn_implementation": attn_implementation}
        if config.adapter:
            try:
                from peft import PeftModel
            except ImportError as exc:  # pragma: no cover - peft is a dependency
                raise ImportError(f"{path} holds a LoRA adapter (export.merge: false); loading it needs peft") from exc
            base = load_causal_lm(config.base_model, **kwargs)
            model = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
            model.eval()
        else:
            model = load_causal_lm(str(path), **kwargs)
        reader = get_readout(config.readout, config.passage_score)
        head = reader.load_head(path, hidden_size=int(output_projection(model).weight.shape[1])) \
            if reader.has_head else None
        return cls(model, pad_id=pad_id, batch_size=batch_size, score_head=head)

    def identifier_logits(self, prompts: Sequence[Sequence[int]],
                          identifier_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        return hf_identifier_logits(self.model, prompts, identifier_ids, batch_size=self.batch_size,
                                    pad_id=self.pad_id)

    def passage_logits(self, prompts: Sequence[Sequence[int]], read_positions: Sequence[Sequence[int]],
                       read_token: int) -> list[list[float]]:
        """The passage readout: the logit of `read_token` at each read position of each prompt (or, with a scoring
        head, the head on the hidden state there)."""
        return hf_passage_logits(self.model, prompts, read_positions, read_token, batch_size=self.batch_size,
                                 pad_id=self.pad_id, score_head=self.head_readout)

    def close(self) -> None:
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------- Selector


def read_selector_config(path: str | Path) -> SelectorConfig:
    """``selector_config.json`` of a selector directory as a `SelectorConfig` (types, ranges, finite
    thresholds checked). Keys that older exports lack get their defaults; unknown keys are kept
    (``model_extra``).

    A bad value raises one ValueError naming the file, the field and the problem.
    """
    file = Path(path) / SELECTOR_CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist: not a selector directory (run `purecover export RECIPE`)")
    return load_json_record(file, SelectorConfig, hint=_CONFIG_HINT)


class Selector:
    """A trained selector bound to its tokenizer, identifier scheme and threshold (see module docstring).

    `config`: a `SelectorConfig` (`read_selector_config`), or the content of selector_config.json as a dict
    (validated as one; a bad value is a ValueError naming the field). Questions longer than `max_question_tokens` tokens are cut to that
    many (the question appears twice in the prompt, so an unbounded one would make the prompt, the
    time and the memory of the forward pass unbounded), like passages are cut to ``max_passage_tokens``.
    The default, `MAX_QUESTION_TOKENS` = 256, is well above the questions the selector is trained on
    (multi-hop QA questions are under ~100 tokens), so ordinary questions are rendered exactly as in
    training; only pathological ones are cut. `questions_truncated` counts the questions cut so far.
    """

    def __init__(self, tokenizer: Any, config: SelectorConfig | Mapping[str, JsonValue], backend: SelectorBackend, *,
                 max_question_tokens: int = MAX_QUESTION_TOKENS) -> None:
        record = config if isinstance(config, SelectorConfig) else validate_record(
            SelectorConfig, dict(config), "selector config", hint=_CONFIG_HINT)
        if isinstance(max_question_tokens, bool) or not isinstance(max_question_tokens, int) \
                or max_question_tokens < 1:
            raise ValueError(f"max_question_tokens must be an integer >= 1, got {max_question_tokens!r}")
        self.tokenizer = tokenizer
        self.config: SelectorConfig = record
        self.backend = backend
        self.k1: int = record.k1
        self.tau3: float = record.tau3
        self.score_space: str = str(getattr(backend, "score_space", "logit"))
        if self.score_space not in SCORE_SPACES:
            raise ValueError(f"backend score space {self.score_space!r}; expected one of {SCORE_SPACES}")
        if self.score_space == "logprob" and record.tau3_logprob is None:
            raise ValueError(
                "this backend reads log-probabilities (vLLM without logprobs_mode='processed_logits'), which need "
                "the threshold 'tau3_logprob', but selector_config.json has none (exported by an older purecover). "
                "Retrain with this purecover (train records tau3_logprob next to tau3) and re-export, or use a vLLM "
                "that accepts logprobs_mode='processed_logits', or backend='hf'")
        # The threshold of the backend's score space: tau3 on logits, tau3_logprob on renormalised log-probs.
        threshold = record.tau3 if self.score_space == "logit" else record.tau3_logprob
        assert threshold is not None  # a log-prob backend without tau3_logprob is refused just above
        self.threshold: float = threshold
        self.k_max: int | None = record.k_max
        self.min_select: int = record.min_select
        self.max_passage_tokens: int = record.max_passage_tokens
        self.max_question_tokens: int = max_question_tokens
        self.questions_truncated: int = 0  # questions cut to max_question_tokens so far (see class docstring)
        self.source: str = "selector"  # what error messages call it: its directory once `from_pretrained` loads it
        self.scheme = IdentifierScheme.from_record(record.identifiers).check(tokenizer, self.k1)
        # where the scores are read: the identifiers' logits after the prompt, or a token's logit at each passage
        self.readout: str = record.readout
        self.reader: Readout = get_readout(record.readout, record.passage_score)
        self.reader.check_backend(backend)
        self.read_token: int | None = self.reader.read_token(tokenizer)
        # the wording it was trained with: ours, or the one recorded (it must hash to the recorded hash)
        self.wording = SelectorWording.from_record(record.prompt_template, self.readout)

    @classmethod
    def from_pretrained(cls, path: str | Path, backend: str = "hf", *, device: str = "auto", dtype: str = "auto",
                        batch_size: int = 8, trust_remote_code: bool = False,
                        max_question_tokens: int = MAX_QUESTION_TOKENS, **backend_kwargs: Any) -> Selector:
        """Load a selector directory (``purecover export`` output) with the ``hf`` or ``vllm`` backend.

        hf: `device` (auto | cpu | cuda[:N]), `dtype` (auto | float32 | bfloat16 | float16), `batch_size`
        (prompts per forward pass), plus `device_map` / `attn_implementation`. vllm: `dtype` and any
        `vllm.LLM` argument (tensor_parallel_size, gpu_memory_utilization, max_model_len, ...).
        `max_question_tokens`: questions are cut to this many tokens (class docstring).
        """
        from .loading import load_tokenizer

        if backend not in ("hf", "vllm"):
            raise ValueError(f"unknown selector backend {backend!r}; expected hf or vllm")
        path = Path(path)
        config = read_selector_config(path)
        reader = get_readout(config.readout, config.passage_score)
        if not reader.has_head and (path / SCORE_HEAD_FILE).exists():
            said = "passage_score: token" if "passage_score" in config.model_fields_set else \
                "no passage_score (so the token readout)"
            raise ValueError(
                f"{path / SCORE_HEAD_FILE} holds a trained scoring head, but {path / SELECTOR_CONFIG} says {said}: "
                "its threshold tau3 belongs to one of the two and the files disagree on which. Re-export the "
                "selector with `purecover export`, or remove the file that does not belong")
        if backend == "vllm" and not reader.vllm:
            raise ValueError(f"{path}: " + passage_backend_refusal("the vllm backend"))
        if backend == "vllm" and config.adapter:
            raise ValueError(f"{path} holds a LoRA adapter (export.merge: false); the vllm backend needs a merged "
                             "export: rerun `purecover export` with export.merge=true")
        tokenizer = load_tokenizer(str(path), trust_remote_code=trust_remote_code, padding_side="left")
        impl: SelectorBackend
        if backend == "hf":
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            impl = HFSelectorBackend.load(path, config, pad_id=pad_id, device=device, dtype=dtype,
                                          trust_remote_code=trust_remote_code, batch_size=batch_size,
                                          **backend_kwargs)
        else:
            impl = VLLMSelectorBackend(path, config.k1, dtype=dtype, trust_remote_code=trust_remote_code,
                                       **backend_kwargs)
        selector = cls(tokenizer, config, impl, max_question_tokens=max_question_tokens)
        selector.source = f"selector {path}"
        return selector

    def _cut_question(self, question: str, where: str) -> str:
        """`question` cut to `max_question_tokens` tokens (counted in `questions_truncated`), else unchanged."""
        ids, longer = head_token_ids(self.tokenizer, question, self.max_question_tokens)
        if not longer:
            return question
        self.questions_truncated += 1
        log.debug("%s: question of %d characters cut to max_question_tokens=%d", where, len(question),
                  self.max_question_tokens)
        return str(self.tokenizer.decode(ids)).strip()

    def _prompt(self, question: str, docs: Sequence[Any], where: str) -> tuple[list[int], int, list[int] | None]:
        if not isinstance(question, str):
            raise TypeError(f"{where}: question must be a str, got {type(question).__name__}")
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Sequence):
            raise TypeError(f"{where}: docs must be a list of candidates, got {type(docs).__name__}")
        if not docs:
            raise ValueError(f"{where}: no candidate documents to select from")
        if len(docs) > self.k1:
            raise ValueError(f"{where}: {len(docs)} candidates, but this selector labels at most k1={self.k1} "
                             f"(its identifier scheme was trained for {self.k1}); pass the top {self.k1} candidates")
        rows = [as_candidate_doc(d, i) for i, d in enumerate(docs)]
        prompt = build_selector_prompt(self.tokenizer, self._cut_question(question, where), rows, self.scheme,
                                       self.max_passage_tokens, self.wording, self.readout)
        return prompt.input_ids, len(rows), prompt.read_positions

    def select_batch(self, questions: Sequence[str], docs_lists: Sequence[Sequence[Any]], tau: float | None = None,
                     k_max: int | None = None, min_select: int | None = None) -> list[SelectionResult]:
        """`select` for many questions (the backend batches the forward passes).

        `tau` is in the backend's score space (`score_space`); default: `threshold`.
        """
        if len(questions) != len(docs_lists):
            raise ValueError(f"{len(questions)} questions but {len(docs_lists)} candidate lists")
        tau = self.threshold if tau is None else float(tau)
        k_max = self.k_max if k_max is None else int(k_max)
        min_select = self.min_select if min_select is None else int(min_select)
        prompts, idents, reads = [], [], []
        for i, (q, docs) in enumerate(zip(questions, docs_lists)):
            ids, n, positions = self._prompt(q, docs, f"question {i}")
            prompts.append(ids)
            idents.append(self.scheme.token_ids[:n])
            reads.append(positions or [])
        rows = self.reader.scores(self.backend, prompts, idents, reads, self.read_token)
        check_finite_scores(rows, self.source)
        results = []
        for row, ids in zip(rows, idents):
            if len(row) != len(ids):
                raise RuntimeError(f"backend returned {len(row)} logits for {len(ids)} candidates")
            results.append(SelectionResult(indices=select_from_scores(row, tau, min_select, k_max), logits=list(row),
                                           probabilities=softmax_probabilities(row), score_space=self.score_space))
        return results

    def select(self, question: str, docs: Sequence[Any], tau: float | None = None, k_max: int | None = None,
               min_select: int | None = None) -> SelectionResult:
        """Select among `docs` (`CandidateDoc` records, dicts with ``text`` and optional ``title``, or plain
        strings, in retrieval order).

        `tau`, `k_max`, `min_select` default to the calibrated values in selector_config.json (`tau`:
        ``tau3`` for logits, ``tau3_logprob`` for a log-prob backend; see `score_space`).
        """
        return self.select_batch([question], [docs], tau=tau, k_max=k_max, min_select=min_select)[0]

    def close(self) -> None:
        self.backend.close()
