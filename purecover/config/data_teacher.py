"""The `data` and `teacher` sections of a recipe (with `teacher.lancer`): what the questions, the corpus and
the candidates are, and how the teacher labels them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator
from pydantic.dataclasses import dataclass

from .base import _DTYPES, _NOT_BLANK, _SECTION, _AtLeastOne, _SectionError


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
            first: dict[str, int] = {}  # entry -> its first index (a dict: linear in the list's length)
            for i, entry in enumerate(self.path):
                if not entry.strip():
                    raise _SectionError("path", f"entry {i} is blank")
                if entry in first:
                    raise _SectionError("path", f"lists {entry!r} twice (entries {first[entry]} and {i})")
                first[entry] = i
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
    steps: Literal["model", "oracle", "auto"] = Field(
        "model", description="Reasoning steps written by the teacher (model), taken from the dataset's oracle "
        "steps (oracle), or per question: its oracle steps where it has them, the teacher's own reasoning where it "
        "has none (auto).")
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
    repeated_steps: Literal["keep", "drop"] = Field(
        "keep", description="A reasoning step that repeats an earlier one of its reply (case, spacing and final "
        "punctuation aside; small teachers loop): keep (every copy counts in the coverage objective) or drop "
        "(weighted 0, noted in the label's reason). Re-solvable by `purecover tune` from stored scores.")
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
    format_example: StrictBool = Field(
        False, description="Add our worked example of the reply's format (`purecover prompts reasoning_example`) at "
        "the end of the reasoning prompt: small teachers that write their own steps (steps: model) keep to the "
        "format more often.")
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

