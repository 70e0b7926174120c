"""The passage readout's scoring head (student.passage_score: head): its scores against a plain computation on the
final hidden states, its start at the token readout, its file checks, and train → export → Selector → serve on a
real tiny trained student."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from purecover.models.identifiers import IdentifierScheme
from purecover.models.passage_scores import hf_passage_logits
from purecover.models.score_head import SCORE_HEAD_FILE, HeadReadout, ScoreHead, output_projection
from purecover.models.selector_prompt import build_selector_prompt, read_token_id
from tests.models.conftest import tiny_model_dir, trained_run

DOCS = [{"title": "Ada Brill", "text": "Ada Brill was born in Tollbridge."},
        {"title": "Tollbridge", "text": "Tollbridge lies on the river Wend."},
        {"title": "", "text": "An untitled passage."},
        {"title": "Wend", "text": "The Wend is a river."}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, sample_dir):
    from purecover.models.loading import load_causal_lm

    return load_causal_lm(str(tiny_model_dir(tmp_path_factory, sample_dir)), dtype="float32", device="cpu")


def _prompts(tokenizer):
    scheme = IdentifierScheme("letters").check(tokenizer, len(DOCS))
    return [build_selector_prompt(tokenizer, q, DOCS[:n], scheme, 40, readout="passage")
            for q, n in (("Where was Ada Brill born?", 4), ("Which river?", 2),
                         ("A much longer question about the river Wend and the towns on it?", 3))]


def test_head_scores_equal_the_head_on_the_final_hidden_states(tiny, tokenizer):
    """Batched, left-padded, hidden states kept only at the read positions: w · h_k + b with h_k the last hidden
    state of each prompt run alone."""
    torch.manual_seed(0)
    head = ScoreHead(tiny.config.hidden_size)
    prompts = _prompts(tokenizer)
    got = hf_passage_logits(tiny, [p.input_ids for p in prompts], [p.read_positions for p in prompts],
                            read_token_id(tokenizer), batch_size=2, pad_id=tokenizer.pad_token_id or 0,
                            score_head=HeadReadout.of(tiny, head))
    with torch.no_grad():
        for p, row in zip(prompts, got):
            hidden = tiny(input_ids=torch.tensor([p.input_ids]), output_hidden_states=True).hidden_states[-1][0]
            want = hidden[p.read_positions] @ head.proj.weight[0] + head.proj.bias[0]
            assert row == pytest.approx(want.tolist(), abs=1e-5)
    assert len({round(x, 4) for row in got for x in row}) > 3


def test_a_head_from_the_token_starts_as_the_token_readout(tiny, tokenizer):
    prompts = _prompts(tokenizer)
    tid = read_token_id(tokenizer)
    ids, reads = [p.input_ids for p in prompts], [p.read_positions for p in prompts]
    token = hf_passage_logits(tiny, ids, reads, tid, batch_size=3)
    head = ScoreHead.from_token(tiny, tid)
    headed = hf_passage_logits(tiny, ids, reads, tid, batch_size=3, score_head=HeadReadout.of(tiny, head))
    for a, b in zip(token, headed):
        assert a == pytest.approx(b, abs=1e-5)
    assert torch.equal(head.proj.weight[0], output_projection(tiny).weight[tid])
    with pytest.raises(ValueError, match="outside the output projection"):
        ScoreHead.from_token(tiny, 10**9)


def test_save_and_load_round_trip_and_refusals(tmp_path):
    torch.manual_seed(1)
    head = ScoreHead(8)
    path = head.save(tmp_path)
    assert path.name == SCORE_HEAD_FILE and oct(path.stat().st_mode & 0o777) != "0o600"
    back = ScoreHead.load(tmp_path, hidden_size=8)
    assert torch.equal(back.proj.weight, head.proj.weight) and torch.equal(back.proj.bias, head.proj.bias)
    with pytest.raises(ValueError, match="hidden size 8, but the model's is 16"):
        ScoreHead.load(tmp_path, hidden_size=16)
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(FileNotFoundError, match="no scoring head"):
        ScoreHead.load(bad)
    cases = {
        "tensors": ({"weight": torch.zeros(1, 8), "bias": torch.zeros(1), "extra": torch.zeros(1)}, "exactly"),
        "shape": ({"weight": torch.zeros(2, 8), "bias": torch.zeros(1)}, r"expected \(1, H\)"),
        "nan": ({"weight": torch.full((1, 8), float("nan")), "bias": torch.zeros(1)}, "non-finite"),
        "inf": ({"weight": torch.zeros(1, 8), "bias": torch.full((1,), float("inf"))}, "non-finite"),
    }
    for name, (tensors, message) in cases.items():
        d = tmp_path / name
        d.mkdir()
        save_file(tensors, str(d / SCORE_HEAD_FILE))
        with pytest.raises(ValueError, match=message) as info:
            ScoreHead.load(d)
        assert str(d / SCORE_HEAD_FILE) in str(info.value)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / SCORE_HEAD_FILE).write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        ScoreHead.load(junk)
    (junk / SCORE_HEAD_FILE).write_bytes(b"\0" * (2 << 20))
    with pytest.raises(ValueError, match="more than a scoring head's"):
        ScoreHead.load(junk)


HEAD = ("student.readout=passage", "student.lm_weight=0.0", "student.bce_weight=1.0", "student.passage_score=head",
        "student.training.save_steps=2")


@pytest.fixture(scope="module")
def head_selector_dir(tmp_path_factory, sample_dir):
    from purecover.train.export_stage import run_export_stage

    recipe = trained_run(tmp_path_factory, sample_dir, lora=True, extra=HEAD)
    run_export_stage(recipe)
    return recipe.run_path / "selector"


def test_training_saves_the_head_in_every_checkpoint_and_export_copies_it(head_selector_dir):
    from purecover.train.train_stage import checkpoint_problem

    run = head_selector_dir.parent
    checkpoints = sorted((run / "checkpoints").glob("checkpoint-*"))
    assert checkpoints and all((c / SCORE_HEAD_FILE).is_file() for c in checkpoints)
    final = run / "checkpoints" / "final"
    meta = json.loads((final / "purecover_student.json").read_text())
    assert meta["passage_score"] == "head"
    config = json.loads((head_selector_dir / "selector_config.json").read_text())
    assert config["readout"] == "passage" and config["passage_score"] == "head"
    exported, trained = ScoreHead.load(head_selector_dir), ScoreHead.load(final)
    assert torch.equal(exported.proj.weight, trained.proj.weight)
    # trained: no longer the token's row it started from
    from purecover.models.loading import load_causal_lm, load_tokenizer

    model = load_causal_lm(str(head_selector_dir), dtype="float32", device="cpu")
    tid = read_token_id(load_tokenizer(str(head_selector_dir)))
    start = output_projection(model).weight[tid]
    assert not torch.allclose(exported.proj.weight[0], start, atol=1e-7)
    # the adapter's weights file does not hold the head; a checkpoint without the head file is not resumed from
    from safetensors import safe_open

    with safe_open(str(final / "adapter_model.safetensors"), framework="pt") as f:
        assert not any("score_head" in k for k in f.keys())  # noqa: SIM118 (a safe_open handle)
    assert checkpoint_problem(checkpoints[-1], needs_head=True) is None
    (checkpoints[-1] / SCORE_HEAD_FILE).rename(checkpoints[-1] / "moved")
    try:
        assert "score_head.safetensors" in checkpoint_problem(checkpoints[-1], needs_head=True)
        assert checkpoint_problem(checkpoints[-1]) is None
    finally:
        (checkpoints[-1] / "moved").rename(checkpoints[-1] / SCORE_HEAD_FILE)


def test_selector_serve_and_byo_select_with_the_head(head_selector_dir):
    """Selector's scores are the head on the exported model's hidden states at the markers; serve over loopback
    and `purecover select` give the same sets; a backend that does not load the head is refused."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from purecover.models.selector import Selector, read_selector_config
    from purecover.serve.app import create_app
    from purecover.serve.client import RemoteSelector
    from purecover.serve.server import serve_in_thread
    from purecover.utils.io import read_jsonl

    selector = Selector.from_pretrained(head_selector_dir, device="cpu", dtype="float32")
    head = ScoreHead.load(head_selector_dir)
    cands = [rec for _, rec in read_jsonl(head_selector_dir.parent / "candidates.jsonl")][:4]
    local = [selector.select(c["question"], c["docs"]) for c in cands]
    model = selector.backend.model
    for c, r in zip(cands, local):
        ids, _, reads = selector._prompt(c["question"], c["docs"], "q")
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
            want = hidden[reads] @ head.proj.weight[0] + head.proj.bias[0]
        assert r.logits == pytest.approx(want.tolist(), abs=1e-5)
    with serve_in_thread(create_app(selector, model_name="tiny-head", api_key="k")) as url, \
            RemoteSelector(url, api_key="k") as remote:
        served = [remote.select(c["question"], c["docs"]) for c in cands]
    assert [r.indices for r in served] == [r.indices for r in local]
    from purecover.cli import main

    inp, out = head_selector_dir.parent / "byo.jsonl", head_selector_dir.parent / "byo_out.jsonl"
    inp.write_text("".join(json.dumps({"qid": c["qid"], "question": c["question"],
                                       "docs": [{"text": d["text"]} for d in c["docs"]]}) + "\n" for c in cands),
                   encoding="utf-8")
    assert main(["select", "--selector", str(head_selector_dir), "--input", str(inp), "--out", str(out),
                 "--device", "cpu", "--dtype", "float32", "-q", "--log-level", "WARNING"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(cands)

    class TokenOnly:  # reads ' yes' logits at the markers, knows nothing of the head
        score_space = "logit"

        def identifier_logits(self, prompts, identifier_ids):
            raise AssertionError("never called")

        def passage_logits(self, prompts, read_positions, read_token):
            raise AssertionError("never called")

        def close(self):
            pass

    with pytest.raises(ValueError, match="trained head .*TokenOnly does not load"):
        Selector(selector.tokenizer, read_selector_config(head_selector_dir), TokenOnly())
    with pytest.raises(ValueError, match="passage readout"):
        Selector.from_pretrained(head_selector_dir, backend="vllm")
    (head_selector_dir / SCORE_HEAD_FILE).rename(head_selector_dir / "moved")
    try:
        with pytest.raises(FileNotFoundError, match="no scoring head"):
            Selector.from_pretrained(head_selector_dir, device="cpu", dtype="float32")
    finally:
        (head_selector_dir / "moved").rename(head_selector_dir / SCORE_HEAD_FILE)


def test_the_head_needs_the_passage_readout():
    from purecover.config import ConfigError, load_recipe

    with pytest.raises(ConfigError, match="passage_score.*needs readout: passage"):
        load_recipe(None, ["student.passage_score=head"])


def test_a_killed_head_run_resumes_to_the_same_head(head_selector_dir, tmp_path, tmp_path_factory, sample_dir):
    """The run directory as a kill after checkpoint-2 leaves it (no later checkpoint, no final, no manifest):
    the train stage resumes from checkpoint-2, restores the head from its file, and ends with the uninterrupted
    run's head and adapter."""
    import shutil

    from safetensors.torch import load_file

    from purecover.train.train_stage import run_train_stage
    from tests.models.conftest import _recipe

    done = head_selector_dir.parent
    run = tmp_path / "killed"
    shutil.copytree(done, run, ignore=shutil.ignore_patterns("selector", "export.run.json", "train.run.json",
                                                             "final", "checkpoint-4", "*.lock"))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-2"]
    recipe = _recipe(run, tiny_model_dir(tmp_path_factory, sample_dir), True, HEAD)
    summary = run_train_stage(recipe, show_progress=False)
    assert Path(summary.resumed_from).name == "checkpoint-2"
    a, b = ScoreHead.load(done / "checkpoints" / "final"), ScoreHead.load(run / "checkpoints" / "final")
    assert torch.allclose(a.proj.weight, b.proj.weight, atol=1e-6, rtol=0)
    assert torch.allclose(a.proj.bias, b.proj.bias, atol=1e-6, rtol=0)
    start = ScoreHead.load(run / "checkpoints" / "checkpoint-2")
    assert not torch.allclose(start.proj.weight, b.proj.weight, atol=1e-8)  # it trained after the resume
    adapter_a = load_file(done / "checkpoints" / "final" / "adapter_model.safetensors")
    adapter_b = load_file(run / "checkpoints" / "final" / "adapter_model.safetensors")
    for name in adapter_a:
        assert torch.allclose(adapter_a[name], adapter_b[name], atol=1e-6, rtol=0), name



def test_a_fully_trained_student_keeps_the_head_out_of_its_weights_file(tmp_path_factory, sample_dir):
    """Without LoRA the Trainer saves the whole model: the head is left out of model.safetensors (a plain
    transformers model loads it without unexpected keys) and saved beside it, and the export reads it back."""
    from safetensors import safe_open

    from purecover.models.selector import Selector
    from purecover.train.export_stage import run_export_stage

    recipe = trained_run(tmp_path_factory, sample_dir, lora=False, extra=HEAD)
    final = recipe.run_path / "checkpoints" / "final"
    weights = sorted(final.glob("model*.safetensors"))
    assert weights and (final / SCORE_HEAD_FILE).is_file()
    for path in weights:
        with safe_open(str(path), framework="pt") as f:
            assert not any("score_head" in k for k in f.keys())  # noqa: SIM118 (a safe_open handle)
    run_export_stage(recipe)
    selector = Selector.from_pretrained(recipe.run_path / "selector", device="cpu", dtype="float32")
    assert selector.backend.head_readout is not None
    assert torch.equal(selector.backend.head_readout.head.proj.weight, ScoreHead.load(final).proj.weight)


def _copy_with_head(head_selector_dir: Path, dest: Path, weight: float) -> Path:
    """A copy of the exported selector whose head weights are all `weight` (finite, so the head file loads)."""
    import shutil

    shutil.copytree(head_selector_dir, dest)
    hidden = ScoreHead.load(head_selector_dir).proj.weight.shape[1]
    save_file({"weight": torch.full((1, hidden), weight), "bias": torch.zeros(1)}, str(dest / SCORE_HEAD_FILE))
    return dest


def test_non_finite_scores_are_refused_by_select_byo_and_serve(head_selector_dir, tmp_path, capsys):
    """Issue 55 (1): a head of finite but huge weights (3e38) overflows every score. `Selector.select` refuses
    naming the selector, `purecover select` writes no record (never NaN into JSONL), and the server answers 500
    with the reason on both endpoints and counts it in /metrics."""
    pytest.importorskip("fastapi", reason="needs the serve extra")
    import httpx

    from purecover.cli import main
    from purecover.models.selector import NonFiniteScoresError, Selector
    from purecover.serve.app import create_app
    from purecover.serve.server import serve_in_thread
    from purecover.utils.io import read_jsonl
    from tests.serve.conftest import metric_samples

    bad = _copy_with_head(head_selector_dir, tmp_path / "huge", 3e38)
    selector = Selector.from_pretrained(bad, device="cpu", dtype="float32")
    cands = [rec for _, rec in read_jsonl(head_selector_dir.parent / "candidates.jsonl")][:2]
    with pytest.raises(NonFiniteScoresError, match=rf"selector {bad}: .*not finite .*question 0"):
        selector.select(cands[0]["question"], cands[0]["docs"])

    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"qid": c["qid"], "question": c["question"],
                                       "docs": [{"text": d["text"]} for d in c["docs"]]}) + "\n" for c in cands),
                   encoding="utf-8")
    assert main(["select", "--selector", str(bad), "--input", str(inp), "--out", str(out), "--device", "cpu",
                 "--dtype", "float32", "-q", "--log-level", "WARNING"]) == 1
    said = capsys.readouterr().err
    assert f"selector {bad}" in said and "not finite" in said
    assert not out.exists() or out.read_text() == ""  # no record, so no NaN in JSONL

    docs = [{"text": d["text"]} for d in cands[0]["docs"][:3]]
    with serve_in_thread(create_app(selector, model_name="huge")) as url, httpx.Client(base_url=url) as http:
        r = http.post("/v1/select", json={"query": cands[0]["question"], "documents": docs})
        assert r.status_code == 500 and "not finite" in r.json()["detail"] and str(bad) in r.json()["detail"]
        r = http.post("/v1/rerank", json={"query": cands[0]["question"], "documents": docs})
        assert r.status_code == 500 and "not finite" in r.json()["detail"]
        counted = metric_samples(http.get("/metrics").text)
    assert counted[("purecover_scoring_errors_total", (("reason", "non_finite_scores"),))] == 2
    # the same copy with ordinary weights scores finitely: the refusal is about the numbers, not the copy
    fine = _copy_with_head(head_selector_dir, tmp_path / "fine", 1e-3)
    assert all(math.isfinite(v) for v in Selector.from_pretrained(fine, device="cpu", dtype="float32").select(
        cands[0]["question"], cands[0]["docs"]).logits)


