"""Recipe configuration: one dataclass per stage, loaded from YAML with dotted overrides.

A recipe is a YAML mapping with the sections of DESIGN.md §8. `load_recipe(path, overrides)`
reads it, applies `section.key=value` overrides (values parsed as YAML), and validates every
key and type. Unknown keys raise `ConfigError` naming the key and the closest valid one.
Checks that span sections or need another library (`student.training` against transformers,
`data.k1` against the identifier scheme) are `purecover.validate.validate_recipe`'s.

Paths in a recipe (``run_dir``, ``data.path``, ...) are relative to the working directory.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

__all__ = [
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
    "load_recipe",
    "parse_override",
    "recipe_from_dict",
    "recipe_to_dict",
    "section_fingerprint",
]


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the key and what is expected."""


@dataclass
class DataConfig:
    """`data` section: which questions, which corpus, which retriever, how many candidates."""

    dataset: Literal["hotpotqa", "2wiki", "musique", "strategyqa", "flashrag"] = "hotpotqa"
    path: str | None = None  # local file, "demo" (bundled demo set) or a Hub dataset name
    split: str = "dev"
    limit: int | None = None  # first N questions
    corpus: str = "shared"  # per_question | shared | path to a corpus JSONL
    retriever: Literal["bm25", "dense"] = "bm25"
    dense_model: str = "intfloat/e5-base-v2"
    k1: int = 20
    # Additions beyond DESIGN §8 (documented in README):
    hub_config: str | None = None  # Hub dataset configuration name (e.g. FlashRAG's "hotpotqa")
    aliases: str | None = None  # 2Wiki id_aliases.json, adds answer aliases
    skip_invalid: bool = False  # count and report malformed records instead of failing
    query_prefix: str | None = None  # dense: None = "query: " for e5 models, else ""
    passage_prefix: str | None = None  # dense: None = "passage: " for e5 models, else ""
    dense_batch_size: int = 64
    bm25_stopwords: str | None = "en"  # bm25s stopword list name, or null for none
    sample: int | None = None  # a seeded random sample of N questions (after limit), chosen before retrieval
    sample_seed: int = 0  # seed of `sample` (the evaluation questions of eval.path: eval.seed)
    # Corpora and indexes at scale (README "Corpora at Wikipedia scale"):
    index_dir: str | None = None  # shared corpus stores and indexes; null = $PURECOVER_INDEX_DIR or ~/.cache/purecover/index
    index_path: str | None = None  # dense: a prebuilt FAISS index over data.corpus, used as it is (e.g. FlashRAG's)
    faiss_index: str = "Flat"  # dense: faiss.index_factory string (Flat, IVF65536,PQ64, HNSW32, ...)
    faiss_search_params: str | None = None  # dense: e.g. "nprobe=64" or "efSearch=128"
    embedding_dtype: Literal["float32", "float16"] = "float32"  # dense: how passage embeddings are stored
    encode_shard_size: int = 65536  # dense: passages per embedding shard (the unit of resuming and of ranks)


@dataclass
class LancerConfig:
    """`teacher.lancer`: optional sub-question answerability signal (DESIGN §3.6)."""

    enabled: bool = False
    n_subquestions: int = 2
    beta: float = 0.0
    expected_rating: bool = False
    # Additions beyond DESIGN §8: UTF-8 prompt files replacing our wording (checked when the recipe loads).
    rating_template: str | None = None  # placeholders {question}, {subquestion}, {document}
    subquestion_template: str | None = None  # placeholders {question}, {n}


