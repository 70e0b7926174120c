"""Selector: one-pass identifier logits (HF), the threshold rule, batching, errors, the vLLM adapter."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest
import torch

from purecover.models.selector import (
    HFSelectorBackend,
    SelectionResult,
    Selector,
    VLLMSelectorBackend,
    hf_identifier_logits,
    read_selector_config,
)
from purecover.models.selector_prompt import build_selector_prompt


@pytest.fixture(scope="module")
def plain_model(selector):
    """The selector's model, called here without the backend (no padding, full logits)."""
    return selector.backend.model


def _manual_logits(model, selector, question, docs):
    prompt = build_selector_prompt(selector.tokenizer, question, docs, selector.scheme, selector.max_passage_tokens)
    with torch.no_grad():
        last = model(torch.tensor([prompt.input_ids])).logits[0, -1]
    return last[selector.scheme.token_ids[: len(docs)]].tolist()


def _rule(logits, tau, k_max, min_select):
    order = sorted(range(len(logits)), key=lambda k: (-logits[k], k))
    kept = [k for k in order if logits[k] > tau][: k_max if k_max is not None else None]
    return kept if len(kept) >= min_select else order[:min_select]


def test_config_is_read(selector, selector_dir):
    config = read_selector_config(selector_dir)
    assert selector.k1 == config.k1 == 6 and selector.config == config
    assert selector.tau3 == pytest.approx(config.tau3)
    assert selector.scheme.token_ids and len(selector.scheme.token_ids) == 6


def test_select_equals_manual_forward_and_threshold_rule(selector, plain_model, candidates):
    rec = candidates[0]
    result = selector.select(rec["question"], rec["docs"])
    manual = _manual_logits(plain_model, selector, rec["question"], rec["docs"])
    assert isinstance(result, SelectionResult)
    assert len(result.logits) == len(rec["docs"]) == len(result.probabilities)
    np.testing.assert_allclose(result.logits, manual, atol=1e-5, rtol=0)
    assert result.indices == _rule(result.logits, selector.tau3, selector.k_max, selector.min_select)
    # Explicit thresholds exercise the rule: ordered by logit, > tau, at most k_max, at least min_select.
    s = result.logits
    mid = float(np.median(s))
    r = selector.select(rec["question"], rec["docs"], tau=mid, k_max=10, min_select=0)
    assert r.indices == sorted([k for k in range(len(s)) if s[k] > mid], key=lambda k: -s[k])
    assert all(s[a] >= s[b] for a, b in zip(r.indices, r.indices[1:]))
    low = min(s) - 1.0
    assert len(selector.select(rec["question"], rec["docs"], tau=low, k_max=2).indices) == 2
    assert selector.select(rec["question"], rec["docs"], tau=math.inf, min_select=0).indices == []
    assert selector.select(rec["question"], rec["docs"], tau=math.inf, min_select=2).indices == \
        sorted(range(len(s)), key=lambda k: -s[k])[:2]


def test_probabilities_are_softmax(selector, candidates):
    r = selector.select(candidates[1]["question"], candidates[1]["docs"])
    assert sum(r.probabilities) == pytest.approx(1.0, abs=1e-9)
    z = np.exp(np.array(r.logits) - max(r.logits))
    np.testing.assert_allclose(r.probabilities, z / z.sum(), rtol=1e-9)


def test_batch_equals_single_calls(selector, candidates):
    # Different candidate counts and prompt lengths, so the batch is left-padded.
    qs = [c["question"] for c in candidates[:5]]
    docs = [c["docs"][: 6 - (i % 3)] for i, c in enumerate(candidates[:5])]
    batch = selector.select_batch(qs, docs, tau=0.0)
    for q, d, b in zip(qs, docs, batch):
        single = selector.select(q, d, tau=0.0)
        assert len(b.logits) == len(d)
        np.testing.assert_allclose(b.logits, single.logits, atol=1e-4, rtol=0)
        assert b.indices == single.indices


def test_plain_string_docs_and_fewer_than_k1(selector):
    r = selector.select("Who built the bridge?", ["The bridge was built by Ada.", "Rivers flow."])
    assert len(r.logits) == 2 and set(r.indices) <= {0, 1}


