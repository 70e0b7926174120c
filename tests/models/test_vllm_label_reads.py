"""vLLM label reads (SamplingParams.logprob_token_ids) in the selector's vLLM backend, against a stand-in of the API.

The stand-in scores prompts with the real (tiny) HF selector model and answers like vLLM: a `SamplingParams` with
typed fields (an unknown keyword is a TypeError, as with vLLM's struct), the per-position dict token id ->
Logprob of `RequestOutput.outputs[0].logprobs`, the sampled token always included. Its label reads either follow
the engine's logprobs_mode (vLLM from PR #43125 on), return log-probabilities of the processed logits whatever the
mode (before it), or disagree with both (a broken engine).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types

import numpy as np
import pytest
import torch

from purecover.models.selection import identifier_log_softmax
from purecover.models.selector import HFSelectorBackend, Selector, VLLMSelectorBackend
from purecover.models.vllm_utils import (
    LABEL_READ_FIELD,
    label_read_limit,
    sampling_params_fields,
    supports_label_reads,
)

QS = slice(0, 4)
PROBE_PROMPT = list(range(1, 9))  # the backend's start-up probe prompt (selector._PROBE_PROMPT)


@dataclasses.dataclass
class Logprob:
    """Like vllm.logprobs.Logprob."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def fake_vllm(model, *, modes=("processed_logits", "processed_logprobs"), label_reads: str | None = "follow_mode",
              short: bool = False, limit: int = 128) -> types.ModuleType:
    """A `vllm` stand-in whose engine accepts the logprobs modes in `modes` (None, the default raw log-probs,
    always) and whose label reads are `label_reads`: "follow_mode" (the engine's mode values), "logprobs"
    (log-softmax of the processed logits, vLLM before PR #43125), "noisy" (neither), or None (SamplingParams has
    no logprob_token_ids: an older vLLM). `short` drops the last asked id from every label read."""
    mod = types.ModuleType("vllm")
    mod.__version__ = f"0.0-fake-{label_reads}"
    mod.llm_kwargs = []
    mod.calls = []  # (prompts, params) of each generate call
    mod.sampling_params = types.SimpleNamespace(MAX_LOGPROB_TOKEN_IDS=limit)

    @dataclasses.dataclass
    class OldSamplingParams:
        max_tokens: int | None = 16
        temperature: float = 1.0
        logprobs: int | None = None
        allowed_token_ids: list[int] | None = None

    @dataclasses.dataclass
    class LabelSamplingParams(OldSamplingParams):
        logprob_token_ids: list[int] | None = None

        def __post_init__(self) -> None:  # vLLM's checks of label reads
            if self.logprob_token_ids is not None:
                if len(self.logprob_token_ids) > limit:
                    raise ValueError(f"Requested logprob_token_ids of length {len(self.logprob_token_ids)}")
                if self.logprobs is not None and self.logprobs != len(self.logprob_token_ids):
                    raise ValueError("logprobs must equal len(logprob_token_ids)")

    class LLM:
        def __init__(self, **kwargs):
            mod.llm_kwargs.append(kwargs)
            mode = kwargs.get("logprobs_mode")
            if mode is not None and mode not in modes:
                raise NotImplementedError(f"logprobs_mode={mode!r} is not supported by this engine")
            self.mode = mode or "raw_logprobs"

        def generate(self, requests, params, use_tqdm=True):
            mod.calls.append(([r["prompt_token_ids"] for r in requests], list(params)))
            outputs = []
            for req, p in zip(requests, params):
                assert p.max_tokens == 1 and p.temperature == 0.0
                with torch.no_grad():
                    raw = model(torch.tensor([req["prompt_token_ids"]])).logits[0, -1].double()
                processed = torch.full_like(raw, -math.inf)
                processed[p.allowed_token_ids] = raw[p.allowed_token_ids]
                values = {"raw_logprobs": torch.log_softmax(raw, -1), "processed_logits": processed,
                          "processed_logprobs": torch.log_softmax(processed, -1)}[self.mode]
                sampled = int(processed.argmax())
                asked = getattr(p, LABEL_READ_FIELD, None)
                if asked:
                    if label_reads == "logprobs":
                        values = torch.log_softmax(processed, -1)
                    elif label_reads == "noisy":
                        values = values + 0.5
                    ids = list(asked[:-1] if short else asked)
                else:
                    ids = torch.topk(values, p.logprobs).indices.tolist()
                entries = {sampled: Logprob(float(values[sampled]), 1)}
                entries.update({t: Logprob(float(values[t]), r + 1) for r, t in enumerate(ids)})
                outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(logprobs=[entries])]))
            return outputs

    mod.LLM = LLM
    mod.SamplingParams = OldSamplingParams if label_reads is None else LabelSamplingParams
    return mod


