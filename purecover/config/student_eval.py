"""The `student` (with `student.lora` and `student.launch`), `export` and `eval` sections of a recipe: the
distilled selector, its training and launch, its export, and the end-to-end evaluation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator
from pydantic.dataclasses import dataclass

from .base import _DTYPES, _SECTION, _AtLeastOne, _SectionError
from .student_settings import StudentSettings


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
class StudentConfig(StudentSettings):
    """`student` section: the distilled selector and its training (the loss and readout settings are
    `StudentSettings`, declared once in `purecover.config.student_settings`)."""

    model: StrictStr = Field("Qwen/Qwen2.5-7B-Instruct", description="Base model of the student selector.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapter settings.")
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
    def _check_shuffles(self) -> StudentConfig:
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
        description="Selection methods compared: method names (retrieval, cross_encoder, cross_encoder_ft, icr, "
        "icr_fused, mmr, xquad, "
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
    cross_encoder_ft_base: StrictStr = Field(
        "sentence-transformers/all-MiniLM-L6-v2", description="Model the cross_encoder_ft method fine-tunes on the "
        "run's teacher labels of the student's training questions (its threshold chosen on the calibration "
        "questions); all-MiniLM-L6-v2 is bundled (no download).")
    cross_encoder_ft_epochs: StrictInt = Field(1, ge=1, description="Training epochs of cross_encoder_ft.")
    cross_encoder_ft_learning_rate: StrictFloat = Field(
        5.0e-5, gt=0, description="Peak learning rate of cross_encoder_ft (linear warm-up over 10% of the steps).")
    cross_encoder_ft_bf16: StrictBool = Field(
        False, description="Fine-tune cross_encoder_ft under bfloat16 autocast (float32 weights): faster on a CPU "
        "with AVX512-BF16 or AMX (the HotpotQA headline run's fine-tuning: 572 s against 805 s in float32), slower "
        "without them (a warning says so); its scores at selection stay float32.")
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
    report_note: StrictStr | None = Field(
        None, description="A sentence report.md shows under its title, e.g. why this generator was chosen (null: "
        "none).")
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

