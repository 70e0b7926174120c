"""`SelectorTrainer`: a `transformers.Trainer` whose only change is the loss (docs/concepts/method.md#the-student).

Checkpointing, resume, gradient accumulation, mixed precision, DeepSpeed (through
`accelerate launch`) and logging are the Trainer's own. The loss components L_CL and L_LM
and, on evaluation, the subset F1 against the teacher are accumulated during `compute_loss`
and added to the Trainer's log records (train: ``l_cl``, ``l_lm``; eval: ``eval_l_cl``,
``eval_l_lm``, ``eval_subset_f1@0`` — passages with logit > 0 — and ``eval_subset_f1@size`` —
the teacher's subset size taken from the top of the student's scores). The ``eval_*`` records are on
the calibration split (early stopping; τ3 is chosen there too); after training, the train stage logs
one ``test_*`` record (``test_subset_f1`` at τ3, on the test split that neither saw).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch
from transformers import Trainer

from ..metrics import subset_f1
from ..models.readouts import get_readout
from ..models.score_head import SCORE_HEAD_ATTR, HeadReadout, ScoreHead
from .losses import ReplyFormat, negative_pool, sample_negatives, selector_loss
from .selector_arguments import SelectorTrainingArguments

if TYPE_CHECKING:
    from .data import SelectorBatch

__all__ = ["SelectorTrainer"]


def _head_tensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """The scoring head's ``weight`` and ``bias`` in a (gathered) state dict of the model, keyed as `ScoreHead.save`
    takes them; empty when the state dict does not hold both."""
    found = {}
    for key, value in state_dict.items():
        parts = key.split(".")
        if len(parts) >= 3 and parts[-3:-1] == [SCORE_HEAD_ATTR, "proj"] and parts[-1] in ("weight", "bias"):
            found[parts[-1]] = value
    return found if len(found) == 2 else {}


class SelectorTrainer(Trainer):
    """Trainer with L = cl_weight · L_CL + lm_weight · L_LM (+ bce_weight · L_BCE); batches come from
    `SelectorCollator`. With ``readout: passage`` the scores are read at each passage's marker (the batch's
    ``read_positions``, the logit of `read_token`) instead of the first reply position; with ``passage_score:
    head`` by `score_head`, a linear head on the hidden state there, attached to the model as the submodule
    ``purecover_score_head`` (so the optimizer, DeepSpeed and device placement treat it as the model's own) and
    written as ``score_head.safetensors`` next to the weights of every checkpoint (`_save`, the one other
    override: the Trainer saves only the adapter's weights).

    The loss settings (lm_weight, cl_weight, m_exact, lm_reduction, reply_order and the negatives) are read from
    `args`, which must be `SelectorTrainingArguments`. With ``negatives: sampled`` each question's negatives are
    drawn afresh at every optimizer step (`rejected`), seeded by (args.seed, qid, order shown, step).
    """

    args: SelectorTrainingArguments

    def __init__(self, model: Any = None, args: SelectorTrainingArguments | None = None, *rest: Any,
                 reply_format: ReplyFormat, pad_id: int = 0, read_token: int | None = None,
                 score_head: ScoreHead | None = None, **kwargs: Any) -> None:
        if not isinstance(args, SelectorTrainingArguments):
            raise TypeError("SelectorTrainer takes its loss settings from SelectorTrainingArguments; got "
                            f"args of type {type(args).__name__}")
        reader = get_readout(args.readout, args.passage_score)
        if reader.has_head != (score_head is not None):
            raise ValueError(f"passage_score {args.passage_score!r} with{'out' if score_head is None else ''} a "
                             "score_head: the head and the setting go together")
        self.head_readout: HeadReadout | None = None
        if score_head is not None:
            model.add_module(SCORE_HEAD_ATTR, score_head)  # before the Trainer places the model and its optimizer
            self.head_readout = HeadReadout.of(model, score_head)
        super().__init__(model, args, *rest, **kwargs)
        if reader.reads_at_markers and read_token is None:
            raise ValueError(f"the {reader.name} readout (student.readout: {reader.readout}) needs read_token, the "
                             "score token's id")
        self.reply_format = reply_format
        self.pad_id = pad_id
        self.read_token = read_token
        self._extra: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.prompt_tokens_trained = 0  # prompt tokens this process trained on in this run (resumes start at 0)

    def rejected(self, inputs: SelectorBatch) -> list[list[int]] | None:
        """Per question the negatives of L_CL at this step: None (every unselected candidate) unless
        ``negatives: sampled``, then `sample_negatives` of `negative_pool`."""
        args = self.args
        if args.negatives == "all":
            return None
        step = self.state.global_step
        out = []
        for qid, sel, n, order in zip(inputs["qids"], inputs["selected"], inputs["n_docs"], inputs["orders"]):
            pool = negative_pool(sel, n, order, args.negative_pool)
            shown = "retrieval" if order is None else ",".join(map(str, order))
            out.append(sample_negatives(pool, args.negative_sample, args.seed, f"{qid}:{shown}:{step}"))
        return out

    def compute_loss(self, model: Any, inputs: SelectorBatch, return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        args = self.args
        out = selector_loss(model, inputs["prompts"], inputs["selected"], inputs["n_docs"], self.reply_format,
                            lm_weight=args.lm_weight, cl_weight=args.cl_weight, m_exact=args.m_exact, pad_id=self.pad_id,
                            lm_reduction=args.lm_reduction, reply_order=args.reply_order,
                            rejected=self.rejected(inputs), read_positions=inputs.get("read_positions"),
                            read_token=self.read_token, bce_weight=args.bce_weight, score_head=self.head_readout)
        split = "train" if model.training else "eval"
        if split == "train":
            self.prompt_tokens_trained += sum(int(p.shape[0]) for p in inputs["prompts"])
        self._extra[split]["l_cl"].append(float(out.l_cl))
        self._extra[split]["l_lm"].append(float(out.l_lm))
        if args.bce_weight and out.l_bce is not None:
            self._extra[split]["l_bce"].append(float(out.l_bce))
        if split == "eval":
            for scores, gold in zip(out.first_logits, inputs["selected"]):
                at_zero = [k for k in range(scores.shape[0]) if scores[k] > 0]
                by_size = torch.argsort(-scores)[: len(gold)].tolist()
                self._extra[split]["subset_f1@0"].append(subset_f1(at_zero, gold))
                self._extra[split]["subset_f1@size"].append(subset_f1(by_size, gold))
        if return_outputs:
            return out.loss, {"first_logits": out.first_logits}
        return out.loss

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        """The Trainer's save, then the scoring head (when there is one) as score_head.safetensors beside the
        weights; a full model's own weights file leaves the head out."""
        if self.head_readout is not None and not hasattr(self.model, "peft_config"):
            state_dict = {k: v for k, v in (state_dict if state_dict is not None else self.model.state_dict()).items()
                          if SCORE_HEAD_ATTR not in k.split(".")}
        head_tensors = _head_tensors(state_dict) if self.head_readout is not None and state_dict is not None else {}
        super()._save(output_dir, state_dict)
        if self.head_readout is not None:
            # under DeepSpeed ZeRO-3 the module's own parameters are shards: the gathered state dict holds the head
            self.head_readout.head.save(output_dir if output_dir is not None else self.args.output_dir,
                                        **head_tensors)

    def prediction_step(self, model: Any, inputs: SelectorBatch, prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None) -> tuple[Any, Any, Any]:
        """Evaluation computes the loss (and the logged metrics) only; there are no label tensors."""
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if any(k.startswith("test_") for k in logs):  # the train stage's test-split record: nothing to add
            super().log(logs, start_time)
            return
        split = "eval" if any(k.startswith("eval_") for k in logs) else "train"
        for name, values in self._extra[split].items():
            if values:
                logs[("eval_" if split == "eval" else "") + name] = round(sum(values) / len(values), 6)
        self._extra[split].clear()
        if split == "train" and "loss" in logs:  # the log lines' tokens/s (this process, this run)
            logs["prompt_tokens"] = self.prompt_tokens_trained
        super().log(logs, start_time)
