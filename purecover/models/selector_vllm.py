"""The selector's vLLM backend (`VLLMSelectorBackend`): one generated token per prompt, restricted to the
prompt's identifiers, read in the first logprobs mode the engine accepts and by label reads or the top-k read
(`purecover.models.selector`'s docstring says how each maps to a score space). vLLM is imported when the
backend is built, never at module import.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .selection import identifier_log_softmax

log = logging.getLogger("purecover.models.selector")  # the name its log lines have always had

# vLLM logprobs modes in order of preference (None: the engine's default, raw log-probabilities).
VLLM_LOGPROBS_MODES: tuple[str | None, ...] = ("processed_logits", "processed_logprobs", None)
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
