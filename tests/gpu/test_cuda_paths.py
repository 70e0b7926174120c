"""The paths that only a GPU exercises: bf16 on CUDA, the selector and attention capture on a CUDA device, and the
train stage there. Marked ``gpu``: skipped with a reason without CUDA (tests/conftest.py); `benchmarks/gpu_check.py`
runs them (its ``tests`` part) on the machine it measures. ``PURECOVER_GPU_TEST_DEVICE=cpu`` runs them on the CPU
instead (``gpu_check.py --tiny`` does, so the tests' own logic is checked in the suite)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from purecover.demo.tiny import tiny_causal_lm
from purecover.models.score_head import HeadReadout, ScoreHead
from purecover.teacher.capture import SegmentSpec, capture_segment_attention, reference_segment_attention
from purecover.train.losses import ReplyFormat, selector_loss

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("PURECOVER_GPU_TEST_DEVICE", "cuda")
VOCAB = 400
FMT = ReplyFormat(identifier_ids=tuple(range(10, 20)), separator_id=5, end_id=6)


def _model(dtype):
    model = tiny_causal_lm("qwen2", VOCAB, hidden_size=64, intermediate_size=128, num_layers=2, seed=0)
    return model.to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_capture_on_cuda_equals_eager(dtype, tol):
    model = _model(dtype).eval()
    n = 300
    ids = torch.randint(30, VOCAB, (1, n), device=DEVICE)
    mask = torch.ones_like(ids)
    docs = [(i * 40, (i + 1) * 40) for i in range(5)]
    spec = SegmentSpec.of([(200, 260), (260, n)], [*docs, (200, 260)])
    with torch.no_grad():
        got = capture_segment_attention(model, ids, mask, [spec])[0]
        model.set_attn_implementation("eager")
        eager = model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False).attentions
        model.set_attn_implementation("sdpa")
        want = reference_segment_attention(eager, mask, [spec])[0]
    finite = ~torch.isnan(want)
    assert float((got.float().cpu()[finite.cpu()] - want.float().cpu()[finite.cpu()]).abs().max()) <= tol


@pytest.mark.parametrize("readout", ["identifier", "passage", "passage+head"])
def test_selector_loss_in_bf16_on_cuda_tracks_float32(readout):
    """One training step's loss in bf16 on CUDA is within 5 % of float32 on the CPU, with finite gradients."""
    torch.manual_seed(0)
    prompt = torch.randint(30, VOCAB, (120,))
    positions, selected = [15, 35, 55, 75, 95], [1, 3]
    losses = {}
    for device, dtype in (("cpu", torch.float32), (DEVICE, torch.bfloat16)):
        model = tiny_causal_lm("qwen2", VOCAB, hidden_size=64, intermediate_size=128, num_layers=2, seed=0)
        model = model.to(device=device, dtype=dtype).train()
        kwargs = {"lm_weight": 1.0, "m_exact": 5} if readout == "identifier" else {
            "lm_weight": 0.0, "bce_weight": 1.0, "read_positions": [positions], "read_token": 42}
        if readout == "passage+head":
            kwargs["score_head"] = HeadReadout.of(model, ScoreHead.from_token(model, 42))
        out = selector_loss(model, [prompt.to(device)], [selected], [5], FMT, **kwargs)
        out.loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
        losses[str(dtype)] = float(out.loss.detach())
    assert losses[str(torch.bfloat16)] == pytest.approx(losses[str(torch.float32)], rel=0.05)


def test_selector_on_cuda_selects_as_on_cpu(tmp_path, sample_dir):
    from purecover.demo.tiny import build_tiny_model
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector import Selector
    from purecover.models.selector_prompt import prompt_template

    tok_dir = sample_dir / "qwen2_tokenizer"
    if not tok_dir.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {tok_dir}")
    sel = build_tiny_model(tmp_path / "sel", tok_dir, "qwen2", seed=3)
    from transformers import AutoTokenizer

    scheme = IdentifierScheme("letters").check(AutoTokenizer.from_pretrained(tok_dir), 6)
    (sel / "selector_config.json").write_text(json.dumps({
        "base_model": "org/base", "identifiers": scheme.to_record().model_dump(mode="json"),
        "prompt_template": prompt_template(), "k1": 6, "tau3": 0.0, "k_max": 3, "min_select": 1,
        "purecover_version": "0.1.0", "max_passage_tokens": 64}))
    docs = [{"title": "Ada Brill", "text": "Ada Brill was born in Tollbridge."},
            {"title": "Tollbridge", "text": "The river Mirren flows through Tollbridge."},
            {"title": "Corven", "text": "Corven is a fishing village."}]
    question = "Which river flows through the town where Ada Brill was born?"
    cpu = Selector.from_pretrained(sel, device="cpu", dtype="float32").select(question, docs)
    gpu = Selector.from_pretrained(sel, device=DEVICE, dtype="float32").select(question, docs)
    assert gpu.indices == cpu.indices
    assert gpu.logits == pytest.approx(cpu.logits, abs=1e-3)


def test_train_stage_in_bf16_on_cuda(tmp_path_factory, sample_dir):
    """The train stage on the CUDA device (the Trainer puts it there) with bf16 autocast: a complete run with a
    finite loss and an exported selector that loads on the GPU."""
    from purecover.models.selector import Selector
    from purecover.train.export_stage import run_export_stage
    from tests.models.conftest import trained_run

    recipe = trained_run(tmp_path_factory, sample_dir, lora=True, extra=("student.training.bf16=true",))
    summary = json.loads((recipe.run_path / "train.run.json").read_text())["summary"]
    assert summary["status"] == "complete" and summary["train_loss"] == summary["train_loss"]  # not NaN
    run_export_stage(recipe)
    selector = Selector.from_pretrained(recipe.run_path / "selector", device=DEVICE, dtype="bfloat16")
    assert next(selector.backend.model.parameters()).device.type == DEVICE