@dataclass
class TeacherConfig:
    """`teacher` section: the labelling LLM and the estimation/selection hyper-parameters."""

    model: str = "Qwen/Qwen2.5-32B-Instruct"
    backend: Literal["hf", "vllm"] = "hf"
    steps: Literal["model", "oracle"] = "model"
    # attention: e and W from attention; embedding: both from sentence-embedding cosines (CPU proxy);
    # no_attention: the paper's "w/o attention" ablation, W from cosines, e from attention.
    estimator: Literal["attention", "embedding", "no_attention"] = "attention"
    embedding_model: str = "sentence-transformers/all-MiniLM-L6-v2"
    layers: Literal["all"] | list[int] = "all"
    calibrate: bool = True
    cot_weighting: bool = True
    # Temperatures, λ and the score scale: null = the default of the signal they act on
    # (purecover/teacher/defaults.py; the README's table says where each value comes from).
    normalize: Literal["absolute", "zscore"] | None = None  # scale the softmaxes see (see README)
    tau1: float | None = None  # e from attention (paper: 4e-5, absolute)
    tau2: float | None = None  # W from attention (paper: 4e-5, absolute)
    lam: float | None = None  # noise weight λ (paper: 0.3)
    budget: int = 5
    tau_stop: float = 0.0
    min_select: int = 1
    max_new_tokens: int = 512
    lancer: LancerConfig = field(default_factory=LancerConfig)
    # Additions beyond DESIGN §8 (documented in README):
    max_steps: int = 5  # steps kept from a reply
    embedding_tau: float | None = None  # W from cosine similarities (softmax over documents)
    embedding_tau_e: float | None = None  # e from cosine similarities (softmax over steps)
    calibration_lengths: Literal["candidates"] | int = "candidates"  # dummy document token lengths
    fallback_warn: float = 0.1  # warn when more than this share of questions falls back
    batch_size: int = 4  # questions per generation / capture batch
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"  # auto | cpu | cuda | cuda:N (ignored with device_map)
    device_map: str | None = None  # e.g. "auto": spread a large teacher over the visible GPUs for capture
    tensor_parallel_size: int = 1  # vLLM
    trust_remote_code: bool = False
    capture_chunk_mb: int = 256  # working memory bound of one attention row chunk
    selection: Literal["greedy", "avg", "max"] = "greedy"  # ablation "w/o optimisation": top-budget by mean/max
    # The reasoning prompt: a UTF-8 file holding the whole user message with {documents} and {question}
    # placeholders (null: our wording of the paper's instructions); system_prompt null = ours, "" = none.
    prompt_file: str | None = None
    system_prompt: str | None = None