@pytest.fixture(scope="module")
def plain_model(selector):
    return selector.backend.model


@pytest.fixture(scope="module")
def batch(candidates):
    return [c["question"] for c in candidates[QS]], [c["docs"] for c in candidates[QS]]


@pytest.fixture(scope="module")
def hf_results(selector, batch):
    return selector.select_batch(*batch)


@pytest.fixture(scope="module")
def consistent_config(selector, hf_results):
    """selector_config with tau3_logprob calibrated on the HF selections (so log-prob selections can match)."""
    from purecover.train.threshold import calibrate_threshold

    lp = [identifier_log_softmax(w.logits) for w in hf_results]
    tau_lp, f1 = calibrate_threshold(lp, [w.indices for w in hf_results], selector.min_select, selector.k_max)
    assert f1 == 1.0
    return {**selector.config.model_dump(), "tau3_logprob": tau_lp}


def _start(monkeypatch, selector, selector_dir, fake, **kwargs) -> VLLMSelectorBackend:
    monkeypatch.setitem(sys.modules, "vllm", fake)
    return VLLMSelectorBackend(selector_dir, selector.k1, **kwargs)


def _selection_params(fake, first_call: int):
    return [p for _, params in fake.calls[first_call:] for p in params]


def _assert_like_hf(got, want, space):
    for g, w in zip(got, want):
        assert g.score_space == space
        ref = w.logits if space == "logit" else identifier_log_softmax(w.logits)
        np.testing.assert_allclose(g.logits, ref, atol=1e-4, rtol=0)
        np.testing.assert_allclose(g.probabilities, w.probabilities, atol=1e-5, rtol=0)
        assert g.indices == w.indices


# --------------------------------------------------------------------------- detection


def test_label_read_detection_reads_the_class():
    @dataclasses.dataclass
    class WithField:
        logprobs: int | None = None
        logprob_token_ids: list[int] | None = None

    class Struct:  # how msgspec (vLLM's SamplingParams base) lists its fields
        __struct_fields__ = ("n", "logprobs", "logprob_token_ids")

        def __init__(self, *args, **kwargs): ...

    class AnyKwargs:  # accepts any keyword, names none: no evidence of label reads
        def __init__(self, **kwargs): ...

    def as_function(max_tokens: int = 16, logprob_token_ids: list[int] | None = None): ...

    assert LABEL_READ_FIELD == "logprob_token_ids"
    for params_type, has in [(WithField, True), (Struct, True), (as_function, True), (AnyKwargs, False),
                             (None, False)]:
        assert (LABEL_READ_FIELD in sampling_params_fields(params_type)) is has
        assert supports_label_reads(types.SimpleNamespace(SamplingParams=params_type)) is has
    assert "logprobs" in sampling_params_fields(Struct) and "kwargs" not in sampling_params_fields(AnyKwargs)
    assert label_read_limit(types.SimpleNamespace(sampling_params=types.SimpleNamespace(MAX_LOGPROB_TOKEN_IDS=128))) \
        == 128
    assert label_read_limit(types.SimpleNamespace(sampling_params=types.SimpleNamespace())) is None
    assert label_read_limit(types.SimpleNamespace(sampling_params=types.SimpleNamespace(MAX_LOGPROB_TOKEN_IDS=True))) \
        is None
    assert label_read_limit(types.ModuleType("vllm")) is None  # no vllm.sampling_params to import here


# --------------------------------------------------------------------------- label reads chosen


def test_label_reads_chosen_in_processed_logits_mode(selector, selector_dir, plain_model, batch, hf_results,
                                                     monkeypatch, caplog):
    """A vLLM whose label reads follow logprobs_mode: the probe agrees, every request asks for exactly its
    identifiers with max_tokens=1, and the scores are the HF logits thresholded with tau3."""
    fake = fake_vllm(plain_model)
    with caplog.at_level("INFO", logger="purecover.models.selector"):
        backend = _start(monkeypatch, selector, selector_dir, fake)
    assert (backend.logprobs_mode, backend.read_mode, backend.score_space) == \
        ("processed_logits", "label_reads", "logit")
    assert "read mode label_reads" in caplog.text
    assert backend.read_info() == {"read_mode": "label_reads", "logprobs_mode": "processed_logits",
                                   "score_space": "logit", "vllm_version": "0.0-fake-follow_mode",
                                   "reason": backend.read_reason}
    # The start-up probe: the probe prompt read with the top-k read, then with a label read.
    (top_prompts, (top,)), (label_prompts, (label,)) = fake.calls
    assert top_prompts == label_prompts == [PROBE_PROMPT]
    assert getattr(top, LABEL_READ_FIELD) is None and getattr(label, LABEL_READ_FIELD) == label.allowed_token_ids
    vsel = Selector(selector.tokenizer, selector.config, backend)
    assert vsel.threshold == selector.tau3
    got = vsel.select_batch(*batch)
    params = _selection_params(fake, 2)
    assert len(params) == len(batch[1])
    for p, docs in zip(params, batch[1]):
        ids = selector.scheme.token_ids[: len(docs)]
        assert getattr(p, LABEL_READ_FIELD) == ids == p.allowed_token_ids
        assert (p.max_tokens, p.temperature, p.logprobs) == (1, 0.0, len(ids))
    _assert_like_hf(got, hf_results, "logit")


