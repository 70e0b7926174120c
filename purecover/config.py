"""Recipe configuration: one pydantic dataclass per section, loaded from YAML with dotted overrides.

A recipe is a YAML mapping of the sections below; its ``base`` key may name recipes to merge it over
(see `load_recipe`). `load_recipe(path, overrides)` reads it, applies ``section.key=value`` overrides
(values parsed as YAML) and validates it with pydantic: every key, type and range. The first problem
becomes a one-line `ConfigError` naming the dotted key and what is expected; an unknown key also
names the closest valid one. Every field carries its type, its range and a description, so
`recipe_json_schema()` is the reference of the recipe.

The sections are pydantic dataclasses, that is standard dataclasses that validate when they are
built: `dataclasses.replace` checks the new values, and `recipe_to_dict` (`dataclasses.asdict`) is
the plain form written next to every stage's output and hashed into its configuration hash. Scalars
are strict, as YAML gives them: ``"3"`` is not an integer, ``1`` is not ``true``, and an integer is
accepted (stored as a float) where a number is expected.

Checks that span sections or need another library (``student.training`` against transformers,
``data.k1`` against the identifier scheme, ``eval.methods``) are `purecover.validate.validate_recipe`'s.
Paths in a recipe (``run_dir``, ``data.path``, ...) are relative to the working directory.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.dataclasses import dataclass

__all__ = [
    "LAUNCH_FLAGS",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "ExportConfig",
    "LancerConfig",
    "LaunchConfig",
    "LoraConfig",
    "Recipe",
    "StudentConfig",
    "TeacherConfig",
    "TrackingConfig",
    "dump_recipe_yaml",
    "load_recipe",
    "parse_override",
    "recipe_from_dict",
    "recipe_json_schema",
    "recipe_to_dict",
    "section_fingerprint",
]


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the key and what is expected."""