@dataclass
class LoraConfig:
    """`student.lora`: peft LoRA hyper-parameters (`enabled: false` trains all weights)."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"


# `student.launch` keys that become `accelerate launch --KEY VALUE` flags (the pipeline builds the command).
LAUNCH_FLAGS = ("num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port")


@dataclass
class LaunchConfig:
    """`student.launch`: how `purecover pipeline` starts the train stage.

    `config_file` null trains in the pipeline's own process; an accelerate config YAML (e.g.
    ``configs/accelerate/deepspeed_zero2.yaml``) makes the pipeline run ``accelerate launch
    --config_file FILE [--num_processes N ...] -m purecover.train RECIPE`` as a subprocess.
    """

    config_file: str | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    machine_rank: int | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    extra_args: list[str] = field(default_factory=list)  # further `accelerate launch` arguments


@dataclass
class StudentConfig:
    """`student` section: the distilled selector and its training."""

    model: str = "Qwen/Qwen2.5-7B-Instruct"
    lora: LoraConfig = field(default_factory=LoraConfig)
    lm_weight: float = 1.0
    m_exact: int = 5
    max_passage_tokens: int = 192
    training: dict[str, Any] = field(default_factory=dict)  # transformers TrainingArguments fields
    # Additions beyond DESIGN §8 (documented in README):
    identifiers: Literal["letters", "letters52"] = "letters"
    # L_LM per question: token_mean = mean token NLL of the reply (its weight against L_CL does not grow with
    # |S|); sequence_sum = the reply's total NLL, −log p(reply), the paper's formula.
    lm_reduction: Literal["token_mean", "sequence_sum"] = "token_mean"
    cl_weight: float = 1.0  # weight of L_CL (0: the L_LM-only ablation)
    # full fine-tuning (lora.enabled false) without updating the token embedding and a tied output projection
    freeze_embeddings: bool = False
    eval_fraction: float = 0.1  # held-out share of labelled questions: never trained on (calibration + test)
    calibration_share: float = 0.5  # of the held-out questions: the calibration split (tau3, eval loss); rest: test
    k_max: int | None = None  # at most this many passages kept at inference (None: teacher.budget)
    min_select: int = 1  # at least this many passages kept at inference
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    launch: LaunchConfig = field(default_factory=LaunchConfig)


@dataclass
class ExportConfig:
    """`export` section."""

    merge: bool = True
    # Additions beyond DESIGN §8 (documented in README):
    license: str | None = None  # model card licence (null: the base model's, when its card says)


@dataclass
class EvalConfig:
    """`eval` section: end-to-end QA evaluation."""

    generator: str = "Qwen/Qwen2.5-7B-Instruct"
    backend: Literal["hf", "vllm"] = "hf"
    methods: list[str] = field(default_factory=lambda: ["retrieval", "teacher", "student"])
    budgets: list[int] = field(default_factory=lambda: [1, 3, 5, 10, 15])
    # Additions beyond DESIGN §8 (documented in README):
    path: str | None = None  # evaluation questions from another file (e.g. the dev set); None = run_dir's
    split: str = "dev"  # split of `path` (Hub datasets)
    hub_config: str | None = None  # Hub configuration of `path` (null: data.hub_config when path is data.path)
    limit: int | None = None  # first N evaluation questions
    sample: int | None = None  # a seeded random sample of N evaluation questions (the paper: 500)
    seed: int = 0  # seed of `sample`
    questions: Literal["heldout", "all"] = "heldout"  # without `path`: the student's held-out split, or all
    table_budget: int = 5  # the budget of report.md's main table
    max_new_tokens: int = 32
    batch_size: int = 8
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "auto"
    tensor_parallel_size: int = 1  # vLLM
    trust_remote_code: bool = False
    embedding_model: str = "sentence-transformers/all-MiniLM-L6-v2"  # mmr / xquad / ia_select
    cross_encoder: str = "BAAI/bge-reranker-large"
    subtopics: Literal["steps", "subquestions"] = "steps"  # xquad / ia_select subtopics


@dataclass
class TrackingConfig:
    """`tracking`: experiment tracking of the label, train and evaluate summaries (never hashed)."""

    report_to: Literal["none", "wandb"] = "none"
    project: str = "purecover"
    entity: str | None = None
    run_name: str | None = None  # null: the run_dir's name


@dataclass
class Recipe:
    """A whole run: every stage reads from and writes to `run_dir`."""

    run_dir: str = "runs/demo"
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    student: StudentConfig = field(default_factory=StudentConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

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


def _yaml_load(text: str, source: str, lines: bool = True) -> Any:
    loader = _RecipeLoader(text)
    try:
        node = loader.get_single_node()
        _check_duplicate_keys(node, source, lines)
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from exc
    finally:
        loader.dispose()


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


def _section_at(dotted: str) -> type | None:
    """The config dataclass of the section `dotted` names (``data``, ``teacher.lancer``), else None."""
    cls: Any = Recipe
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(cls) or part not in {f.name for f in dataclasses.fields(cls)}:
            return None
        cls = typing.get_type_hints(cls)[part]
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def _check_section_override(item: str, key: str, value: Any) -> None:
    """``--set data=null`` or ``--set teacher=3`` would replace a whole section: refuse it by name."""
    section = _section_at(key)
    if section is None or isinstance(value, dict):
        return
    names = [f.name for f in dataclasses.fields(section)]
    shown = "null" if value is None else repr(value)
    raise ConfigError(
        f"override {item!r}: {key}: expected a mapping, got {shown}; {key} is a whole section, not a single "
        f"value: set one of its keys instead ({key}.KEY=VALUE; keys: {', '.join(names)})")


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


# --------------------------------------------------------------------------- validation


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        (inner,) = typing.get_args(tp)
        return f"list of {_type_name(inner)}"
    if origin is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return `value` checked against the annotation `tp`; raise ConfigError naming `key`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, key)
            except ConfigError as exc:
                errors.append(exc)
        literal_errors = [e for e in errors if "did you mean" in str(e)]
        if literal_errors:
            raise literal_errors[0]
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(value, [str(c) for c in choices], n=1)
            if close:
                hint = f"; did you mean {close[0]!r}?"
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, choices))}{hint}")
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null, got {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")  # pragma: no cover - programming error


def _build(cls: type, values: Any, prefix: str) -> Any:
    label = prefix or "recipe"
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{label}: expected a mapping, got {values!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = f"; did you mean {(prefix + '.' if prefix else '') + close[0]!r}?" if close else ""
            valid = ", ".join(names)
            raise ConfigError(f"unknown key {dotted!r}{hint} (valid keys of {label}: {valid})")
        kwargs[key] = _coerce(value, hints[key], dotted)
    obj = cls(**kwargs)
    _check_values(obj, prefix)
    return obj


def _check_values(obj: Any, prefix: str) -> None:
    """Range checks that types alone cannot express."""

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"{prefix}.{key}: {msg}")

    if isinstance(obj, DataConfig):
        need(obj.k1 >= 1, "k1", f"must be >= 1, got {obj.k1}")
        need(obj.limit is None or obj.limit >= 1, "limit", f"must be >= 1 or null, got {obj.limit}")
        need(obj.sample is None or obj.sample >= 1, "sample", f"must be >= 1 or null, got {obj.sample}")
        need(obj.dense_batch_size >= 1, "dense_batch_size", "must be >= 1")
        need(obj.encode_shard_size >= 1, "encode_shard_size", f"must be >= 1, got {obj.encode_shard_size}")
        need(bool(obj.faiss_index.strip()), "faiss_index", "must be a faiss.index_factory string such as Flat")
        need(obj.index_path is None or obj.retriever == "dense", "index_path",
             "is a FAISS index: it needs data.retriever: dense")
        need(obj.index_path is None or obj.corpus not in ("per_question", "shared"), "index_path",
             "needs data.corpus to be the corpus file the index was built over")
    elif isinstance(obj, TeacherConfig):
        for key in ("tau1", "tau2", "embedding_tau", "embedding_tau_e"):
            value = getattr(obj, key)
            need(value is None or value > 0, key, f"must be > 0 or null, got {value}")
        need(obj.lam is None or obj.lam >= 0, "lam", f"must be >= 0 or null, got {obj.lam}")
        need(not isinstance(obj.calibration_lengths, int) or obj.calibration_lengths >= 1, "calibration_lengths",
             f"must be 'candidates' or a token count >= 1, got {obj.calibration_lengths}")
        need(0.0 <= obj.fallback_warn <= 1.0, "fallback_warn", f"must be in [0, 1], got {obj.fallback_warn}")
        need(obj.budget >= 1, "budget", "must be >= 1")
        need(obj.min_select >= 0, "min_select", "must be >= 0")
        need(obj.max_new_tokens >= 1, "max_new_tokens", "must be >= 1")
        need(obj.max_steps >= 1, "max_steps", "must be >= 1")
        need(obj.batch_size >= 1, "batch_size", "must be >= 1")
        need(obj.tensor_parallel_size >= 1, "tensor_parallel_size", "must be >= 1")
        need(obj.capture_chunk_mb >= 1, "capture_chunk_mb", "must be >= 1")
    elif isinstance(obj, LancerConfig):
        need(0.0 <= obj.beta <= 1.0, "beta", f"must be in [0, 1], got {obj.beta}")
        need(obj.n_subquestions >= 1, "n_subquestions", "must be >= 1")
    elif isinstance(obj, LoraConfig):
        need(obj.r >= 1, "r", f"must be an integer >= 1, got {obj.r}")
        need(obj.alpha > 0, "alpha", f"must be > 0, got {obj.alpha}")
        need(0.0 <= obj.dropout < 1.0, "dropout", f"must be in [0, 1), got {obj.dropout}")
    elif isinstance(obj, StudentConfig):
        need(obj.m_exact >= 1, "m_exact", "must be >= 1")
        need(obj.max_passage_tokens >= 8, "max_passage_tokens", "must be >= 8")
        need(obj.lm_weight >= 0, "lm_weight", "must be >= 0")
        need(obj.cl_weight >= 0, "cl_weight", "must be >= 0")
        need(obj.cl_weight > 0 or obj.lm_weight > 0, "cl_weight", "cl_weight and lm_weight cannot both be 0")
        need(0.0 <= obj.eval_fraction < 1.0, "eval_fraction", "must be in [0, 1)")
        need(0.0 <= obj.calibration_share <= 1.0, "calibration_share", "must be in [0, 1]")
        need(obj.k_max is None or obj.k_max >= 1, "k_max", "must be >= 1 or null")
        need(obj.min_select >= 0, "min_select", "must be >= 0")
    elif isinstance(obj, LaunchConfig):
        for key in ("num_processes", "num_machines"):
            value = getattr(obj, key)
            need(value is None or value >= 1, key, f"must be >= 1 or null, got {value}")
        need(obj.machine_rank is None or obj.machine_rank >= 0, "machine_rank", "must be >= 0 or null")
        stray = [k for k in (*LAUNCH_FLAGS, "extra_args") if getattr(obj, k)]
        need(obj.config_file is not None or not stray, stray[0] if stray else "config_file",
             "is set but student.launch.config_file is null: set config_file to an accelerate config "
             "(e.g. configs/accelerate/multi_gpu.yaml) or remove it")
    elif isinstance(obj, EvalConfig):
        need(all(b >= 1 for b in obj.budgets), "budgets", "every budget must be >= 1")
        need(obj.limit is None or obj.limit >= 1, "limit", f"must be >= 1 or null, got {obj.limit}")
        need(obj.sample is None or obj.sample >= 1, "sample", f"must be >= 1 or null, got {obj.sample}")


# --------------------------------------------------------------------------- public API


def recipe_from_dict(tree: dict[str, Any] | None, source: str = "recipe") -> Recipe:
    """Validate a recipe mapping and build the `Recipe`; `source` prefixes error messages."""
    try:
        return _build(Recipe, tree or {}, "")
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (or start from defaults when `path` is None) and apply overrides."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"recipe {str(p)!r} does not exist")
        source = str(p)
        loaded = _yaml_load(p.read_text(encoding="utf-8"), source)
        if loaded is None:
            raise ConfigError(f"recipe {source} is empty (no keys, only comments or null): write the recipe's "
                              "sections into it, or leave out the recipe file to start from the defaults")
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: a recipe must be a YAML mapping, got {type(loaded).__name__}")
        tree = loaded or {}
    for item in overrides:
        key, value = parse_override(item)
        _check_section_override(item, key, value)
        _set_dotted(tree, key, value)
    if overrides:
        source += " + overrides"
    return recipe_from_dict(tree, source)


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Plain-data form of a recipe (what is written next to every stage's output)."""
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