def test_candidate_records_select_like_their_json(selector, candidates):
    from purecover.records import CandidateRecord

    rec = candidates[0]
    typed = CandidateRecord.model_validate(rec)
    assert selector.select(typed.question, typed.docs).logits == selector.select(rec["question"], rec["docs"]).logits
    with pytest.raises(TypeError, match="candidate 1: 'title' must be a str or None"):
        selector.select(rec["question"], [rec["docs"][0], {"title": 3, "text": "x"}])


def test_errors(selector, candidates):
    rec = candidates[0]
    too_many = rec["docs"] + [{"title": "x", "text": "y"}]
    with pytest.raises(ValueError, match="7 candidates.*k1=6"):
        selector.select(rec["question"], too_many)
    with pytest.raises(ValueError, match="no candidate documents"):
        selector.select(rec["question"], [])
    with pytest.raises(ValueError, match="2 questions but 1"):
        selector.select_batch(["a", "b"], [rec["docs"]])
    with pytest.raises(TypeError, match="candidate 0"):
        selector.select(rec["question"], [{"title": "no text"}])


def test_unknown_backend_and_missing_vllm(selector_dir, monkeypatch):
    with pytest.raises(ValueError, match="unknown selector backend"):
        Selector.from_pretrained(selector_dir, backend="onnx")
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[vllm\]'"):
        VLLMSelectorBackend(selector_dir, 6)


def test_prompt_template_mismatch_is_an_error(selector, selector_dir):
    config = read_selector_config(selector_dir).model_dump()
    config["prompt_template"] = {**config["prompt_template"], "hash": "0000"}
    with pytest.raises(ValueError, match="prompt template"):
        Selector(selector.tokenizer, config, selector.backend)


def test_a_recorded_wording_is_used_and_an_edited_one_refused(selector, selector_dir, candidates):
    from purecover.models.selector_prompt import SelectorWording, prompt_template

    mine = SelectorWording(selector.wording.system, "Name every passage the answer needs, one letter per line.")
    config = read_selector_config(selector_dir).model_dump()
    config["prompt_template"] = prompt_template(mine)
    custom = Selector(selector.tokenizer, config, selector.backend)
    assert custom.wording == mine and selector.wording == SelectorWording.default()
    ids, _, _ = custom._prompt(candidates[0]["question"], candidates[0]["docs"], "question 0")
    assert "Name every passage the answer needs" in selector.tokenizer.decode(ids)
    config["prompt_template"] = {**config["prompt_template"], "instructions": "Edited after export."}
    with pytest.raises(ValueError, match="do not hash to the recorded hash"):
        Selector(selector.tokenizer, config, selector.backend)


def test_student_prompt_file_is_trained_exported_and_used(tmp_path_factory, sample_dir):
    """student.prompt_file shapes the training prompts, the export records it and the selector renders it."""
    from purecover.models.selector_prompt import prompt_template
    from purecover.train.export_stage import run_export_stage
    from tests.models.conftest import trained_run

    path = tmp_path_factory.mktemp("wording") / "selector.txt"
    path.write_text("[[instructions]]\nName every passage the answer needs, one letter per line.\n", encoding="utf-8")
    recipe = trained_run(tmp_path_factory, sample_dir, lora=True, extra=(f"student.prompt_file={path}",))
    run_export_stage(recipe)
    recorded = read_selector_config(recipe.run_path / "selector").prompt_template
    assert recorded["instructions"].startswith("Name every passage") and recorded["hash"] != prompt_template()["hash"]
    loaded = Selector.from_pretrained(recipe.run_path / "selector", device="cpu", dtype="float32")
    assert loaded.wording.instructions == recorded["instructions"]


def test_hf_logits_match_train_helper(selector, candidates):
    """The backend's forward equals train/train_stage.py's first_position_logits (used for τ3 calibration)."""
    from purecover.train.train_stage import first_position_logits

    prompts = [build_selector_prompt(selector.tokenizer, c["question"], c["docs"], selector.scheme,
                                     selector.max_passage_tokens).input_ids for c in candidates[:3]]
    n = [len(c["docs"]) for c in candidates[:3]]
    model = selector.backend.model
    ours = hf_identifier_logits(model, prompts, [selector.scheme.token_ids[:k] for k in n], batch_size=2)
    theirs = first_position_logits(model, prompts, selector.scheme.token_ids, n, batch_size=2)
    np.testing.assert_allclose(np.concatenate(ours), np.concatenate(theirs), atol=1e-6, rtol=0)


