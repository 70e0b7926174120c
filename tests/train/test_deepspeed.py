"""DeepSpeed ZeRO-2 / ZeRO-3 training of the tiny student on CPU, through `accelerate launch`.

Each test launches, from the repo root, the command a user would run:

    accelerate launch --config_file configs/accelerate/deepspeed_zero{2,3}_cpu.yaml -m purecover.train --set ...

(one process; multi-process DeepSpeed does not run on CPU) and then checks that

* DeepSpeed really ran with the intended ZeRO stage: the Trainer checkpoint holds DeepSpeed's
  ``global_stepN/`` shards, whose optimizer states record the stage;
* ``checkpoints/final`` holds a non-empty LoRA adapter (the known failure of LoRA + ZeRO-3 without
  ``stage3_gather_16bit_weights_on_model_save`` is an adapter of empty or all-zero tensors), with
  every lora_B moved away from its zero initialisation;
* the adapter is the trained one: base model + adapter loaded with peft gives the same logits as the
  base model carrying the fp32 weights reconstructed from the DeepSpeed checkpoint of the last step
  (an independent copy of the trained weights, read from the optimizer partitions), and logits that
  differ clearly from the base model's.

The first DeepSpeed start compiles a communication op (~1 min); it is cached in TORCH_EXTENSIONS_DIR
(default ``$HOME/.cache/purecover/torch_extensions``, as in the Makefile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.run_dirs import new_run_dir
from tests.train.helpers import labelled_run

pytest.importorskip("deepspeed")
pytest.importorskip("peft")

REPO = Path(__file__).resolve().parents[2]
MAX_STEPS = 4
SAVE_STEPS = 2


def _labelled_run(tmp: Path) -> tuple[Path, Path]:
    return labelled_run(tmp, 'run')


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> tuple[Path, Path]:
    return _labelled_run(tmp_path_factory.mktemp("ds"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "purecover" / "torch_extensions"))
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    return env


def _train_command(stage: int, tiny: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", f"configs/accelerate/deepspeed_zero{stage}_cpu.yaml", "--main_process_port", "0",
        "-m", "purecover.train", "-q",
        "--set", f"run_dir={run_dir}", "--set", f"student.model={tiny}", "--set", "student.dtype=float32",
        "--set", "student.max_passage_tokens=64",
        "--set", f"student.training.max_steps={MAX_STEPS}", "--set", f"student.training.save_steps={SAVE_STEPS}",
        "--set", "student.training.learning_rate=0.01", "--set", "student.training.logging_steps=1",
    ]


def _train_with_accelerate(stage: int, tiny: Path, run_dir: Path) -> subprocess.CompletedProcess:
    cmd = _train_command(stage, tiny, run_dir)
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"accelerate launch failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return proc


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_training_through_accelerate(stage, labelled, tmp_path):
    from deepspeed.utils.zero_to_fp32 import (
        get_fp32_state_dict_from_zero_checkpoint,
        get_optim_files,
        parse_optim_states,
    )
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    tiny, labelled_run = labelled
    run_dir = tmp_path / "run"
    new_run_dir(run_dir)
    for name in ("candidates.jsonl", "labels.jsonl"):
        (run_dir / name).write_bytes((labelled_run / name).read_bytes())
    _train_with_accelerate(stage, tiny, run_dir)

    # DeepSpeed ran, with the intended ZeRO stage.
    ckpt = run_dir / "checkpoints" / f"checkpoint-{MAX_STEPS}"
    ds_dir = ckpt / f"global_step{MAX_STEPS}"
    assert ds_dir.is_dir(), f"no DeepSpeed shards in {ckpt}: {sorted(p.name for p in ckpt.iterdir())}"
    assert (ckpt / "latest").read_text().strip() == ds_dir.name
    model_states = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    assert (ds_dir / model_states).is_file()
    assert int(parse_optim_states(get_optim_files(str(ds_dir)), str(ds_dir))[0]) == stage

    # A non-empty adapter whose lora_B left the zero init.
    final = run_dir / "checkpoints" / "final"
    adapter = load_file(final / "adapter_model.safetensors")
    lora_b = {k: v for k, v in adapter.items() if "lora_B" in k}
    assert lora_b and len(lora_b) * 2 == len(adapter), sorted(adapter)
    assert all(v.numel() > 0 for v in adapter.values()), {k: tuple(v.shape) for k, v in adapter.items()}
    assert all(float(v.abs().max()) > 0 for v in lora_b.values()), "a lora_B is still all zero"
    meta = json.loads((final / "purecover_student.json").read_text())
    assert meta["lora"] is not None and "tau3" in meta
    assert json.loads((run_dir / "train.run.json").read_text())["summary"]["global_step"] == MAX_STEPS

    # The saved adapter is the trained model: compare with the DeepSpeed checkpoint's own fp32 weights.
    trained = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), exclude_frozen_parameters=True)
    base = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    ids = torch.randint(0, base.config.vocab_size, (1, 48), generator=torch.Generator().manual_seed(0))
    base_logits = _logits(base, ids)

    from_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32),
                                             final).eval()
    from_deepspeed = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32),
                                               final).eval()
    lora_params = dict((n, p) for n, p in from_deepspeed.named_parameters() if "lora_" in n)
    assert set(lora_params) == set(trained), (sorted(lora_params)[:4], sorted(trained)[:4])
    with torch.no_grad():
        for name, p in lora_params.items():
            p.copy_(trained[name])
    adapter_logits, ds_logits = _logits(from_adapter, ids), _logits(from_deepspeed, ids)
    assert torch.allclose(adapter_logits, ds_logits, atol=1e-4), float((adapter_logits - ds_logits).abs().max())
    effect = float((adapter_logits - base_logits).abs().max())
    assert effect > 1e-2, f"the adapter barely changes the logits (max |Δ| = {effect})"

    # Export from the DeepSpeed run: a merged plain-transformers model with the same logits.
    from purecover.config import load_recipe
    from purecover.train.export_stage import run_export_stage

    train_sets = _train_command(stage, tiny, run_dir)  # the recipe the train stage ran with (export checks it)
    recipe = load_recipe(None, [train_sets[i + 1] for i, arg in enumerate(train_sets) if arg == "--set"])
    run_export_stage(recipe)
    exported = AutoModelForCausalLM.from_pretrained(run_dir / "selector", dtype=torch.float32).eval()
    assert not (run_dir / "selector" / "adapter_config.json").exists()
    exported_logits = _logits(exported, ids)
    assert torch.allclose(exported_logits, adapter_logits, atol=1e-4), float((exported_logits - adapter_logits).abs().max())


@pytest.mark.slow
def test_zero3_trains_and_saves_the_scoring_head(labelled, tmp_path):
    """passage_score head under ZeRO-3, where each parameter is a shard outside its module's forward: the head is
    trained (it left the ' yes' row it started from) and score_head.safetensors holds the gathered values, the same as
    DeepSpeed's own fp32 checkpoint of it; the export carries it and Selector scores with it."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from purecover.config import load_recipe
    from purecover.models.score_head import ScoreHead
    from purecover.models.selector import Selector
    from purecover.models.selector_prompt import read_token_id
    from purecover.train.export_stage import run_export_stage

    tiny, labelled_run = labelled
    run_dir = tmp_path / "run"
    new_run_dir(run_dir)
    for name in ("candidates.jsonl", "labels.jsonl"):
        (run_dir / name).write_bytes((labelled_run / name).read_bytes())
    head_sets = ["student.readout=passage", "student.lm_weight=0.0", "student.bce_weight=1.0",
                 "student.passage_score=head"]
    cmd = _train_command(3, tiny, run_dir) + [x for s in head_sets for x in ("--set", s)]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"accelerate launch failed ({proc.returncode}):\n{proc.stderr[-8000:]}"

    ckpt, final = run_dir / "checkpoints" / f"checkpoint-{MAX_STEPS}", run_dir / "checkpoints" / "final"
    head = ScoreHead.load(final)
    ds = get_fp32_state_dict_from_zero_checkpoint(str(ckpt))
    key = next(k for k in ds if k.endswith("purecover_score_head.proj.weight"))
    assert torch.allclose(head.proj.weight, ds[key].float(), atol=1e-6)
    assert torch.allclose(ScoreHead.load(ckpt).proj.weight, head.proj.weight)
    base = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    start = base.get_output_embeddings().weight[read_token_id(AutoTokenizer.from_pretrained(tiny))]
    assert float((head.proj.weight[0] - start).abs().max()) > 1e-4, "the head did not train"

    recipe = load_recipe(None, [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--set"])
    run_export_stage(recipe)
    selector = Selector.from_pretrained(run_dir / "selector", device="cpu", dtype="float32")
    assert torch.equal(selector.backend.head_readout.head.proj.weight, head.proj.weight)