class _SectionError(ValueError):
    """A check across the keys of one section failed: `key` is the key the message is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# Every section rejects keys it does not declare; defaults are trusted (not re-validated).
_SECTION = ConfigDict(extra="forbid")
_NOT_BLANK = r"\S"  # a string pattern: at least one non-space character
_DTYPES = Literal["auto", "float32", "bfloat16", "float16"]
_AtLeastOne = Annotated[StrictInt, Field(ge=1)]  # an integer >= 1


@dataclass(config=_SECTION)
class DataConfig:
    """`data` section: which questions, which corpus, which retriever, how many candidates."""

    dataset: Literal["hotpotqa", "2wiki", "musique", "strategyqa", "flashrag", "coverage"] = Field(
        "hotpotqa", description="Record format of the questions: hotpotqa, 2wiki, musique, strategyqa, flashrag "
        "(generic FlashRAG records), or coverage (topics of a coverage collection: CoverageBench, CRUX or your own; "
        "needs data.qrels and a corpus file).")
    path: StrictStr | list[StrictStr] | None = Field(
        None, description="Where the questions come from: a local file, `demo` (the demo set bundled with the "
        "package) or a Hub dataset name; or a list of local files (e.g. [dev.json, train.json]), all in the "
        "data.dataset format, read in list order as one set of questions: a question id in two of the files is an "
        "error naming both, data.limit and data.sample apply to the union, and editing any of the files makes the "
        "data stage's output stale. A list never holds `demo`, a Hub dataset name or a folder (read those alone); a "
        "one-file list is that file.")
    split: StrictStr = Field(
        "dev", description="Split to read (Hub datasets); when it does not exist, an existing alias is read "
        "(dev, validation, val).")
    limit: _AtLeastOne | None = Field(None, description="Keep only the first N questions (null: all).")
    corpus: StrictStr = Field(
        "shared", description="Passages retrieved from: per_question (each question's own paragraphs), shared (the "
        "union of the loaded questions' paragraphs) or the path of a corpus JSONL.")
    retriever: Literal["bm25", "dense"] = Field(
        "bm25", description="Retriever of the candidates: bm25, or dense (sentence-transformers embeddings, FAISS "
        "when installed).")
    dense_model: StrictStr = Field("intfloat/e5-base-v2", description="Embedding model of the dense retriever.")
    k1: StrictInt = Field(20, ge=1, description="Candidates retrieved per question (K1): the passages the teacher "
                          "labels and the student chooses among.")
    hub_config: StrictStr | None = Field(
        None, description="Hub dataset configuration name (e.g. FlashRAG's hotpotqa); null: the repository's own "
        "default (distractor for HotpotQA's). Also used for eval.path.")
    aliases: StrictStr | None = Field(
        None, description="2Wiki id_aliases.json: adds every answer's aliases and demonyms to the gold answers.")
    skip_invalid: StrictBool = Field(
        False, description="Skip malformed records, counting them in run_dir/data_report.json, instead of failing.")
    query_prefix: StrictStr | None = Field(
        None, description="Dense retriever: text put before each question; null: 'query: ' for e5 models, nothing "
        "otherwise.")
    passage_prefix: StrictStr | None = Field(
        None, description="Dense retriever: text put before each passage; null: 'passage: ' for e5 models, nothing "
        "otherwise.")
    dense_batch_size: StrictInt = Field(64, ge=1, description="Dense retriever: texts per encoding batch.")
    bm25_stopwords: StrictStr | None = Field(
        "en", description="BM25: name of a bm25s stopword list, or null for none.")
    sample: _AtLeastOne | None = Field(
        None, description="A seeded random sample of N questions (after limit), drawn before retrieval; null: every "
        "question. The evaluation data of eval.path takes it from eval.sample.")
    sample_seed: StrictInt = Field(0, description="Seed of data.sample (eval.path's questions take eval.seed).")
    index_dir: StrictStr | None = Field(
        None, description="Where shared corpus stores and indexes are kept; null: $PURECOVER_INDEX_DIR, else "
        "~/.cache/purecover/index. Not part of any configuration hash.")
    index_verify: Literal["changed", "always"] = Field(
        "changed", description="How an index's files (corpus store, BM25, FAISS) are checked against the checksums "
        "recorded when they were built, each time they are opened: changed (a file whose size, mtime, inode or "
        "inode change time moved since its last check is read in full; the others cost a stat) or always (every "
        "file is read: seconds per GB). A file that differs is named and the index built again. Not part of any "
        "configuration hash.")
    index_path: StrictStr | None = Field(
        None, description="Dense retriever: a prebuilt FAISS index over data.corpus (one vector per passage, in file "
        "order), used as it is, e.g. FlashRAG's e5_Flat.index.")
    faiss_index: StrictStr = Field(
        "Flat", pattern=_NOT_BLANK, description="Dense retriever: the faiss.index_factory string of the index built "
        "over the corpus: Flat (exact), SQfp16, IVF65536,PQ64, HNSW32, ...")
    faiss_search_params: StrictStr | None = Field(
        None, description="Dense retriever: FAISS search parameters, e.g. nprobe=64 (IVF) or efSearch=128 (HNSW).")
    embedding_dtype: Literal["float32", "float16"] = Field(
        "float32", description="Dense retriever: how passage embeddings are stored (float16 halves the disk).")
    encode_shard_size: StrictInt = Field(
        65536, ge=1, description="Dense retriever: passages per embedding shard, the unit a killed encoding resumes "
        "from and that ranks share out.")
    qrels: StrictStr | None = Field(
        None, description="Coverage collections (data.dataset: coverage): the nugget qrels, qid nugget_id doc_id rel "
        "per line; a topic's gold passages are the documents judged relevant to one of its nuggets.")

    @model_validator(mode="after")
    def _check_index_path(self) -> DataConfig:
        if isinstance(self.path, list):  # a list of files: no entry twice; one entry is that file
            if not self.path:
                raise _SectionError("path", "is an empty list: give a file, or a list of files")
            for i, entry in enumerate(self.path):
                if not entry.strip():
                    raise _SectionError("path", f"entry {i} is blank")
                if entry in self.path[:i]:
                    raise _SectionError("path", f"lists {entry!r} twice (entries {self.path.index(entry)} and {i})")
            if len(self.path) == 1:
                self.path = self.path[0]
        if self.index_path is not None and self.retriever != "dense":
            raise _SectionError("index_path", "is a FAISS index: it needs data.retriever: dense")
        if self.index_path is not None and self.corpus in ("per_question", "shared"):
            raise _SectionError("index_path", "needs data.corpus to be the corpus file the index was built over")
        if self.dataset == "coverage" and self.qrels is None:
            raise _SectionError("qrels", "is needed with data.dataset: coverage (the collection's nugget qrels)")
        if self.dataset == "coverage" and self.corpus in ("per_question", "shared"):
            raise _SectionError("corpus", "must be the collection's corpus file with data.dataset: coverage (topics "
                                          "have no paragraphs of their own)")
        return self


@dataclass(config=_SECTION)
class LancerConfig:
    """`teacher.lancer`: the optional sub-question answerability signal (LANCER)."""

    enabled: StrictBool = Field(
        False, description="Have the teacher write sub-questions and rate every (document, sub-question) pair.")
    n_subquestions: StrictInt = Field(2, ge=1, description="Sub-questions the teacher writes per question.")
    beta: StrictFloat = Field(
        0.0, ge=0, le=1, description="Weight of the sub-question signal fused into e and W (0: ratings are stored "
        "but not used by the teacher's selection).")
    expected_rating: StrictBool = Field(
        False, description="Rate with the expected value over the 0..5 token probabilities instead of the first "
        "integer of the reply.")
    rating_template: StrictStr | None = Field(
        None, description="UTF-8 file replacing our rating prompt (`purecover prompts lancer_rating`), with the "
        "placeholders {question}, {subquestion} and {document}; checked when the recipe is validated.")
    subquestion_template: StrictStr | None = Field(
        None, description="UTF-8 file replacing our sub-question prompt (`purecover prompts lancer_subquestion`) "
        "and its system message, with the placeholders {question} and {n}; checked when the recipe is validated.")


@dataclass(config=_SECTION)
class TeacherConfig:
    """`teacher` section: the labelling LLM and the estimation/selection hyper-parameters."""

    model: StrictStr = Field("Qwen/Qwen2.5-32B-Instruct", description="The teacher LLM (Hub id or local directory).")
    backend: Literal["hf", "vllm"] = Field("hf", description="Generation backend of the reasoning replies.")
    steps: Literal["model", "oracle"] = Field(
        "model", description="Reasoning steps written by the teacher (model) or taken from the dataset's oracle "
        "steps (oracle).")
    estimator: Literal["attention", "embedding", "no_attention"] = Field(
        "attention", description="Source of e and W: attention (both from the teacher's attention), embedding (both "
        "from sentence-embedding cosines, a CPU proxy) or no_attention (the paper's 'w/o attention' ablation: W "
        "from cosines, e from attention).")
    embedding_model: StrictStr = Field(
        "sentence-transformers/all-MiniLM-L6-v2", description="Sentence-embedding model of the cosine signals "
        "(estimators embedding and no_attention).")
    layers: Literal["full_attention", "all"] | list[StrictInt] = Field(
        "full_attention", description="Attention layers averaged: full_attention (the layers whose attention spans "
        "the whole sequence, read from the model config: every layer of a model without sliding-window layers), "
        "all (sliding-window layers included, with a warning), or a list of layer indices (negative ones count "
        "from the end; a listed layer whose window does not reach from the reasoning steps back to the first "
        "document is an error).")
    calibrate: StrictBool = Field(
        True, description="Subtract the position bias measured on content-free documents (false: the 'w/o "
        "calibration' ablation).")
    cot_weighting: StrictBool = Field(
        True, description="Weigh each reasoning step by e (false: every step weighs 1, the 'w/o CoT weighting' "
        "ablation).")
    normalize: Literal["absolute", "zscore"] | None = Field(
        None, description="Scale of the scores the softmaxes see: absolute (the paper's) or zscore (unitless "
        "temperatures); null: the default of the signal.")
    tau1: StrictFloat | None = Field(
        None, gt=0, description="Temperature of e from attention (paper: 4e-5, absolute scale); null: the signal's "
        "default.")
    tau2: StrictFloat | None = Field(
        None, gt=0, description="Temperature of W from attention (paper: 4e-5, absolute scale); null: the signal's "
        "default.")
    lam: StrictFloat | None = Field(
        None, ge=0, description="Weight λ of the noise term of the selection objective (paper: 0.3); null: the "
        "signal's default.")
    budget: StrictInt = Field(5, ge=1, description="At most this many documents in a label.")
    tau_stop: StrictFloat = Field(
        0.0, description="The greedy selection stops when the best marginal gain is at most this (objective units).")
    min_select: StrictInt = Field(
        1, ge=0, description="At least this many documents in a label (a selection that stops earlier falls back).")
    max_new_tokens: StrictInt = Field(512, ge=1, description="Length limit of the teacher's reasoning reply, in tokens.")
    reply_prefix: StrictStr = Field(
        "", description="Text the teacher's reply is made to start with (appended to the prompt before generation "
        "and kept as the reply's start), e.g. '[Step 1]:' so a small model begins with a step marker; empty: none.")
    lancer: LancerConfig = Field(
        default_factory=LancerConfig, description="The optional sub-question answerability signal (LANCER).")
    max_steps: StrictInt = Field(
        5, ge=1, description="Reasoning steps kept from a reply (and the {max_steps} of the reasoning prompt).")
    embedding_tau: StrictFloat | None = Field(
        None, gt=0, description="Temperature of W from cosine similarities (a softmax over documents); null: the "
        "signal's default.")
    embedding_tau_e: StrictFloat | None = Field(
        None, gt=0, description="Temperature of e from cosine similarities (a softmax over steps); null: the "
        "signal's default.")
    calibration_procedure: Literal["fixed", "in_context"] = Field(
        "fixed", description="How the position bias is measured. fixed: one pass over content-free documents and a "
        "fixed dummy reasoning trace (the paper); in_context: per question and position, document k replaced by a "
        "generic paragraph, the steps' attention to it, averaged over calibration_questions questions (the "
        "authors' released code; questions x k1 capture passes, and as many teacher replies with steps: model).")
    calibration_questions: StrictInt = Field(
        100, ge=1, description="Questions of candidates.jsonl (the first ones) the in_context procedure averages "
        "over (the released code: 100).")
    calibration_lengths: Literal["candidates"] | _AtLeastOne = Field(
        "candidates", description="Token lengths of calibration's content-free documents: candidates (per position, "
        "the median length in candidates.jsonl) or one token count for every position.")
    fallback_warn: StrictFloat = Field(
        0.1, ge=0, le=1, description="The label stage warns when more than this share of questions falls back.")
    batch_size: StrictInt = Field(4, ge=1, description="Questions per generation and capture batch.")
    dtype: _DTYPES = Field("auto", description="Teacher weights dtype; auto: bfloat16 on GPU, float32 on CPU.")
    device: StrictStr = Field(
        "auto", description="auto, cpu, cuda or cuda:N (ignored when device_map is set).")
    device_map: StrictStr | None = Field(
        None, description="A transformers device_map, e.g. auto: spread a large teacher over the visible GPUs for "
        "the capture pass.")
    tensor_parallel_size: StrictInt = Field(1, ge=1, description="vLLM tensor parallelism.")
    trust_remote_code: StrictBool = Field(False, description="Allow the teacher's own modelling code from the Hub.")
    capture_chunk_mb: StrictInt = Field(
        256, ge=1, description="Working-memory bound of one attention row chunk, in MiB.")
    selection: Literal["greedy", "avg", "max"] = Field(
        "greedy", description="greedy: the coverage optimisation; avg / max: the paper's 'w/o optimisation' "
        "ablations, the top-budget documents by mean or max weighted attention.")
    objective: Literal["paper", "released_code"] = Field(
        "paper", description="The greedy's objective. paper: Eq. 8 of the paper (step-weighted coverage gain minus "
        "λ times the noise); released_code: the authors' released code ((1 − λ) × unweighted coverage gain − λ × "
        "noise relative to the best document of the strongest step; at most 2 × steps picks; e unused): "
        "docs/paper/released-code.md.")
    attention_layout: Literal["chat", "plain"] = Field(
        "chat", description="The text the attention is captured over (the calibration's too). chat: the reasoning "
        "prompt the steps answer, with its chat template; plain: the authors' released code's separate pass, "
        "[Doc i] lines, Query: and Answer: with no template or instructions (docs/paper/released-code.md).")
    prompt_file: StrictStr | None = Field(
        None, description="UTF-8 file holding the whole user message of the reasoning prompt, with {documents} "
        "(once) and {question} (and optionally {max_steps}); null: our wording of the paper's instructions "
        "(`purecover prompts reasoning`).")
    system_prompt: StrictStr | None = Field(
        None, description="System message of the reasoning prompt: null: ours, empty: none, else this text.")


@dataclass(config=_SECTION)
class LoraConfig:
    """`student.lora`: peft LoRA hyper-parameters (`enabled: false` trains all weights)."""

    enabled: StrictBool = Field(True, description="Train a LoRA adapter (false: train all weights).")
    r: StrictInt = Field(16, ge=1, description="LoRA rank.")
    alpha: StrictInt = Field(32, gt=0, description="LoRA scaling alpha.")
    dropout: StrictFloat = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA path.")
    target_modules: StrictStr | list[StrictStr] = Field(
        "all-linear", description="Modules that get an adapter: all-linear or a list of module names.")


# `student.launch` keys that become `accelerate launch --KEY VALUE` flags (the pipeline builds the command).
LAUNCH_FLAGS = ("num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port")


@dataclass(config=_SECTION)
class LaunchConfig:
    """`student.launch`: how `purecover pipeline` starts the train stage.

    `config_file` null trains in the pipeline's own process; an accelerate config YAML (e.g.
    ``configs/accelerate/deepspeed_zero2.yaml``) makes the pipeline run ``accelerate launch
    --config_file FILE [--num_processes N ...] -m purecover.train RECIPE`` as a subprocess.
    """

    config_file: StrictStr | None = Field(
        None, description="An accelerate config YAML: the train stage runs under `accelerate launch` with it; null: "
        "in the pipeline's own process.")
    num_processes: _AtLeastOne | None = Field(
        None, description="accelerate launch --num_processes (null: the config file's value).")
    num_machines: _AtLeastOne | None = Field(
        None, description="accelerate launch --num_machines (null: the config file's value).")
    machine_rank: StrictInt | None = Field(
        None, ge=0, description="accelerate launch --machine_rank (null: the config file's value).")
    main_process_ip: StrictStr | None = Field(
        None, description="accelerate launch --main_process_ip (null: the config file's value).")
    main_process_port: StrictInt | None = Field(
        None, ge=0, le=65535, description="accelerate launch --main_process_port (0: a free port; null: the config "
        "file's value).")
    extra_args: list[StrictStr] = Field(
        default_factory=list, description="Further `accelerate launch` arguments, appended as given.")

    @model_validator(mode="after")
    def _check_config_file(self) -> LaunchConfig:
        stray = [k for k in (*LAUNCH_FLAGS, "extra_args") if getattr(self, k)]
        if self.config_file is None and stray:
            raise _SectionError(stray[0], "is set but student.launch.config_file is null: set config_file to an "
                                "accelerate config (e.g. configs/accelerate/multi_gpu.yaml) or remove it")
        return self


@dataclass(config=_SECTION)
class StudentConfig:
    """`student` section: the distilled selector and its training."""

    model: StrictStr = Field("Qwen/Qwen2.5-7B-Instruct", description="Base model of the student selector.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings.")
    lm_weight: StrictFloat = Field(1.0, ge=0, description="Weight of L_LM in L = cl_weight · L_CL + lm_weight · L_LM.")
    m_exact: StrictInt = Field(
        5, ge=1, description="L_LM takes the minimum over every ordering of the label up to this size; larger labels "
        "are ordered by descending score.")
    max_passage_tokens: StrictInt = Field(
        192, ge=8, description="Each passage body is cut to this many tokens in the selector prompt.")
    target: Literal["set", "top_k"] = Field(
        "set", description="What the student learns to reply: set, the teacher's label (the paper); top_k, the "
        "target_k picks with the highest gains padded with unselected candidates in retrieval order (the authors' "
        "released code: docs/paper/released-code.md).")
    target_k: StrictInt = Field(5, ge=1, description="The size of a top_k target (the released code: 5).")
    candidate_shuffles: StrictInt = Field(
        1, ge=0, le=16, description="Copies of each training question whose candidates are shown in a seeded random "
        "order, the label indices moved with their passages (0: retrieval order only; calibration and test splits "
        "keep retrieval order).")
    reshuffle_each_epoch: StrictBool = Field(
        False, description="Draw new candidate orders for the training questions at every epoch (epoch 0 shows the "
        "candidate_shuffles orders above; epoch e their e-th fresh draw), instead of the same orders every epoch. "
        "Needs candidate_shuffles >= 1.")
    training: dict[str, JsonValue] = Field(
        default_factory=dict, description="transformers TrainingArguments fields (output_dir is always "
        "run_dir/checkpoints); checked against transformers when the recipe is validated.")
    identifiers: Literal["letters", "letters52"] = Field(
        "letters", description="Passage identifiers: letters (A-Z, 26 candidates) or letters52 (A-Z, a-z).")
    lm_reduction: Literal["token_mean", "sequence_sum"] = Field(
        "token_mean", description="L_LM per question: token_mean, the mean token NLL of the reply (its weight "
        "against L_CL does not grow with |S|), or sequence_sum, the reply's total NLL −log p(reply), the paper's "
        "formula.")
    cl_weight: StrictFloat = Field(1.0, ge=0, description="Weight of L_CL (0: the L_LM-only ablation).")
    reply_order: Literal["best", "target"] = Field(
        "best", description="The reply L_LM trains on: best, the ordering of the label with the lowest NLL (the "
        "paper's permutation-invariant loss), or target, the target in its own order (top_k: by descending gain; "
        "the authors' released code).")
    negatives: Literal["all", "sampled"] = Field(
        "all", description="L_CL's negatives per question: all, every candidate outside the target (the paper), or "
        "sampled, negative_sample drawn afresh each step from the negative_pool last candidates (the target "
        "first, the rest in retrieval order; the released code's BPR).")
    negative_sample: StrictInt = Field(5, ge=1, description="Negatives drawn per question and step when "
                                       "negatives is sampled (the released code: 5).")
    negative_pool: StrictInt = Field(10, ge=1, description="How many last candidates the sampled negatives come "
                                     "from (the released code: the bottom 10).")
    readout: Literal["identifier", "passage"] = Field(
        "identifier", description="Where the selector reads each candidate's score: identifier, the logit of its "
        "identifier at the first reply position (the paper; needs a model that binds content to letters, ~7B); "
        "passage, the logit of ' yes' at a marker after each passage, in the same one-pass prompt (our extension, "
        "for small students: docs/guides/student.md#readouts). The vLLM selector backend reads identifier only.")
    passage_score: Literal["token", "head"] = Field(
        "token", description="How the passage readout scores a passage at its marker: token, the logit of ' yes'; "
        "head, a linear head on the hidden state there, started as that token's row of the output projection and "
        "trained with the adapter (score_head.safetensors beside it). Needs readout: passage.")
    bce_weight: StrictFloat = Field(
        0.0, ge=0, description="Weight of a per-passage binary cross-entropy on the same scores (selected: 1, "
        "others: 0), added to L; it puts the scores on an absolute scale. 0: off (the paper).")
    freeze_embeddings: StrictBool = Field(
        False, description="Full fine-tuning (lora.enabled false) without updating the token embedding and the "
        "output projection, tied or not.")
    eval_fraction: StrictFloat = Field(
        0.1, ge=0, lt=1, description="Held-out share of the labelled questions, never trained on (calibration and "
        "test splits); a hash of the qid decides.")
    calibration_share: StrictFloat = Field(
        0.5, ge=0, le=1, description="Share of the held-out questions in the calibration split (tau3, eval loss); "
        "the rest is the test split.")
    k_max: _AtLeastOne | None = Field(
        None, description="At most this many passages kept at inference (null: teacher.budget).")
    min_select: StrictInt = Field(1, ge=0, description="At least this many passages kept at inference.")
    dtype: _DTYPES = Field("auto", description="Weights dtype when loading the student.")
    trust_remote_code: StrictBool = Field(False, description="Allow the base model's own modelling code from the Hub.")
    launch: LaunchConfig = Field(
        default_factory=LaunchConfig, description="How `purecover pipeline` starts the train stage.")
    prompt_file: StrictStr | None = Field(
        None, description="UTF-8 file replacing the selector's system message and/or instructions: [[system]] and "
        "[[instructions]] sections as in `purecover prompts selector`; the export records the wording, which the "
        "selector then uses. Checked when the recipe is validated. null: our wording.")

    @model_validator(mode="after")
    def _check_weights(self) -> StudentConfig:
        if self.cl_weight == 0 and self.lm_weight == 0 and self.bce_weight == 0:
            raise _SectionError("cl_weight", "cl_weight, lm_weight and bce_weight cannot all be 0")
        if self.passage_score == "head" and self.readout != "passage":
            raise _SectionError("passage_score", "head scores the passage readout's markers: needs readout: passage")
        if self.reshuffle_each_epoch and self.candidate_shuffles < 1:
            raise _SectionError("reshuffle_each_epoch", "needs candidate_shuffles >= 1 (0 shows the retrieval order)")
        return self


@dataclass(config=_SECTION)
class ExportConfig:
    """`export` section: how the trained selector is saved."""

    merge: StrictBool = Field(
        True, description="Merge the LoRA adapter into the base model (false: save the adapter).")
    license: StrictStr | None = Field(
        None, description="Licence of the model card (null: the base model's, when its card says).")


@dataclass(config=_SECTION)
class EvalConfig:
    """`eval` section: end-to-end QA evaluation."""

    generator: StrictStr = Field("Qwen/Qwen2.5-7B-Instruct", description="The LLM that answers from the selected "
                                 "passages.")
    backend: Literal["hf", "vllm"] = Field("hf", description="Generation backend of the answers.")
    methods: list[StrictStr] = Field(
        default_factory=lambda: ["retrieval", "teacher", "student"],
        description="Selection methods compared: method names (retrieval, cross_encoder, icr, icr_fused, mmr, xquad, "
        "ia_select, "
        "lancer_*, gold_support, teacher, student, none), teacher:DIR / student:DIR for another run directory's "
        "labels / selections, selections:PATH=name for an external reranker's file; checked when the recipe is "
        "validated.")
    budgets: list[_AtLeastOne] = Field(
        default_factory=lambda: [1, 3, 5, 10, 15], description="Passage budgets K: each method keeps at most K "
        "passages.")
    path: StrictStr | None = Field(
        None, description="Evaluation questions from this file or Hub dataset (a test set); null: the run "
        "directory's own questions.")
    split: StrictStr = Field("dev", description="Split of eval.path (Hub datasets).")
    hub_config: StrictStr | None = Field(
        None, description="Hub configuration of eval.path; null: data.hub_config when eval.path is data.path, "
        "else the repository's default.")
    limit: _AtLeastOne | None = Field(None, description="Only the first N evaluation questions (null: all).")
    sample: _AtLeastOne | None = Field(
        None, description="A seeded random sample of N evaluation questions (the paper: 500); null: every question.")
    seed: StrictInt = Field(0, description="Seed of eval.sample.")
    questions: Literal["heldout", "all"] = Field(
        "heldout", description="Without eval.path: heldout, the student's test split (used neither for training nor "
        "for tau3), or all questions.")
    table_budget: StrictInt = Field(
        5, description="The budget K of report.md's main table (one of eval.budgets).")
    max_new_tokens: StrictInt = Field(32, ge=1, description="Length limit of a generated answer, in tokens.")
    batch_size: StrictInt = Field(8, ge=1, description="Prompts per generation batch (HF backend).")
    dtype: _DTYPES = Field("auto", description="Generator weights dtype; auto: bfloat16 on GPU, float32 on CPU.")
    device: StrictStr = Field("auto", description="auto, cpu, cuda or cuda:N.")
    tensor_parallel_size: StrictInt = Field(1, ge=1, description="vLLM tensor parallelism.")
    trust_remote_code: StrictBool = Field(False, description="Allow the generator's own modelling code from the Hub.")
    embedding_model: StrictStr = Field(
        "sentence-transformers/all-MiniLM-L6-v2", description="Sentence-embedding model of mmr, xquad and ia_select.")
    cross_encoder: StrictStr = Field("BAAI/bge-reranker-large", description="Model of the cross_encoder method.")
    icr_model: StrictStr | None = Field(
        None, description="Causal LM of the icr and icr_fused methods (in-context reranking, Chen et al., ICLR 2025: "
        "the attention the question pays each passage, minus that of the content-free query N/A); null: "
        "student.model. Loaded with dtype auto on eval.device, never with remote code.")
    icr_layers: Literal["all"] | list[StrictInt] = Field(
        "all", description="Layers whose calibrated ICR attention is summed: all, or a non-empty list of layer "
        "indices (negative ones count from the end; out of range is an error when the model is loaded).")
    icr_fusion_weight: StrictFloat = Field(
        1.0, ge=0, description="Weight w of the retrieval rank in icr_fused: z(icr) + w * z(-rank), z standardised "
        "over a question's candidates (0: the icr order).")
    icr_max_passage_tokens: StrictInt = Field(
        192, ge=1, description="Each passage body is cut to this many tokens in the ICR prompt.")
    subtopics: Literal["steps", "subquestions"] = Field(
        "steps", description="Subtopics of xquad and ia_select: the teacher's reasoning steps or LANCER's "
        "sub-questions.")
    prompt_file: StrictStr | None = Field(
        None, description="UTF-8 file replacing parts of the generator's answer prompt: [[part]] sections as in "
        "`purecover prompts rag_answer` (the parts it leaves out keep our wording), each with its placeholders; "
        "checked when the recipe is validated. null: our wording.")
    judgments: StrictStr | None = Field(
        None, description="Coverage collections (data.dataset: coverage): CRUX judge lines {id, docid, ratings} with "
        "a 0-5 rating per sub-question; the report adds Cov@K, the share of sub-questions some selected passage "
        "rates 3 or more (an unjudged passage rates 0). Checked when the recipe is validated.")

    @model_validator(mode="after")
    def _check_icr_layers(self) -> EvalConfig:
        if isinstance(self.icr_layers, list) and not self.icr_layers:
            raise _SectionError("icr_layers", "must be all or a non-empty list of layer indices")
        if isinstance(self.icr_layers, list) and len(set(self.icr_layers)) != len(self.icr_layers):
            raise _SectionError("icr_layers", f"lists a layer twice: {self.icr_layers}")
        return self


@dataclass(config=_SECTION)
class TrackingConfig:
    """`tracking`: experiment tracking of the label, train and evaluate summaries (never hashed)."""

    report_to: Literal["none", "wandb"] = Field(
        "none", description="wandb: one wandb run per label / evaluate invocation that does work, and the Trainer's "
        "own for train; none: wandb is not imported.")
    project: StrictStr = Field("purecover", description="wandb project.")
    entity: StrictStr | None = Field(None, description="wandb entity, a team or user (null: your default).")
    run_name: StrictStr | None = Field(None, description="Name of the tracked runs (null: the run directory's name).")


@dataclass(config=_SECTION)
class Recipe:
    """A whole run: every stage reads from and writes to `run_dir`."""

    run_dir: StrictStr = Field(
        "runs/demo", pattern=_NOT_BLANK, description="The run directory every stage reads from and writes to.")
    seed: StrictInt = Field(
        0, ge=0, le=2**32 - 1, description="Seed of the student's train/calibration/test split, of model "
        "initialisation and generation sampling, and of the evaluation statistics (numpy and torch take 32-bit "
        "unsigned seeds).")
    data: DataConfig = Field(default_factory=DataConfig, description="Questions, corpus and candidate retrieval.")
    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="The labelling teacher.")
    student: StudentConfig = Field(default_factory=StudentConfig, description="The distilled selector and its "
                                   "training.")
    export: ExportConfig = Field(default_factory=ExportConfig, description="Saving the trained selector.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="End-to-end QA evaluation.")
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig, description="Experiment tracking (never part of a configuration hash).")

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir)


# --------------------------------------------------------------------------- YAML


class _RecipeLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: `1e-5` is a float, and only true/false are booleans
    (YAML 1.1 would turn `eval_strategy: no` into False)."""


_RecipeLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


_FLOAT_RE = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_RecipeLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _check_duplicate_keys(node: yaml.Node | None, source: str, lines: bool = True) -> None:
    """Raise ConfigError for a key given twice in one mapping, at any depth.

    PyYAML keeps the last value silently; here the message names the file, the dotted key and the
    line of each occurrence. Merge keys (``<<: *base``) may still be overridden by an explicit key.
    """
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(node, "")] if node is not None else []
    while stack:
        current, path = stack.pop()
        if id(current) in seen_nodes:  # an alias of a node already checked
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, value_node in current.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    stack.append((value_node, path))
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                dotted = f"{path}.{key}" if path else str(key)
                line = key_node.start_mark.line + 1
                if key is not None:
                    if key in first_line:
                        where = f" at line {first_line[key]} and line {line}" if lines else " given twice"
                        raise ConfigError(f"{source}: duplicate key {dotted!r}{where}; YAML would silently keep "
                                          "only the second value: remove one of them")
                    first_line[key] = line
                stack.append((value_node, dotted))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(current.value))


# A recipe is a few hundred values; aliases that repeat aliases (a "billion laughs" document) would make the
# loaded recipe exponentially large for everything that walks it: refused by counting values, aliases expanded.
MAX_RECIPE_VALUES = 100_000
MAX_RECIPE_BYTES = 1_000_000
MAX_BASE_DEPTH = 32