# --------------------------------------------------------------------------- vLLM adapter with a fake vllm


class _Logprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob


def _fake_vllm(model, *, drop_last: bool = False, engine: str = "logits", boost: float = 0.0) -> types.ModuleType:
    """A `vllm` stand-in: LLM/SamplingParams record their kwargs; generate scores with the real HF model and
    returns, like vLLM, the top-`logprobs` entries, best first, of what the engine's logprobs mode reports.

    engine "logits": accepts logprobs_mode="processed_logits" (masked logits). "logprobs": rejects it with
    NotImplementedError, accepts "processed_logprobs" (log-softmax of the masked logits). "legacy": no
    logprobs_mode at all (TypeError), returns raw log-probs over the whole vocabulary; `boost` is added to the
    allowed tokens' logits first (a selector that predicts identifiers, so they reach the top-k).
    """
    mod = types.ModuleType("vllm")
    mod.__version__ = f"0.0-fake-{engine}"
    mod.llm_kwargs = []
    mod.params = []
    mod.requests = []

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            mod.params.append(kwargs)

    class LLM:
        def __init__(self, **kwargs):
            mod.llm_kwargs.append(kwargs)
            mode = kwargs.get("logprobs_mode")
            if engine == "legacy" and mode is not None:
                raise TypeError("EngineArgs.__init__() got an unexpected keyword argument 'logprobs_mode'")
            if engine == "logprobs" and mode == "processed_logits":
                raise NotImplementedError("processed_logits is not supported by this engine")
            if engine == "none":
                raise ValueError(f"cannot start with logprobs_mode={mode!r}")
            self.mode = mode

        def generate(self, requests, params, use_tqdm=True):
            mod.requests.extend(requests)
            outputs = []
            for req, p in zip(requests, params):
                allowed = p.kwargs["allowed_token_ids"]
                with torch.no_grad():
                    row = model(torch.tensor([req["prompt_token_ids"]])).logits[0, -1].double()
                if self.mode is None:  # the default: raw log-probs of the whole vocabulary
                    row[allowed] += boost
                    scores = torch.log_softmax(row, -1)
                else:
                    scores = torch.full_like(row, -math.inf)
                    scores[allowed] = row[allowed]
                    if self.mode == "processed_logprobs":
                        scores = torch.log_softmax(scores, -1)
                top = torch.topk(scores, p.kwargs["logprobs"])
                entries = {int(t): _Logprob(float(v)) for t, v in zip(top.indices, top.values)}
                if drop_last:
                    entries.pop(allowed[-1], None)
                outputs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(logprobs=[entries])]))
            return outputs

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod


def test_vllm_backend_with_fake_engine(selector, selector_dir, plain_model, candidates, monkeypatch):
    fake = _fake_vllm(plain_model)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    vsel = Selector.from_pretrained(selector_dir, backend="vllm", tensor_parallel_size=2)
    assert isinstance(vsel.backend, VLLMSelectorBackend)
    (kwargs,) = fake.llm_kwargs
    assert kwargs["model"] == str(selector_dir)
    assert kwargs["max_logprobs"] == 6
    assert kwargs["logprobs_mode"] == "processed_logits"
    assert kwargs["tensor_parallel_size"] == 2

    qs = [c["question"] for c in candidates[:3]]
    docs = [candidates[0]["docs"], candidates[1]["docs"][:4], candidates[2]["docs"][:1]]
    got = vsel.select_batch(qs, docs)
    want = selector.select_batch(qs, docs)
    assert [p["logprobs"] for p in fake.params] == [6, 4, 1]
    for p, d in zip(fake.params, docs):
        assert p["allowed_token_ids"] == selector.scheme.token_ids[: len(d)]
        assert p["max_tokens"] == 1 and p["temperature"] == 0
    for g, w in zip(got, want):  # vLLM's dict is ordered by rank; results come back in candidate order
        np.testing.assert_allclose(g.logits, w.logits, atol=1e-4, rtol=0)
        assert g.indices == w.indices
        assert sum(g.probabilities) == pytest.approx(1.0)
    vsel.close()