@pytest.mark.parametrize("modes", [("processed_logprobs",), ()], ids=["processed_logprobs", "default"])
def test_label_reads_in_log_prob_modes_are_renormalised(modes, selector, selector_dir, plain_model, batch,
                                                        hf_results, consistent_config, monkeypatch):
    """Without processed_logits: label reads at once (no probe), renormalised over the identifiers, tau3_logprob."""
    fake = fake_vllm(plain_model, modes=modes)
    backend = _start(monkeypatch, selector, selector_dir, fake)
    assert backend.logprobs_mode == (modes[0] if modes else "default")
    assert (backend.read_mode, backend.score_space) == ("label_reads", "logprob")
    assert fake.calls == []  # no probe outside processed_logits mode
    vsel = Selector(selector.tokenizer, consistent_config, backend)
    assert vsel.threshold == consistent_config["tau3_logprob"]
    got = vsel.select_batch(*batch)
    assert all(getattr(p, LABEL_READ_FIELD) == p.allowed_token_ids for p in _selection_params(fake, 0))
    _assert_like_hf(got, hf_results, "logprob")


def test_label_reads_get_identifiers_outside_the_top_k(selector, selector_dir, plain_model, batch, hf_results,
                                                       consistent_config, monkeypatch):
    """In the engine's default mode (raw log-probs of the whole vocabulary) the top-k read misses identifiers;
    label reads return every one of them, exactly."""
    docs = batch[1][0]
    ids = selector.scheme.token_ids[: len(docs)]
    prompt = selector._prompt(batch[0][0], docs, "q")[0]
    with torch.no_grad():
        row = plain_model(torch.tensor([prompt])).logits[0, -1]
    top = set(torch.topk(row, len(ids)).indices.tolist())
    assert not set(ids) <= top, "the test needs an identifier outside the vocabulary's top-k"

    vsel = Selector(selector.tokenizer, consistent_config,
                    _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, modes=())))
    got = vsel.select(batch[0][0], docs)
    _assert_like_hf([got], hf_results[:1], "logprob")
    # The same engine without label reads: the top-k read loses those identifiers (an error, never a drop).
    old = Selector(selector.tokenizer, consistent_config,
                   _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, modes=(), label_reads=None)))
    assert old.backend.read_mode == "top_k"
    with pytest.raises(RuntimeError, match="no finite score for candidate"):
        old.select(batch[0][0], docs)


# --------------------------------------------------------------------------- fallbacks to the top-k read


def test_no_label_reads_keeps_todays_modes(selector, selector_dir, plain_model, batch, hf_results, monkeypatch):
    fake = fake_vllm(plain_model, label_reads=None)
    backend = _start(monkeypatch, selector, selector_dir, fake)
    assert (backend.logprobs_mode, backend.read_mode, backend.score_space) == ("processed_logits", "top_k", "logit")
    assert "no logprob_token_ids field" in backend.read_reason
    assert fake.calls == []  # nothing to probe
    got = Selector(selector.tokenizer, selector.config, backend).select_batch(*batch)
    params = _selection_params(fake, 0)
    assert all(not hasattr(p, LABEL_READ_FIELD) for p in params)
    assert [p.logprobs for p in params] == [len(d) for d in batch[1]]
    _assert_like_hf(got, hf_results, "logit")
    with pytest.raises(RuntimeError, match="label_reads=True, but vLLM 0.0-fake-None: SamplingParams has no"):
        _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, label_reads=None), label_reads=True)


