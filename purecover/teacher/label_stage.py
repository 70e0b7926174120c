"""The label stage: candidates.jsonl → labels.jsonl.

Per question: reasoning steps and answer (the teacher's reply, or oracle steps from the data
stage with the gold answer), step weights e and coverage W (attention capture + calibration,
or the embedding estimator), optional LANCER ratings fused with weight β, and the
coverage-minus-noise greedy's pick order and gains (or, with ``teacher.selection: avg | max``, the
"w/o optimisation" ablation: the top-budget documents by score, with the scores in ``gains`` and
``teacher.selection`` in every record). Each record is a `purecover.records.LabelRecord`.

Processes and files. The job runs in one process or under `accelerate launch` / `torchrun`
(``python -m purecover.teacher RECIPE``): rank r of w takes questions r, r+w, r+2w, ... and
writes ``run_dir/label_shards/*.{r}-of-{w}.jsonl``; when every rank is done, rank 0 merges
the shards into ``labels.jsonl`` in candidates order (atomic write; `purecover.teacher.shards`).
Work happens in two passes: first generation for the whole shard (teacher replies, LANCER
sub-questions and ratings; with vLLM the engine is then freed), then capture and selection. Both
passes cut the shard into fixed batches by position and redo a partly written batch whole, so a
run killed at any moment and rerun produces exactly the records of an uninterrupted run. Before both,
``teacher.layers`` is resolved on the teacher's config and checked against every question's distance from
its first document to its reasoning (`purecover.teacher.layers`); the layers read go into every record's
``teacher.layers_read`` and the summary's ``layers``.

The calibrate stage (bias.json) is `purecover.teacher.calibrate_stage`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from typing_extensions import TypedDict

from ..config import Recipe
from ..contract import StageRun
from ..data.data_stage import read_candidate_records
from ..data.gold_check import oracle_steps_error
from ..models.generated import Generated
from ..records import (
    CandidateRecord,
    LabelRecord,
    LabelSummary,
    LancerShardRecord,
    LayersRead,
    ReplyShardRecord,
    StageSummary,
    StoredAttention,
    StoredSimilarity,
    validate_line,
)
from ..rundir import RunDir
from ..utils.io import ResumableJsonl, ensure_output_dir, read_jsonl
from ..utils.progress import tqdm
from .calibration import calibration_keys, load_bias
from .capture import SegmentSpec, capture_token_lists
from .defaults import resolve_params
from .diagnostics import fallback_warning, label_diagnostics
from .estimation import SegmentAttention, SimilarityScores, estimate
from .in_context_calibration import procedure_for, writes_own_steps
from .label_record import lancer_templates, stored, stored_array, teacher_meta
from .layers import (
    LayerPlan,
    LayerWindowError,
    load_layer_plan,
    reach_report,
    reply_distance,
    sequence_distance,
)
from .loading import TeacherResources, teacher_generator
from .parsing import ParsedReply, parse_reply
from .prompts import ReasoningPrompt, build_attention_prompt, build_teacher_sequence, reasoning_replies
from .selection import fuse, solve, stop_reason
from .shards import LABELS_FILE, SHARD_DIR, batches, distributed, merge_label_shards, shard_path

log = logging.getLogger(__name__)

__all__ = ["LABELS_FILE", "SHARD_DIR", "load_candidates", "run_label_stage", "write_labels"]


def load_candidates(path: str | Path) -> list[CandidateRecord]:
    """Read candidates.jsonl and check the fields labelling needs (errors name line and field)."""
    return read_candidate_records(path)


class _WhenTheyApply(TypedDict, total=False):
    """The `LabelRecord` fields written only when they apply (keyword arguments: a field passed is written)."""

    attention: StoredAttention
    similarity: StoredSimilarity
    reply: str
    reply_issue: str
    ratings: list[list[int | float]]
    subquestions: list[str]


class _Labeler:
    """Everything one process needs to label its shard."""

    def __init__(self, recipe: Recipe, rank: int, world: int, show_progress: bool) -> None:
        self.recipe = recipe
        self.cfg = recipe.teacher
        self.rank, self.world = rank, world
        self.show_progress = show_progress
        ensure_output_dir(recipe.run_path / SHARD_DIR)
        self.res = TeacherResources(self.cfg)
        self.bias: np.ndarray | None = None
        self.bias_key: str | None = None
        self.params = resolve_params(self.cfg)
        self.lancer_templates = lancer_templates(self.cfg)
        self.prompt = ReasoningPrompt.from_config(self.cfg)  # the reasoning prompt's wording, read once
        self.plan: LayerPlan | None = None  # teacher.layers resolved (`use_layers`); None: no attention is read
        self.meta = teacher_meta(self.cfg, self.params, self.lancer_templates, self.prompt.record())

    def use_layers(self, plan: LayerPlan) -> None:
        """Capture from `plan`'s layers and record them in every label's ``teacher.layers_read``."""
        self.plan = plan
        self.meta = teacher_meta(self.cfg, self.params, self.lancer_templates, self.prompt.record(),
                                 layers_read=plan.read)

    def shard_file(self, kind: str) -> Path:
        return shard_path(self.recipe.run_path, kind, self.rank, self.world)

    # ---- resources
    def tokenizer(self) -> Any:
        return self.res.tokenizer()

    def model(self) -> Any:
        return self.res.model()

    def _generator(self) -> Any:
        return teacher_generator(self.cfg, self.recipe.seed, self.tokenizer(), self.model)

    # ---- pass 1: generation
    def generate(self, shard: list[CandidateRecord]) -> tuple[dict[str, str], dict[str, LancerShardRecord]]:
        need_replies = any(writes_own_steps(self.cfg.steps, r) for r in shard)
        need_lancer = self.cfg.lancer.enabled
        replies: dict[str, Generated] = {}
        lancer: dict[str, LancerShardRecord] = {}
        if not (need_replies or need_lancer):
            return replies, lancer
        generator = None
        with ResumableJsonl(self.shard_file("replies")) as rfile, ResumableJsonl(self.shard_file("lancer")) as lfile:
            todo_r = [r for r in shard if writes_own_steps(self.cfg.steps, r) and r.qid not in rfile.done]
            todo_l = [r for r in shard if need_lancer and r.qid not in lfile.done]
            if todo_r or todo_l:
                generator = self._generator()
            pending = {r.qid for r in todo_r} | {r.qid for r in todo_l}
            # what an earlier run wrote is the bar's start, not throughput of this one
            bar = tqdm(total=len(shard), initial=sum(r.qid not in pending for r in shard),
                       desc=f"generate [{self.rank}]", unit="q", disable=not self.show_progress)
            for batch in batches(shard, self.cfg.batch_size):
                own = [r for r in batch if writes_own_steps(self.cfg.steps, r) and r.qid not in rfile.done]
                if own:
                    # the reply is made to start with teacher.reply_prefix: part of the reply
                    outs = reasoning_replies(generator, self.tokenizer(), own, self.prompt, self.cfg.reply_prefix,
                                             self.cfg.max_new_tokens)
                    for r, out in zip(own, outs):
                        if r.qid not in rfile.done:
                            rfile.write(ReplyShardRecord(qid=r.qid, reply=out.text,
                                                         finished=out.finished).to_json_dict())
                if need_lancer and any(r.qid not in lfile.done for r in batch):
                    self._lancer_batch(generator, batch, lfile)
                bar.update(sum(r.qid in pending for r in batch))
            bar.close()
        if generator is not None:
            generator.close()
        path = self.shard_file("replies")
        if path.exists():
            for lineno, line in read_jsonl(path):
                reply = validate_line(ReplyShardRecord, line, path, lineno)
                replies[reply.qid] = Generated(reply.reply, reply.finished)
        path = self.shard_file("lancer")
        if path.exists():
            for lineno, line in read_jsonl(path):
                rated = validate_line(LancerShardRecord, line, path, lineno)
                lancer[rated.qid] = rated
        return replies, lancer

    def _lancer_batch(self, generator: Any, batch: Sequence[CandidateRecord], lfile: ResumableJsonl) -> None:
        from .lancer import rate_documents, write_subquestions

        lc = self.cfg.lancer
        rating_t, sub_t = self.lancer_templates
        subs = write_subquestions(generator, self.tokenizer(), [r.question for r in batch], lc.n_subquestions,
                                  template=sub_t)
        for r, (questions, reason) in zip(batch, subs):
            # ints (JSON 3, not 3.0), or expected ratings as floats
            ratings = rate_documents(generator, self.tokenizer(), r.question, questions, r.docs,
                                     expected=lc.expected_rating, template=rating_t)
            if r.qid not in lfile.done:
                lfile.write(LancerShardRecord(qid=r.qid, subquestions=questions, subquestion_reason=reason,
                                              ratings=ratings).to_json_dict())

    # ---- pass 2: estimation and selection
    def steps_for(self, rec: CandidateRecord, replies: dict[str, Generated]) -> ParsedReply:
        if not writes_own_steps(self.cfg.steps, rec):
            steps = [s for s in rec.oracle_steps if s.strip()][: self.cfg.max_steps]
            answer = (rec.answers or [""])[0]
            if not steps:
                return ParsedReply([rec.question], answer, "fallback",
                                   "no oracle steps for this question: used the question as the only step")
            return ParsedReply(steps, answer)
        reply = replies.get(rec.qid, Generated("", None))
        return parse_reply(reply.text, rec.question, self.cfg.max_steps, finished=reply.finished,
                           example=self.prompt.example)

    def capture_attention(self, batch: Sequence[CandidateRecord], parsed: Sequence[ParsedReply]
                          ) -> list[SegmentAttention]:
        """Segment attention of each question (stored precision), from one capture pass over the batch, averaged
        over the resolved layers (`use_layers`); an explicitly listed layer whose window does not reach from the
        question's first step to its first document raises `LayerWindowError` before the pass."""
        tok, model = self.tokenizer(), self.model()
        seqs, specs = [], []
        for rec, p in zip(batch, parsed):
            prompt, doc_chars = build_attention_prompt(tok, rec.question, rec.docs, self.prompt)
            seq = build_teacher_sequence(tok, prompt, doc_chars, p.steps, p.answer)
            distance = sequence_distance(seq.step_spans, seq.doc_spans)
            if self.plan is not None and distance is not None:
                self.plan.check_reach(distance, f"question {rec.qid}")
            seqs.append(seq)
            specs.append(SegmentSpec.of([*seq.step_spans, seq.answer_span], [*seq.doc_spans, *seq.step_spans]))
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        layers = list(self.plan.read) if self.plan is not None else self.cfg.layers
        mats = capture_token_lists(model, [s.input_ids for s in seqs], specs, pad, layers=layers,
                                   max_chunk_bytes=self.cfg.capture_chunk_mb << 20)
        return [SegmentAttention.from_matrix(stored_array(m.numpy()), len(rec.docs), len(p.steps))
                for rec, p, m in zip(batch, parsed, mats)]

    def similarities(self, batch: Sequence[CandidateRecord], parsed: Sequence[ParsedReply]) -> list[SimilarityScores]:
        """Cosine similarities of each question (stored precision), each from an encoder call of its own.

        A question's steps, documents and answer are encoded together, in that order, and nothing is
        cached across questions: an encoder's output depends in its last bits on the batch a text is
        padded with, so the similarities are a function of the question's own record, whatever the
        batch, the process history or a resume point (a resumed run writes the same bytes).
        """
        from ..data.passage import passage_text
        from ..data.retrieval.dense import encode_texts

        embedder = self.res.embedder()
        out = []
        for rec, p in zip(batch, parsed):
            steps, answer = list(p.steps), p.answer.strip()
            docs = [passage_text(d.title, d.text) for d in rec.docs]
            texts = [t for t in [*steps, *docs, answer] if t]
            emb = dict(zip(texts, encode_texts(embedder, texts)))
            step_emb = np.stack([emb[t] for t in steps])
            doc_emb = np.stack([emb[t] if t else np.zeros_like(step_emb[0]) for t in docs])
            sim = SimilarityScores.from_embeddings(step_emb, doc_emb, emb[answer] if answer else None)
            out.append(SimilarityScores(stored_array(sim.step_doc), stored_array(sim.answer_step)))
        return out

    def label_batch(self, batch: Sequence[CandidateRecord], replies: dict[str, Generated],
                    lancer: dict[str, LancerShardRecord]) -> list[LabelRecord]:
        params = self.params
        parsed = [self.steps_for(r, replies) for r in batch]
        none: list[Any] = [None] * len(batch)
        attns = self.capture_attention(batch, parsed) if "attention" in (params.e_source, params.w_source) else none
        sims = self.similarities(batch, parsed) if "similarity" in (params.e_source, params.w_source) else none
        estimates = [estimate(params, a, s, self.bias, p.steps) for a, s, p in zip(attns, sims, parsed)]
        pairs = []
        for rec, est in zip(batch, estimates):
            lan = lancer.get(rec.qid)
            pairs.append(fuse(est.e, est.W, lan.ratings if lan is not None else None, params))
        result = solve(pairs, params)
        records = []
        for i, (rec, p, est) in enumerate(zip(batch, parsed, estimates)):
            n_sel = int(result.n_selected[i])
            selected = [int(k) for k in result.selected[i, :n_sel]]
            gains = [float(g) for g in result.gains[i, :n_sel]]
            reasons = [x for x in [p.reason, *est.notes] if x]
            codes = []
            if p.status == "fallback":
                codes.append("reply_parse" if writes_own_steps(self.cfg.steps, rec) else "no_oracle_steps")
            if bool(result.fallback[i]):
                codes.append("min_select")
                reasons.append("no document had a positive gain: kept the best one (min_select)")
            e, W = pairs[i]
            reason = "; ".join(reasons) or None
            optional = _WhenTheyApply()
            if attns[i] is not None:
                optional["attention"] = attns[i].to_record()
            if sims[i] is not None:
                optional["similarity"] = sims[i].to_record()
            if writes_own_steps(self.cfg.steps, rec):  # the teacher's own steps: its reply is kept
                optional["reply"] = replies.get(rec.qid, Generated("", None)).text
                if p.code is not None:
                    optional["reply_issue"] = p.code
            lan = lancer.get(rec.qid)
            if lan is not None:
                optional["ratings"] = lan.ratings
                optional["subquestions"] = lan.subquestions
                if lan.subquestion_reason:
                    reason = "; ".join(x for x in [reason, lan.subquestion_reason] if x)
            records.append(LabelRecord(
                qid=rec.qid,
                selected=selected,
                selected_doc_ids=[rec.docs[k].doc_id for k in selected],
                gains=[stored(g) for g in gains],
                objective=stored(float(result.objective[i])),
                steps=p.steps,
                answer=p.answer,
                e=[stored(x) for x in e],
                W=[[stored(x) for x in row] for row in W],
                bias_key=self.bias_key,
                status="fallback" if codes else "ok",
                reason=reason,
                fallback_reasons=codes,
                stop=stop_reason(gains, len(rec.docs), params, n_steps=len(e)),
                teacher=self.meta,
                **optional,
            ))
        return records

    def error_record(self, rec: CandidateRecord, exc: BaseException) -> LabelRecord:
        return LabelRecord.failed(rec.qid, exc, bias_key=self.bias_key, teacher=self.meta)

    def label(self, shard: list[CandidateRecord], replies: dict[str, Generated],
              lancer: dict[str, LancerShardRecord]) -> int:
        written = 0
        live = _LiveCounts()
        with ResumableJsonl(self.shard_file("labels")) as out:
            resumed = sum(r.qid in out.done for r in shard)
            bar = tqdm(total=len(shard), initial=resumed, desc=f"label [{self.rank}]", unit="q",
                       disable=not self.show_progress)
            for batch in batches(shard, self.cfg.batch_size):
                pending = sum(r.qid not in out.done for r in batch)
                if not pending:
                    continue
                try:
                    records = self.label_batch(batch, replies, lancer)
                except LayerWindowError:  # the recipe's layers, not this batch: stop the run
                    raise
                except Exception as exc:  # record per question, never drop one silently
                    log.warning("batch failed (%s); labelling its questions one by one", exc)
                    records = []
                    for rec in batch:
                        if not rec.docs:
                            records.append(self.error_record(rec, ValueError("no candidate documents")))
                            continue
                        try:
                            records += self.label_batch([rec], replies, lancer)
                        except LayerWindowError:
                            raise
                        except Exception as single:
                            log.error("question %s failed: %s", rec.qid, single)
                            records.append(self.error_record(rec, single))
                for r in records:
                    if r.qid not in out.done:
                        out.write(r.to_json_dict())
                        written += 1
                        live.add(r)
                bar.set_postfix(live.postfix(), refresh=False)
                bar.update(pending)
            bar.close()
        return written