def _check_expanded_size(node: yaml.Node | None, source: str) -> None:
    """ConfigError when the document, with every alias expanded, holds more than `MAX_RECIPE_VALUES` values
    (computed on the node graph, each node once, so the check itself stays linear)."""
    if node is None:
        return
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, ready = stack.pop()
        if id(current) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(current, yaml.MappingNode):
            children = [n for pair in current.value for n in pair]
        elif isinstance(current, yaml.SequenceNode):
            children = list(current.value)
        if not ready:
            stack.append((current, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(current)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_RECIPE_VALUES + 1)
    if sizes[id(node)] > MAX_RECIPE_VALUES:
        raise ConfigError(f"{source}: the YAML expands to more than {MAX_RECIPE_VALUES:,} values (anchors and "
                          "aliases that repeat each other); a recipe holds a few hundred: write the values out")


def _yaml_load(text: str, source: str, lines: bool = True) -> Any:
    loader = None
    try:
        loader = _RecipeLoader(text)  # the reader refuses control characters here already
        node = loader.get_single_node()
        _check_duplicate_keys(node, source, lines)
        _check_expanded_size(node, source)
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _read_yaml_text(path: Path, shown: str, kind: str) -> str:
    """The text of recipe file `path` (UTF-8, at most `MAX_RECIPE_BYTES`); a ConfigError naming it otherwise."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECIPE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read {kind} ({exc.strerror or exc})") from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise ConfigError(f"{shown}: {kind} is larger than {MAX_RECIPE_BYTES:,} bytes; is it really a recipe?")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: {kind} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def parse_override(item: str) -> tuple[str, Any]:
    """Split ``section.key=value`` into the dotted key and its YAML-typed value."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected section.key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {item!r}: empty key")
    value = _yaml_load(raw, f"override {key}", lines=False) if raw.strip() else None
    return key, value