def test_label_reads_returning_log_probs_keep_the_top_k_read(selector, selector_dir, plain_model, batch, hf_results,
                                                             consistent_config, monkeypatch):
    """A vLLM before PR #43125 (label reads are log-probs even in processed_logits mode): the exact top-k read
    of the logits is kept; label_reads=True uses label reads in the log-prob space instead."""
    fake = fake_vllm(plain_model, label_reads="logprobs")
    backend = _start(monkeypatch, selector, selector_dir, fake)
    assert (backend.read_mode, backend.score_space) == ("top_k", "logit")
    assert "does not return the logits in processed_logits mode (log-probabilities over the identifiers)" in \
        backend.read_reason
    got = Selector(selector.tokenizer, selector.config, backend).select_batch(*batch)
    assert all(getattr(p, LABEL_READ_FIELD) is None for p in _selection_params(fake, 2))
    _assert_like_hf(got, hf_results, "logit")

    forced = _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, label_reads="logprobs"),
                    label_reads=True)
    assert (forced.read_mode, forced.score_space) == ("label_reads", "logprob")
    _assert_like_hf(Selector(selector.tokenizer, consistent_config, forced).select_batch(*batch), hf_results,
                    "logprob")


def test_label_reads_off_limit_and_broken_engine(selector, selector_dir, plain_model, monkeypatch):
    fake = fake_vllm(plain_model)
    off = _start(monkeypatch, selector, selector_dir, fake, label_reads=False)
    assert (off.read_mode, off.score_space, fake.calls) == ("top_k", "logit", [])
    assert "label_reads=False" in off.read_reason
    small = _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, limit=4))
    assert small.read_mode == "top_k" and "k1=6 is above the 4 token ids" in small.read_reason
    noisy = _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, label_reads="noisy"))
    assert noisy.read_mode == "top_k" and "neither the logits nor their log-softmax" in noisy.read_reason
    with pytest.raises(RuntimeError, match="label_reads=True, but the label reads of vLLM .* are unusable"):
        _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, label_reads="noisy"), label_reads=True)
    with pytest.raises(TypeError, match="label_reads must be None, True or False"):
        _start(monkeypatch, selector, selector_dir, fake, label_reads="yes")


# --------------------------------------------------------------------------- short answers


def test_short_label_read_is_an_error(selector, selector_dir, plain_model, batch, consistent_config, monkeypatch):
    short = _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, modes=("processed_logprobs",),
                                                                   short=True))
    assert short.read_mode == "label_reads"
    vsel = Selector(selector.tokenizer, consistent_config, short)
    n = len(batch[1][0])
    with pytest.raises(RuntimeError, match=rf"label read \(logprob_token_ids\) for prompt 0 returned a finite value "
                                           rf"for {n - 1} of the {n} identifier token ids asked for \(missing: "
                                           rf"candidates \[{n - 1}\], token ids \[{selector.scheme.token_ids[n - 1]}\]"):
        vsel.select(batch[0][0], batch[1][0])
    # In processed_logits mode the short answer already fails the start-up probe: the top-k read is used.
    probed = _start(monkeypatch, selector, selector_dir, fake_vllm(plain_model, short=True))
    assert probed.read_mode == "top_k" and "the probe failed: RuntimeError" in probed.read_reason


# --------------------------------------------------------------------------- the select stage records the read


def test_select_summary_records_the_read(selector, selector_dir, selector_run, plain_model, monkeypatch, tmp_path):
    from purecover.data.data_stage import read_candidate_records
    from purecover.select.select_stage import select_into, selector_config, summarize_selections

    records = read_candidate_records(selector_run.run_path / "candidates.jsonl", max_docs=selector.k1)[:3]
    fake = fake_vllm(plain_model)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    out = tmp_path / "selections.jsonl"
    progress = select_into(out, records, lambda: Selector.from_pretrained(selector_dir, backend="vllm"),
                           show_progress=False)
    assert progress.backend_read is not None and progress.backend_read["read_mode"] == "label_reads"
    summary = summarize_selections(out, len(records), progress, "vllm", selector_dir, selector_config(selector_dir))
    written = summary.to_json_dict()
    assert written["vllm_read"] == {"read_mode": "label_reads", "logprobs_mode": "processed_logits",
                                    "score_space": "logit", "vllm_version": "0.0-fake-follow_mode",
                                    "reason": progress.backend_read["reason"]}
    # The HF backend has no such choice: nothing recorded.
    hf = Selector(selector.tokenizer, selector.config, HFSelectorBackend(plain_model))  # closed by select_into
    hf_progress = select_into(tmp_path / "hf.jsonl", records, lambda: hf, show_progress=False)
    assert hf_progress.backend_read is None
    hf_summary = summarize_selections(tmp_path / "hf.jsonl", len(records), hf_progress, "hf", selector_dir,
                                      selector_config(selector_dir))
    assert "vllm_read" not in hf_summary.to_json_dict()