class _LiveCounts:
    """Running label figures for the progress bar: mean |S|, fallback and first-step-stop shares."""

    def __init__(self) -> None:
        self.n = self.size = self.fallback = self.first_step = 0

    def add(self, record: LabelRecord) -> None:
        self.n += 1
        self.size += len(record.selected)
        self.fallback += record.status == "fallback"
        self.first_step += record.stop == "first_step"

    def postfix(self) -> dict[str, str]:
        if not self.n:
            return {}
        return {"|S|": f"{self.size / self.n:.2f}", "fallback": f"{self.fallback / self.n:.0%}",
                "first-step stop": f"{self.first_step / self.n:.0%}"}


def _resolve_layer_plan(labeler: _Labeler, candidates: Sequence[CandidateRecord], warn: bool) -> LayersRead | None:
    """Resolve ``teacher.layers`` on the teacher's config and apply the reach rule to every question, before any
    generation or capture (`purecover.teacher.layers`): the prompt of each question is tokenised only when a read
    layer has a window. Every rank checks every question, so all refuse alike; `warn`: log the ``all`` warning
    (rank 0). Returns the `LayersRead` record, or None when no attention is read."""
    params, cfg = labeler.params, labeler.cfg
    if "attention" not in (params.e_source, params.w_source):
        return None
    plan = load_layer_plan(cfg.model, cfg.layers, trust_remote_code=cfg.trust_remote_code)
    labeler.use_layers(plan)
    distances: list[tuple[str, int | None]] = []
    if plan.sliding():
        tok = labeler.tokenizer()
        distances = [(f"question {r.qid}", reply_distance(tok, r.question, r.docs, labeler.prompt))
                     for r in candidates]
    return plan.record(reach_report(plan, distances, exact=False, warn=warn))