def test_vllm_missing_identifier_is_an_error(selector, selector_dir, plain_model, candidates, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(plain_model, drop_last=True))
    vsel = Selector(selector.tokenizer, selector.config, VLLMSelectorBackend(selector_dir, selector.k1))
    with pytest.raises(RuntimeError, match="no finite score for candidate 5"):
        vsel.select(candidates[0]["question"], candidates[0]["docs"])


def test_hf_backend_interface(selector):
    backend = selector.backend
    assert isinstance(backend, HFSelectorBackend)
    assert backend.identifier_logits([], []) == []
    with pytest.raises(ValueError, match="2 prompts but 1"):
        backend.identifier_logits([[1], [2]], [[3]])


# --------------------------------------------------------------------------- vLLM logprobs modes and τ3 spaces


QS = slice(0, 4)


def _batch(candidates):
    return [c["question"] for c in candidates[QS]], [c["docs"] for c in candidates[QS]]


def test_train_and_export_record_both_thresholds(selector_run, selector_dir, selector, candidates):
    """τ3 on logits and on the identifier log-softmax: in the checkpoint meta, the train summary, the export."""
    import json

    from purecover.models.selection import identifier_log_softmax
    from purecover.train.threshold import calibrate_threshold, calibrate_thresholds

    run = selector_run.run_path
    meta = json.loads((run / "checkpoints" / "final" / "purecover_student.json").read_text())
    summary = json.loads((run / "train.run.json").read_text())["summary"]
    config = read_selector_config(selector_dir)
    for tau3_logprob in (meta["tau3_logprob"], config.tau3_logprob):
        assert isinstance(tau3_logprob, float) and tau3_logprob < 0  # a log-probability
    assert config.tau3_logprob == pytest.approx(meta["tau3_logprob"])
    assert summary["tau3_logprob"] == pytest.approx(meta["tau3_logprob"], abs=1e-6)
    assert 0.0 <= summary["calib_subset_f1_logprob"] <= 1.0
    # calibrate_thresholds = calibrate_threshold on the logits and on their identifier log-softmax.
    scores = [r.logits for r in selector.select_batch(*_batch(candidates))]
    gold = [[0, 2], [1], [0], [3, 1]]
    both = calibrate_thresholds(scores, gold, 1, 3)
    assert (both["tau3"], both["calib_subset_f1"]) == calibrate_threshold(scores, gold, 1, 3)
    lp = [identifier_log_softmax(s) for s in scores]
    assert (both["tau3_logprob"], both["calib_subset_f1_logprob"]) == calibrate_threshold(lp, gold, 1, 3)


def _consistent_config(selector, candidates):
    """selector_config with tau3_logprob calibrated on the HF selections themselves (so F1 = 1 is reachable)."""
    from purecover.models.selection import identifier_log_softmax
    from purecover.train.threshold import calibrate_threshold

    want = selector.select_batch(*_batch(candidates))
    lp = [identifier_log_softmax(w.logits) for w in want]
    tau_lp, f1 = calibrate_threshold(lp, [w.indices for w in want], selector.min_select, selector.k_max)
    assert f1 == 1.0, "the HF selections must be reproducible by one log-prob threshold on these questions"
    return {**selector.config.model_dump(), "tau3_logprob": tau_lp}, want