def _check_section_override(item: str, key: str, value: Any) -> None:
    """``--set data=null`` or ``--set teacher=3`` would replace a whole section: refuse it by name."""
    section = _schema_at(key.split("."))
    if section is None or "properties" not in section or isinstance(value, dict):
        return
    shown = "null" if value is None else repr(value)
    raise ConfigError(
        f"override {item!r}: {key}: expected a mapping, got {shown}; {key} is a whole section, not a single "
        f"value: set one of its keys instead ({key}.KEY=VALUE; keys: {', '.join(section['properties'])})")


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    node[parts[-1]] = value


# --------------------------------------------------------------------------- validation errors


@functools.cache
def _adapter() -> TypeAdapter[Recipe]:
    return TypeAdapter(Recipe)


def recipe_json_schema() -> dict[str, JsonValue]:
    """The JSON schema of a recipe: every section, key, type, range, default and description (a copy)."""
    return copy.deepcopy(_json_schema())


@functools.cache
def _json_schema() -> dict[str, JsonValue]:
    return _adapter().json_schema()


def _resolve(node: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """`node` with its ``$ref`` followed (a section's schema)."""
    defs = _json_schema().get("$defs", {})
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _schema_at(parts: list[str]) -> dict[str, JsonValue] | None:
    """The schema of the key `parts` names (``["teacher", "lancer"]``), or None when there is no such key."""
    node = _resolve(_json_schema())
    for part in parts:
        props = node.get("properties")
        if props is None or part not in props:
            return None
        node = _resolve(props[part])
    return node


_NAMES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "null",
          "object": "mapping", "array": "list"}