def test_a_head_file_beside_a_token_config_is_refused(head_selector_dir, tmp_path):
    """Issue 55 (2): selector_config.json saying passage_score: token, or without the key, beside a trained
    score_head.safetensors is refused naming both files (its tau3 belongs to one readout)."""
    import shutil

    from purecover.models.selector import Selector

    for name, edit in (("token", lambda c: {**c, "passage_score": "token"}),
                       ("missing", lambda c: {k: v for k, v in c.items() if k != "passage_score"})):
        d = tmp_path / name
        shutil.copytree(head_selector_dir, d)
        config = json.loads((d / "selector_config.json").read_text())
        (d / "selector_config.json").write_text(json.dumps(edit(config)))
        with pytest.raises(ValueError) as info:
            Selector.from_pretrained(d, device="cpu", dtype="float32")
        message = str(info.value)
        assert str(d / SCORE_HEAD_FILE) in message and str(d / "selector_config.json") in message
        assert ("passage_score: token" if name == "token" else "no passage_score") in message


def test_a_checkpoint_with_a_broken_head_is_passed_over_or_named(head_selector_dir, tmp_path, tmp_path_factory,
                                                                  sample_dir, caplog):
    """Issue 55 (9): a checkpoint whose score head holds NaN is passed over for the one before it, and the log
    names both; a resume_from_checkpoint that names it is refused saying which checkpoint to resume from."""
    import logging
    import shutil

    from purecover.train.train_stage import _last_complete_checkpoint, run_train_stage
    from tests.models.conftest import _recipe

    done = head_selector_dir.parent
    run = tmp_path / "run"
    shutil.copytree(done, run, ignore=shutil.ignore_patterns("selector", "export.run.json", "train.run.json",
                                                             "final", "checkpoint-4", "*.lock"))
    good, bad = run / "checkpoints" / "checkpoint-2", run / "checkpoints" / "checkpoint-3"
    shutil.copytree(good, bad)
    hidden = ScoreHead.load(good).proj.weight.shape[1]
    save_file({"weight": torch.full((1, hidden), float("nan")), "bias": torch.zeros(1)}, str(bad / SCORE_HEAD_FILE))
    with caplog.at_level(logging.WARNING, logger="purecover.train.train_stage"):
        assert _last_complete_checkpoint(run / "checkpoints", needs_head=True) == str(good)
    said = caplog.text
    assert f"not resuming from {bad}: its scoring head is unusable" in said and "non-finite" in said
    assert "trying the earlier checkpoint-2" in said
    recipe = _recipe(run, tiny_model_dir(tmp_path_factory, sample_dir), True,
                     (*HEAD, f"student.training.resume_from_checkpoint={bad}"))
    with pytest.raises(ValueError, match=rf"non-finite.*resume_from_checkpoint names {bad}: resume from {good} "
                                         "instead"):
        run_train_stage(recipe, show_progress=False)
    shutil.rmtree(good)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="purecover.train.train_stage"):
        assert _last_complete_checkpoint(run / "checkpoints", needs_head=True) is None
    assert "no earlier checkpoint: training starts afresh" in caplog.text