@pytest.mark.parametrize(("engine", "mode", "space"), [
    ("logits", "processed_logits", "logit"),
    ("logprobs", "processed_logprobs", "logprob"),
    ("legacy", "default", "logprob"),
])
def test_vllm_modes_select_like_hf(engine, mode, space, selector, selector_dir, plain_model, candidates,
                                   monkeypatch, caplog):
    from purecover.models.selection import identifier_log_softmax

    config, want = _consistent_config(selector, candidates)
    fake = _fake_vllm(plain_model, engine=engine, boost=60.0)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    with caplog.at_level("INFO", logger="purecover.models.selector"):
        backend = VLLMSelectorBackend(selector_dir, selector.k1)
    assert (backend.logprobs_mode, backend.score_space) == (mode, space)
    tried = [k.get("logprobs_mode") for k in fake.llm_kwargs]
    assert tried == ["processed_logits", "processed_logprobs", None][: len(tried)] and len(tried) == \
        {"logits": 1, "logprobs": 2, "legacy": 3}[engine]
    if engine != "logits":  # each rejected mode is logged
        assert "processed_logits not usable" in caplog.text
    vsel = Selector(selector.tokenizer, config, backend)
    assert vsel.threshold == (config["tau3"] if space == "logit" else config["tau3_logprob"])
    got = vsel.select_batch(*_batch(candidates))
    for g, w in zip(got, want):
        assert g.score_space == space and g.to_record("q")["score_space"] == space
        ref = w.logits if space == "logit" else identifier_log_softmax(w.logits)
        np.testing.assert_allclose(g.logits, ref, atol=1e-4, rtol=0)
        np.testing.assert_allclose(g.probabilities, w.probabilities, atol=1e-5, rtol=0)
        assert g.indices == w.indices  # the same selections as the HF backend


def test_logprob_backend_needs_tau3_logprob(selector, selector_dir, plain_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(plain_model, engine="logprobs"))
    backend = VLLMSelectorBackend(selector_dir, selector.k1)
    old = {k: v for k, v in selector.config.model_dump().items() if k != "tau3_logprob"}  # an export from before tau3_logprob
    with pytest.raises(ValueError, match="tau3_logprob.*Retrain"):
        Selector(selector.tokenizer, old, backend)
    # A logit backend does not need it.
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(plain_model, engine="logits"))
    assert Selector(selector.tokenizer, old, VLLMSelectorBackend(selector_dir, selector.k1)).threshold == \
        pytest.approx(selector.tau3)


def test_legacy_engine_missing_identifier_and_no_mode_errors(selector, selector_dir, plain_model, candidates,
                                                             monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(plain_model, engine="legacy", drop_last=True))
    vsel = Selector(selector.tokenizer, selector.config, VLLMSelectorBackend(selector_dir, selector.k1))
    with pytest.raises(RuntimeError, match=r"no finite score for candidate \d.*logprobs_mode 'default'"):
        vsel.select(candidates[0]["question"], candidates[0]["docs"])
    monkeypatch.setitem(sys.modules, "vllm", _fake_vllm(plain_model, engine="none"))
    with pytest.raises(RuntimeError, match=r"vLLM 0.0-fake-none could not start.*processed_logits: ValueError.*"
                                           r"processed_logprobs: ValueError.*default: ValueError"):
        VLLMSelectorBackend(selector_dir, selector.k1)


def test_supported_logprobs_modes_detection():
    import dataclasses
    import enum
    from typing import Literal

    from purecover.models.vllm_utils import supported_logprobs_modes

    class Mode(enum.Enum):
        RAW = "raw_logprobs"
        PL = "processed_logprobs"

    as_enum = types.SimpleNamespace(config=types.SimpleNamespace(LogprobsMode=Mode))
    assert supported_logprobs_modes(as_enum) == ("raw_logprobs", "processed_logprobs")
    lit = Literal["raw_logits", "processed_logits"]
    assert supported_logprobs_modes(types.SimpleNamespace(config=types.SimpleNamespace(LogprobsMode=lit))) == \
        ("raw_logits", "processed_logits")

    @dataclasses.dataclass
    class OldArgs:
        model: str = ""

    @dataclasses.dataclass
    class NewArgs:
        logprobs_mode: str = "raw_logprobs"

    assert supported_logprobs_modes(types.SimpleNamespace(config=types.SimpleNamespace(), EngineArgs=OldArgs)) == ()
    assert supported_logprobs_modes(types.SimpleNamespace(config=types.SimpleNamespace(), EngineArgs=NewArgs)) is None

    def llm(model: str, max_logprobs: int = 20) -> None: ...

    assert supported_logprobs_modes(types.SimpleNamespace(config=types.SimpleNamespace(), LLM=llm)) == ()


def test_engine_supporting_only_logprobs_skips_processed_logits(selector, selector_dir, plain_model, monkeypatch):
    """A detected mode list without processed_logits is not even tried."""
    fake = _fake_vllm(plain_model, engine="logprobs")
    fake.config = types.SimpleNamespace(LogprobsMode=__import__("typing").Literal["raw_logprobs", "processed_logprobs"])
    monkeypatch.setitem(sys.modules, "vllm", fake)
    backend = VLLMSelectorBackend(selector_dir, selector.k1)
    assert [k.get("logprobs_mode") for k in fake.llm_kwargs] == ["processed_logprobs"]
    assert backend.score_space == "logprob"