_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
          "null": "null", "object": "a mapping", "array": "a list"}
_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")
# pydantic error types of a value of the right type outside its field's range.
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_pattern_mismatch"}


def _members(node: dict[str, JsonValue]) -> list[dict[str, JsonValue]]:
    return [_resolve(m) for m in node["anyOf"]] if "anyOf" in node else [node]


def _literals(node: dict[str, JsonValue]) -> list[JsonValue]:
    """The values of the Literal alternatives of `node`."""
    out: list[JsonValue] = []
    for m in _members(node):
        out += [m["const"]] if "const" in m else list(m.get("enum", ()))
    return out


def _type_name(node: dict[str, JsonValue]) -> str:
    """Short name of a type, as in ``int | null`` or ``'all' | list of int``."""
    if "anyOf" in node:
        return " | ".join(_type_name(m) for m in _members(node))
    if "const" in node or "enum" in node:
        return " | ".join(repr(v) for v in _literals(node))
    if node.get("type") == "array":
        return f"list of {_type_name(_resolve(node.get('items', {})))}"
    if "properties" in node:
        return "mapping"
    return _NAMES.get(node.get("type", ""), "value")


def _expected(node: dict[str, JsonValue]) -> str:
    """What a key accepts, in words: ``an integer``, ``list of str``, ``float | null``."""
    if "anyOf" in node or node.get("type") == "array":
        return _type_name(node)
    if "properties" in node:
        return "a mapping"
    return _WORDS.get(node.get("type", ""), "a valid value")


