"""The deployed selector: one forward pass over the prompt, first-token identifier logits, threshold τ3.

    from purecover.models.selector import Selector

    selector = Selector.from_pretrained("runs/demo/selector")            # HF transformers, CPU or GPU
    result = selector.select("Who ...?", [{"title": "...", "text": "..."}, ...])
    result.indices         # kept passages, best first
    result.logits          # first-token logit s_k of every candidate, in candidate order
    result.probabilities   # softmax over the present identifiers, in candidate order

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
passage selector is refused there with one line (`passage_backend_refusal`), before any engine starts.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from pydantic import JsonValue

from ..records import SelectorConfig, load_json_record, validate_record
from .identifiers import IdentifierScheme
from .passage_scores import hf_passage_logits, left_pad, passage_backend_refusal
from .score_head import HeadReadout, ScoreHead, output_projection
from .selection import identifier_log_softmax, select_from_scores, softmax_probabilities
from .selection_result import SelectionResult, SelectionRow, as_candidate_doc
from .selector_prompt import SelectorWording, build_selector_prompt, head_token_ids, read_token_id

log = logging.getLogger(__name__)

__all__ = [
    "MAX_QUESTION_TOKENS",
    "SCORE_SPACES",
    "SELECTOR_CONFIG",
    "VLLM_LOGPROBS_MODES",
    "VLLM_READ_MODES",
    "HFSelectorBackend",
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
# vLLM logprobs modes in order of preference (None: the engine's default, raw log-probabilities).
VLLM_LOGPROBS_MODES: tuple[str | None, ...] = ("processed_logits", "processed_logprobs", None)


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
        head = None
        if config.passage_score == "head":
            head = ScoreHead.load(path, hidden_size=int(output_projection(model).weight.shape[1]))
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


# --------------------------------------------------------------------------- vLLM


# How the vLLM backend reads the identifiers (see `VLLMSelectorBackend`): "label_reads" asks for exactly the
# identifier token ids (SamplingParams.logprob_token_ids), "top_k" for the top-n entries under the allowed-token mask.
VLLM_READ_MODES = ("label_reads", "top_k")
# The start-up check of label reads in processed_logits mode: one prompt of these token ids, scored on
# min(k1, 8) token ids from _PROBE_FIRST_ID on, read both ways (any ids the model can read will do).
_PROBE_PROMPT = tuple(range(1, 9))
_PROBE_FIRST_ID = 10
_PROBE_TOLERANCE = 1e-4  # relative to max(1, largest |logit|): the two reads gather the same tensor when they agree


class VLLMSelectorBackend:
    """vLLM's offline engine: one generated token per prompt (``max_tokens=1``, greedy), restricted to the
    prompt's identifiers (``allowed_token_ids``).

    The engine starts in the first accepted mode of `VLLM_LOGPROBS_MODES` (a TypeError / ValueError /
    NotImplementedError falls through to the next, with a log line); `logprobs_mode` records it ("default" for
    the engine's default). Then the read mode (`read_mode`, one of `VLLM_READ_MODES`; `read_reason` says why):

    - ``label_reads`` when the installed ``SamplingParams`` has ``logprob_token_ids`` (`supports_label_reads`,
      read from the class, not the version string) and k1 is within its limit: every request asks for exactly
      its identifiers, so vLLM returns the value of each of them whatever its rank, never a top-k that could
      miss one. What the values are depends on the vLLM: before vLLM PR #43125 they are log-probabilities of
      the processed logits in every mode; from it on they follow ``logprobs_mode``. Logits or
      log-probabilities, they are s_k + c with c constant per prompt, so renormalised over the identifiers
      they are exact (score space "logprob", threshold ``tau3_logprob``). In ``processed_logits`` mode one
      start-up check reads a probe prompt both ways: when the label read returns the top-k read's logits, label
      reads are used in score space "logit" (threshold ``tau3``, the HF backend's values); otherwise (an older
      vLLM) the top-k read, exact in that mode, is kept.
    - ``top_k`` otherwise: ``logprobs`` = the number of identifiers. In ``processed_logits`` mode every other
      token is −inf after the mask, so the top-n entries are exactly the identifiers with their logits (greedy
      requests are not temperature-scaled): score space "logit". The log-prob modes are renormalised over the
      identifiers: score space "logprob".

    `label_reads`: None (default) picks as above; False never uses them; True requires them (an error when this
    vLLM has none), in score space "logprob" unless the check shows logits. A missing identifier in any answer
    is an error, never a dropped candidate. `read_info` sums up the choice (the select stage records it).
    """

    def __init__(self, path: str | Path, k1: int, *, dtype: str = "auto", tensor_parallel_size: int = 1,
                 trust_remote_code: bool = False, seed: int = 0, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, label_reads: bool | None = None, **llm_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(
                "the selector's vllm backend needs vLLM: pip install -e '.[vllm]' (CUDA GPU machines), "
                "or use backend='hf'"
            ) from exc
        from .vllm_utils import release_vllm_memory, supported_logprobs_modes, vllm_version

        if label_reads is not None and not isinstance(label_reads, bool):
            raise TypeError(f"label_reads must be None, True or False, got {label_reads!r}")
        self._vllm = vllm
        self.k1 = int(k1)
        kwargs: dict[str, Any] = {
            "model": str(path), "tokenizer": str(path), "dtype": dtype, "tensor_parallel_size": tensor_parallel_size,
            "trust_remote_code": trust_remote_code, "seed": seed, "gpu_memory_utilization": gpu_memory_utilization,
            "max_logprobs": self.k1,
        }
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(llm_kwargs)
        supported = supported_logprobs_modes(vllm)
        modes = [m for m in VLLM_LOGPROBS_MODES if m is None or supported is None or m in supported]
        errors: list[str] = []
        for mode in modes:
            attempt = dict(kwargs, logprobs_mode=mode) if mode is not None else kwargs
            try:
                self.llm = vllm.LLM(**attempt)
            except (TypeError, ValueError, NotImplementedError) as exc:
                name = mode or "default"
                log.info("vLLM %s: logprobs_mode %s not usable (%s: %s); trying the next mode",
                         vllm_version(vllm), name, type(exc).__name__, exc)
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
                release_vllm_memory()
                continue
            self.logprobs_mode = mode or "default"
            self.score_space = "logit" if mode == "processed_logits" else "logprob"
            break
        else:
            tried = "; ".join(errors) or "no mode to try"
            raise RuntimeError(
                f"vLLM {vllm_version(vllm)} could not start the selector engine in any logprobs mode ({tried}). "
                "The selector needs logprobs_mode='processed_logits' or 'processed_logprobs' (vLLM >= 0.10.2), or "
                f"the engine's default log-probs with max_logprobs >= k1={self.k1}; fix the error above, upgrade "
                "vLLM, or use backend='hf'")
        try:
            self.read_mode, self.read_reason, label_space = self._choose_read_mode(label_reads)
        except BaseException:
            self.close()  # label_reads=True refused: release the started engine before raising
            raise
        if self.read_mode == "label_reads":
            self.score_space = label_space
        log.info("vLLM %s selector engine: logprobs_mode %s, read mode %s (%s), score space %s", vllm_version(vllm),
                 self.logprobs_mode, self.read_mode, self.read_reason, self.score_space)

    # ------------------------------------------------------------------ read mode

    def _choose_read_mode(self, wanted: bool | None) -> tuple[str, str, str]:
        """(read mode, why, score space of label reads) for this engine; see the class docstring."""
        from .vllm_utils import LABEL_READ_FIELD, label_read_limit, supports_label_reads, vllm_version

        version = vllm_version(self._vllm)
        if wanted is False:
            return "top_k", "label reads turned off (label_reads=False)", self.score_space
        refusal = None
        if not supports_label_reads(self._vllm):
            refusal = f"vLLM {version}: SamplingParams has no {LABEL_READ_FIELD} field"
        elif (limit := label_read_limit(self._vllm)) is not None and self.k1 > limit:
            refusal = f"k1={self.k1} is above the {limit} token ids one label read of vLLM {version} may ask for"
        if refusal is not None:
            if wanted:
                raise RuntimeError(f"label_reads=True, but {refusal}; leave label_reads unset to use the top-k read")
            return "top_k", refusal, self.score_space
        if self.logprobs_mode != "processed_logits":
            return "label_reads", f"{LABEL_READ_FIELD}, renormalised over the identifiers", "logprob"
        kind, detail = self._probe_label_reads()
        if kind == "logits":
            return "label_reads", f"{LABEL_READ_FIELD} returns the logits in processed_logits mode (checked)", "logit"
        if not wanted:
            return "top_k", (f"{LABEL_READ_FIELD} of vLLM {version} does not return the logits in processed_logits "
                             f"mode ({detail}); the top-k read is exact in that mode"), self.score_space
        if kind in ("logprobs", "ambiguous"):  # renormalising is exact for logits and log-probabilities alike
            return "label_reads", f"{LABEL_READ_FIELD}, renormalised over the identifiers ({detail})", "logprob"
        raise RuntimeError(f"label_reads=True, but the label reads of vLLM {version} are unusable: {detail}")

    def _probe_label_reads(self) -> tuple[str, str]:
        """Read a probe prompt with the top-k read (the logits, in processed_logits mode) and with a label read.

        Returns (kind, detail): kind "logits" when they agree, "logprobs" when the label read is their
        log-softmax over the identifiers, "ambiguous" when both hold, "failed" when the label read errs or
        matches neither."""
        n = min(self.k1, 8)
        ids = list(range(_PROBE_FIRST_ID, _PROBE_FIRST_ID + n))
        try:
            top = self._read_values([list(_PROBE_PROMPT)], [ids], label=False)[0]
            lab = self._read_values([list(_PROBE_PROMPT)], [ids], label=True)[0]
        except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
            return "failed", f"the probe failed: {type(exc).__name__}: {exc}"
        tol = _PROBE_TOLERANCE * max(1.0, max(abs(v) for v in top))
        as_logits = max(abs(a - b) for a, b in zip(lab, top)) <= tol
        as_logprobs = max(abs(a - b) for a, b in zip(lab, identifier_log_softmax(top))) <= tol
        if as_logits and as_logprobs:
            return "ambiguous", "ambiguous: the probe's logits are already normalised"
        if as_logits:
            return "logits", "the logits"
        if as_logprobs:
            return "logprobs", "log-probabilities over the identifiers"
        return "failed", ("it returned neither the logits nor their log-softmax (label read "
                          f"{[round(v, 4) for v in lab]}, top-k read {[round(v, 4) for v in top]})")

    def read_info(self) -> dict[str, str]:
        """What this engine reads and how: read_mode, logprobs_mode, score_space, vllm_version and the reason."""
        from .vllm_utils import vllm_version

        return {"read_mode": self.read_mode, "logprobs_mode": self.logprobs_mode, "score_space": self.score_space,
                "vllm_version": vllm_version(self._vllm), "reason": self.read_reason}

    # ------------------------------------------------------------------ reading

    def _sampling_params(self, ids: Sequence[int], label: bool) -> Any:
        """One prompt's request: one greedy token among its identifiers, with a logprob per identifier
        (``logprobs`` must equal the number of label-read ids when both are given)."""
        from .vllm_utils import LABEL_READ_FIELD

        kwargs: dict[str, Any] = {"max_tokens": 1, "temperature": 0.0, "logprobs": len(ids),
                                  "allowed_token_ids": list(ids)}
        if label:
            kwargs[LABEL_READ_FIELD] = list(ids)
        return self._vllm.SamplingParams(**kwargs)

    def _read_values(self, prompts: Sequence[Sequence[int]], identifier_ids: Sequence[Sequence[int]], *,
                     label: bool) -> list[list[float]]:
        """The engine's value of each identifier of each prompt (identifier order), as returned: logits or
        log-probabilities, not renormalised. A missing or non-finite value is a RuntimeError."""
        from .vllm_utils import LABEL_READ_FIELD

        params = [self._sampling_params(ids, label) for ids in identifier_ids]
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        rows = []
        for i, (out, ids) in enumerate(zip(outputs, identifier_ids)):
            steps = out.outputs[0].logprobs if out.outputs else None
            if not steps:
                raise RuntimeError(f"vLLM returned no logprobs for prompt {i} (was logprobs requested?)")
            first = steps[0]
            values = {tok: getattr(first.get(tok), "logprob", first.get(tok)) for tok in ids}
            bad = [k for k, tok in enumerate(ids)
                   if values[tok] is None or not math.isfinite(float(values[tok]))]
            if bad and label:
                raise RuntimeError(
                    f"vLLM label read ({LABEL_READ_FIELD}) for prompt {i} returned a finite value for "
                    f"{len(ids) - len(bad)} of the {len(ids)} identifier token ids asked for (missing: candidates "
                    f"{bad[:8]}, token ids {[ids[k] for k in bad[:8]]}); every asked id must come back. Upgrade "
                    "vLLM, pass label_reads=False to use the top-k read, or use backend='hf'")
            if bad:
                k = bad[0]
                raise RuntimeError(
                    f"vLLM returned no finite score for candidate {k} (identifier token {ids[k]}) of prompt {i}: "
                    f"got {len(first)} entries for {len(ids)} identifiers in logprobs_mode "
                    f"{self.logprobs_mode!r}. Every candidate must be scored: the engine's default mode returns "
                    "the top-k of the whole vocabulary, which can miss identifiers; use a vLLM with "
                    "logprobs_mode='processed_logits' or 'processed_logprobs' (>= 0.10.2) or with label reads "
                    "(SamplingParams.logprob_token_ids), or backend='hf'")
            rows.append([float(values[tok]) for tok in ids])
        return rows

    def identifier_logits(self, prompts: Sequence[Sequence[int]],
                          identifier_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        if len(prompts) != len(identifier_ids):
            raise ValueError(f"{len(prompts)} prompts but {len(identifier_ids)} identifier lists")
        if not prompts:
            return []
        for ids in identifier_ids:
            if not 1 <= len(ids) <= self.k1:
                raise ValueError(f"{len(ids)} identifiers; the engine was started for 1..{self.k1} (max_logprobs)")
        rows = self._read_values(prompts, identifier_ids, label=self.read_mode == "label_reads")
        return [identifier_log_softmax(row) if self.score_space == "logprob" else row for row in rows]

    def close(self) -> None:
        """Release the engine and its GPU memory."""
        from .vllm_utils import release_vllm_memory

        self.llm = None
        release_vllm_memory()


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
        self.scheme = IdentifierScheme.from_record(record.identifiers).check(tokenizer, self.k1)
        # where the scores are read: the identifiers' logits after the prompt, or a token's logit at each passage
        self.readout: str = record.readout
        self.read_token: int | None = None
        if self.readout == "passage":
            if not callable(getattr(backend, "passage_logits", None)):
                raise ValueError(passage_backend_refusal(type(backend).__name__))
            self.read_token = read_token_id(tokenizer)
            if record.passage_score == "head" and getattr(backend, "head_readout", None) is None:
                raise ValueError(f"this selector scores each passage with a trained head (selector_config.json "
                                 f"passage_score: head), which {type(backend).__name__} does not load; use "
                                 "backend='hf'")
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
        if backend == "vllm" and config.readout == "passage":
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
        return cls(tokenizer, config, impl, max_question_tokens=max_question_tokens)

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
        if self.readout == "passage":
            rows = self.backend.passage_logits(prompts, reads, self.read_token)  # type: ignore[attr-defined]
        else:
            rows = self.backend.identifier_logits(prompts, idents)
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