# --------------------------------------------------------------------------- selector_config.json values


def _config_dir(tmp_path, selector_dir, **changes):
    """A copy of the selector's selector_config.json with `changes` (None: the key removed)."""
    import json

    config = json.loads((selector_dir / "selector_config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    folder = tmp_path / "selector"
    folder.mkdir()
    (folder / "selector_config.json").write_text(json.dumps(config))  # NaN / Infinity as Python's json writes them
    return folder


@pytest.mark.parametrize(("changes", "message"), [
    ({"tau3": math.nan}, "field tau3: must be a finite number (got nan)"),
    ({"tau3": math.inf}, "field tau3: must be a finite number (got inf)"),
    ({"tau3_logprob": -math.inf}, "field tau3_logprob: must be a finite number (got -inf)"),
    ({"k_max": -1}, "field k_max: must be >= 1 (got -1)"),
    ({"max_passage_tokens": 0}, "field max_passage_tokens: must be >= 1 (got 0)"),
    ({"k_max": "x"}, "field k_max: must be an integer (got 'x')"),
    ({"identifiers": 7}, "field identifiers: must be a JSON object (got an integer)"),
    ({"min_select": -1}, "field min_select: must be >= 0 (got -1)"),
    ({"k1": None}, "field k1: missing"),
])
def test_bad_selector_config_values_name_the_file_and_field(tmp_path, selector_dir, changes, message):
    folder = _config_dir(tmp_path, selector_dir, **changes)
    with pytest.raises(ValueError) as exc:
        read_selector_config(folder)
    text = str(exc.value)
    assert text.startswith(f"{folder / 'selector_config.json'}: {message}") and "re-export" in text, text


def test_a_bad_config_passed_to_the_selector_is_refused(selector):
    with pytest.raises(ValueError, match=r"^selector config: field k_max: must be >= 1 \(got 0\)"):
        Selector(selector.tokenizer, {**selector.config.model_dump(), "k_max": 0}, selector.backend)


def test_an_export_without_the_optional_keys_still_reads(tmp_path, selector_dir, selector):
    folder = _config_dir(tmp_path, selector_dir, tau3_logprob=None, max_passage_tokens=None, purecover_version=None,
                         extra_from_a_newer_version={"x": 1})
    config = read_selector_config(folder)
    assert (config.tau3_logprob, config.max_passage_tokens, config.adapter) == (None, 192, False)
    assert config.model_extra == {"extra_from_a_newer_version": {"x": 1}}
    assert Selector(selector.tokenizer, config, selector.backend).max_passage_tokens == 192


def test_a_long_question_is_cut_to_max_question_tokens(selector, candidates):
    rec = candidates[0]
    small = Selector(selector.tokenizer, selector.config, selector.backend, max_question_tokens=16)
    short_ids, _, _ = small._prompt("Who?", rec["docs"], "q")
    long_question = "Which river flows through the town where the bridge was built? " * 2000
    long_ids, _, _ = small._prompt(long_question, rec["docs"], "q")
    # The question is in the prompt twice: at most 2 x 16 tokens more than a one-word question (+ joins).
    assert len(short_ids) < len(long_ids) <= len(short_ids) + 2 * 16 + 4
    assert small.questions_truncated == 1
    result = small.select(long_question, rec["docs"])
    assert len(result.logits) == len(rec["docs"]) and small.questions_truncated == 2
    # With the default budget (256) an ordinary question is rendered exactly as in training.
    assert selector.max_question_tokens == 256
    before = selector.questions_truncated
    assert selector._prompt(rec["question"], rec["docs"], "q")[0] == build_selector_prompt(
        selector.tokenizer, rec["question"], rec["docs"], selector.scheme, selector.max_passage_tokens).input_ids
    assert selector.questions_truncated == before
    with pytest.raises(ValueError, match="max_question_tokens must be an integer >= 1"):
        Selector(selector.tokenizer, selector.config, selector.backend, max_question_tokens=0)