def run_label_stage(recipe: Recipe, show_progress: bool = True) -> StageSummary:
    """Label run_dir/candidates.jsonl into run_dir/labels.jsonl (see module docstring); returns the summary also
    stored in label.run.json (a `LabelSummary`; a complete stage's stored summary that another version wrote may
    read as a plain `StageSummary`)."""
    from ..contract import run_stage

    return run_stage("label", recipe, show_progress)


def write_labels(run: StageRun) -> LabelSummary:
    """The label stage's body: this process's shard of the questions, merged into labels.jsonl by rank 0."""
    recipe, show_progress = run.recipe, run.show_progress
    cfg = recipe.teacher
    run_dir = recipe.run_path
    rd = RunDir(run_dir)
    rank, world, state = distributed()
    candidates = load_candidates(rd.path_of("candidates"))
    refused = oracle_steps_error(recipe, len(candidates), sum(1 for c in candidates if c.oracle_steps),
                                 rd.path_of("candidates"))
    if refused:  # before the teacher loads: every label would fall back
        raise ValueError(refused)
    torch.manual_seed(recipe.seed)
    labeler = _Labeler(recipe, rank, world, show_progress)
    layers = _resolve_layer_plan(labeler, candidates, warn=rank == 0)
    if cfg.estimator == "attention" and cfg.calibrate:
        assert labeler.plan is not None
        keys, _ = calibration_keys(cfg.model, recipe.data.k1, labeler.tokenizer(), cfg.layers,
                                   cfg.calibration_lengths, rd.path_of("candidates"), prompt=labeler.prompt,
                                   layers_read=labeler.plan.read,
                                   procedure=procedure_for(cfg, recipe.data.k1, rd.path_of("candidates")))
        labeler.bias, labeler.bias_key = load_bias(rd.path_of("bias"), keys)
    shard = candidates[rank::world]
    t0 = time.perf_counter()
    replies, lancer = labeler.generate(shard)
    written = labeler.label(shard, replies, lancer)
    elapsed = time.perf_counter() - t0
    if state is not None:
        state.wait_for_everyone()
    summary = LabelSummary(rank=rank, world=world, shard_questions=len(shard), written=written)
    if rank == 0:
        diag = label_diagnostics(merge_label_shards(run_dir, candidates, world), cfg.budget)
        warning = fallback_warning(diag, cfg.fallback_warn)
        summary = LabelSummary(
            processes=world, **diag.model_dump(),
            written_by_rank0=written,
            questions_per_second_rank0=round(written / elapsed, 3) if written and elapsed > 0 else None,
            labels=str(run_dir / LABELS_FILE), estimation=labeler.params.to_record(), warning=warning,
            **({"layers": layers} if layers is not None else {}),
        )
        if diag.error == len(candidates):
            raise RuntimeError(f"every question failed; see the `reason` fields in {run_dir / LABELS_FILE}")
        if warning:
            log.warning(warning)

        def track(summary: StageSummary) -> None:
            from ..utils.tracking import track_stage  # no-op unless tracking.report_to is wandb

            histogram = summary.size_histogram if isinstance(summary, LabelSummary) else None
            rows = [[int(size), n] for size, n in (histogram or {}).items()]
            track_stage(recipe, "label", summary.to_json_dict(), tables={"size_histogram": (["|S|", "questions"], rows)})

        run.after_complete.append(track)
    if state is not None:  # every rank returns once rank 0 has marked the stage complete
        run.after_complete.append(lambda _summary: state.wait_for_everyone())
    return summary