def _bounds(node: dict[str, JsonValue]) -> str | None:
    """The range a number must lie in, as ``>= 1``, ``> 0`` or ``in [0, 1)``; None without one."""
    low = ("[", node["minimum"]) if "minimum" in node else ("(", node["exclusiveMinimum"]) \
        if "exclusiveMinimum" in node else None
    high = ("]", node["maximum"]) if "maximum" in node else (")", node["exclusiveMaximum"]) \
        if "exclusiveMaximum" in node else None
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {low[1]}"
    if high:
        return f"{'<=' if high[0] == ']' else '<'} {high[1]}"
    return None


def _range_text(node: dict[str, JsonValue]) -> str:
    """What a key's range allows, as in ``>= 1 or null`` or ``'candidates' or an integer >= 1``."""
    members = _members(node)
    has_literal = any("const" in m or "enum" in m for m in members)
    parts: list[str] = []
    for m in members:
        word = _WORDS.get(m.get("type", ""), "a value")
        bounds = _bounds(m)
        if "const" in m or "enum" in m:
            parts += [repr(v) for v in _literals(m)]
        elif m.get("pattern") == _NOT_BLANK:
            parts.append("a non-blank string")
        elif bounds is None or m.get("type") == "null":
            parts.append(word)
        else:
            parts.append(f"{word} {bounds}" if has_literal else bounds)
    return " or ".join(parts)


def _shown(value: Any, node: dict[str, JsonValue]) -> str:
    """`value` as a message shows it: an integer given for a number is the float it becomes."""
    types = {m.get("type") for m in _members(node)}
    if isinstance(value, int) and not isinstance(value, bool) and "number" in types and "integer" not in types:
        value = float(value)
    return repr(value)


_MISSING = object()


def _child(value: Any, item: str | int) -> Any:
    if isinstance(value, dict):
        return value.get(item, _MISSING)
    if isinstance(value, list) and isinstance(item, int) and -len(value) <= item < len(value):
        return value[item]
    return getattr(value, str(item), _MISSING)


def _error_message(exc: ValidationError, tree: Any) -> str:
    """Every problem of `exc`, raised validating `tree`: one line naming the dotted key when there is one, else
    their count and a line each (two typos are reported in one run, not one per run). A key's several errors
    (a union's alternatives) give one line; misspelt keys come first, as they explain the most."""
    errors = exc.errors(include_url=False)
    ordered = [e for e in errors if e["type"] in _UNKNOWN_KEY] + [e for e in errors if e["type"] not in _UNKNOWN_KEY]
    lines: dict[str, str] = {}
    for error in ordered:
        key, message = _error_line(error, errors, tree)
        lines.setdefault(key, message)
    if len(lines) == 1:
        return next(iter(lines.values()))
    return f"{len(lines)} problems:\n" + "\n".join(f"  - {m}" for m in lines.values())


def _error_line(first: Any, errors: list[Any], tree: Any) -> tuple[str, str]:
    """(the dotted key error `first` of `errors` is about, its one-line message)."""
    loc = tuple(first["loc"])
    node, value, dotted, used = _resolve(_json_schema()), tree, "", 0
    for item in loc:  # follow the location through sections and list items; stop at a union's branch name
        if isinstance(item, str) and item in node.get("properties", {}):
            node, dotted = _resolve(node["properties"][item]), f"{dotted}.{item}" if dotted else item
        elif isinstance(item, int) and node.get("type") == "array":
            node, dotted = _resolve(node.get("items", {})), f"{dotted}[{item}]"
        else:
            break
        value, used = _child(value, item), used + 1
    if used == len(loc) or value is _MISSING:
        value = first.get("input")
    kind, label, prefix = first["type"], dotted or "recipe", f"{dotted}." if dotted else ""
    if kind in _UNKNOWN_KEY and used == len(loc) - 1:
        key, names = str(loc[-1]), list(node.get("properties", {}))
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        return prefix + key, f"unknown key {prefix + key!r}{hint} (valid keys of {label}: {', '.join(names)})"
    error = (first.get("ctx") or {}).get("error")
    if isinstance(error, _SectionError):
        return f"{prefix}{error.key}", f"{prefix}{error.key}: {error}"
    if "properties" in node:  # a section given as something else than a mapping
        return label, f"{label}: expected a mapping, got {value!r}"
    if loc[used + 1:used + 2] == ("[key]",):
        return label, f"{label}: key {loc[used]!r} is not a string"
    literals = _literals(node)  # a Literal key, or a union with Literal alternatives: name the close one
    close = difflib.get_close_matches(value, [str(v) for v in literals], n=1) if isinstance(value, str) else []
    if close or (literals and "anyOf" not in node):
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return label, f"{label}: {value!r} is not one of {', '.join(map(repr, literals))}{hint}"
    field_errors = {e["type"] for e in errors if tuple(e["loc"][:used]) == loc[:used]}
    if field_errors & _RANGE_ERRORS:
        return label, f"{label}: must be {_range_text(node)}, got {_shown(value, node)}"
    if kind == "value_error":
        return label, f"{label}: {first['msg'].removeprefix('Value error, ')}"
    return label, f"{label}: expected {_expected(node)}, got {value!r}"


# --------------------------------------------------------------------------- public API


def recipe_from_dict(tree: dict[str, Any] | None, source: str = "recipe") -> Recipe:
    """Validate a recipe mapping and build the `Recipe`; `source` prefixes error messages."""
    tree = tree or {}
    try:
        return _adapter().validate_python(tree)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_error_message(exc, tree)}") from None


def _merge(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper` merged over `lower` (neither is changed): mappings merge key by key, any other value of
    `upper` (a list, a scalar, null) replaces `lower`'s."""
    out = dict(lower)
    for key, value in upper.items():
        below = out.get(key)
        out[key] = _merge(below, value) if isinstance(value, dict) and isinstance(below, dict) else value
    return out


def _read_recipe_file(path: Path, shown: str, base_of: str | None = None) -> dict[str, Any]:
    """The YAML mapping of one recipe file (its ``base`` key not followed); `shown` names it in messages,
    `base_of` is the recipe that names it as a base (None for the recipe itself)."""
    if base_of is not None:
        kind, where = "a base recipe", f" (a base of {base_of})"
    else:
        kind, where = "a recipe", ""
    loaded = _yaml_load(_read_yaml_text(path, shown, kind), shown)
    if loaded is None:
        if base_of is not None:
            raise ConfigError(f"base recipe {shown}{where} is empty (no keys, only comments or null): write keys "
                              "into it or remove it from the base list")
        raise ConfigError(f"recipe {shown} is empty (no keys, only comments or null): write the recipe's "
                          "sections into it, or leave out the recipe file to start from the defaults")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{shown}: {kind} must be a YAML mapping, got {type(loaded).__name__}{where}")
    return loaded


def _base_entries(value: Any, shown: str) -> list[tuple[str, str]]:
    """The ``base`` value of recipe `shown` as (key, path) pairs: ``("base", p)`` or ``("base[i]", p)``."""
    if value is None:
        return []
    if isinstance(value, str) and value.strip():
        return [("base", value)]
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [(f"base[{i}]", v) for i, v in enumerate(value)]
    raise ConfigError(f"{shown}: base: expected a path or a non-empty list of paths (relative to the recipe's "
                      f"folder), got {value!r}")


def _load_tree(path: Path, shown: str, chain: tuple[tuple[Path, str], ...] = (),
               base_of: str | None = None) -> dict[str, Any]:
    """The mapping of recipe `path` with its bases merged underneath (recursively), without the ``base`` key.

    `chain` holds the recipes (resolved path, shown name) that led here, to refuse a cycle by naming it.
    """
    key = path.resolve()
    if len(chain) >= MAX_BASE_DEPTH:
        raise ConfigError(f"{chain[0][1]}: base recipes nest deeper than {MAX_BASE_DEPTH} ({chain[0][1]} -> "
                          f"{chain[1][1]} -> ... -> {shown}); fold some of them into one")
    for i, (seen, _) in enumerate(chain):
        if seen == key:
            cycle = " -> ".join([name for _, name in chain[i:]] + [shown])
            raise ConfigError(f"{chain[0][1]}: base recipes form a cycle: {cycle}")
    tree = _read_recipe_file(path, shown, base_of)
    entries = _base_entries(tree.pop("base", None), shown)
    merged: dict[str, Any] = {}
    for dotted, name in entries:
        base_path = path.parent / name
        base_shown = os.path.normpath(Path(shown).parent / name)
        if not base_path.is_file():
            raise ConfigError(f"{shown}: {dotted}: base recipe {name!r} does not exist (looked for {base_shown}; "
                              "a base is relative to the folder of the recipe that names it)")
        merged = _merge(merged, _load_tree(base_path, base_shown, (*chain, (key, shown)), shown))
    return _merge(merged, tree) if entries else tree


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (or start from defaults when `path` is None) and apply overrides.

    A recipe may start with a ``base`` key: a path, or a list of paths, to other recipes, relative to
    the folder of the file that names them. Each base is loaded the same way (its own bases first)
    and the recipe is merged over it: mappings (sections, ``student.training``, ...) merge key by key,
    and any other value the recipe gives (a list, a scalar, null) replaces the base's. In a list,
    later bases override earlier ones, and the recipe overrides them all. A cycle of bases, a base file
    that does not exist and a base that is not a mapping are `ConfigError` s naming the recipe (and the
    cycle, or the ``base`` entry). The ``base`` key itself is not part of the resolved recipe.
    ``section.key=value`` overrides apply after the merge, then the whole recipe is validated.
    """
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"recipe {str(p)!r} does not exist")
        source = str(p)
        tree = _load_tree(p, source)
    for item in overrides:
        key, value = parse_override(item)
        _check_section_override(item, key, value)
        _set_dotted(tree, key, value)
    if overrides:
        source += " + overrides"
    return recipe_from_dict(tree, source)


def recipe_to_dict(recipe: Recipe) -> dict[str, JsonValue]:
    """Plain-data form of a recipe (what is written next to every stage's output), keys in declaration order."""
    return dataclasses.asdict(recipe)


def section_fingerprint(recipe: Recipe, *keys: str, exclude: tuple[str, ...] = ()) -> str:
    """Stable hash of the named top-level recipe keys (e.g. "data", "seed"): 16 hex chars. `exclude`:
    dotted keys left out (e.g. ``student.launch.main_process_port``)."""
    tree = recipe_to_dict(recipe)
    for dotted in exclude:
        *parents, leaf = dotted.split(".")
        node: Any = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    blob = json.dumps({k: tree[k] for k in keys}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dump_recipe_yaml(recipe: Recipe) -> str:
    """The resolved recipe as YAML text."""
    return yaml.safe_dump(recipe_to_dict(recipe), sort_keys=False, allow_unicode=True)
