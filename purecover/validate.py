"""The whole recipe is checked before any stage runs (DESIGN §8): what loading alone cannot check.

`load_recipe` checks every key, type and range of the recipe's own sections. `validate_recipe`
adds the checks that need another library's contract or span sections, whatever stage will run:

* ``student.training``: every key is a `transformers.TrainingArguments` field, every value
  matches the field's annotation (and its declared choices), and TrainingArguments' own
  ``__post_init__`` accepts the whole set (built once, on the CPU, in a temporary directory,
  without touching accelerate's process state);
* ``data.k1`` fits the identifier scheme ``student.identifiers`` when the pipeline trains the student;
* ``eval.table_budget`` is one of ``eval.budgets``.

Every failure is a `ConfigError` naming the dotted key, the bad value and what is expected.
transformers is imported lazily (importing it takes a few seconds).
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import functools
import os
import tempfile
import types
import typing
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Union

from .config import ConfigError, EvalConfig, Recipe, load_recipe
from .models.identifiers import SCHEMES, IdentifierScheme

__all__ = ["check_identifier_capacity", "check_table_budget", "check_training_section",
           "dry_training_arguments", "load_validated_recipe", "validate_recipe"]

# What the dry construction neutralises: settings whose set-up changes process-wide state (TF32
# matmul flags, torch.compile's TF32 switch, DeepSpeed's global config) or reads files that only
# the training machine may have (a DeepSpeed JSON); the real TrainingArguments of the run sets them up.
_DRY_OVERRIDES: dict[str, Any] = {"use_cpu": True, "tf32": None, "torch_compile": False,
                                  "torch_compile_backend": None, "torch_compile_mode": None, "deepspeed": None}


def validate_recipe(recipe: Recipe) -> None:
    """Check the whole recipe beyond its own types and ranges; raise ConfigError naming the key."""
    check_table_budget(recipe.eval)
    if _trains_student(recipe):
        check_identifier_capacity(recipe.data.k1, recipe.student.identifiers)
    _check_training(recipe)


def load_validated_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """`load_recipe` then `validate_recipe`; errors name the recipe source like `load_recipe`'s do."""
    recipe = load_recipe(path, overrides)
    try:
        validate_recipe(recipe)
    except ConfigError as exc:
        source = (str(path) if path is not None else "defaults") + (" + overrides" if overrides else "")
        raise ConfigError(f"{source}: {exc}") from None
    return recipe


# --------------------------------------------------------------------------- cross-section checks


def _trains_student(recipe: Recipe) -> bool:
    """Whether the pipeline trains this recipe's student (the planner's rule: `eval.methods` has `student`)."""
    from .pipeline import _needed

    return _needed(recipe, "train")[0]


def check_identifier_capacity(k1: int, scheme: str) -> None:
    """``data.k1`` candidates must each get a single-token identifier of ``student.identifiers``."""
    capacity = IdentifierScheme(scheme).capacity
    if k1 <= capacity:
        return
    larger = [name for name in SCHEMES if IdentifierScheme(name).capacity >= k1]
    if larger:
        fix = (f"set student.identifiers: {larger[0]} ({IdentifierScheme(larger[0]).capacity} identifiers) "
               "or lower data.k1")
    else:
        fix = f"lower data.k1 to at most {max(IdentifierScheme(n).capacity for n in SCHEMES)}"
    raise ConfigError(f"data.k1: {k1} candidates but student.identifiers: {scheme} labels at most "
                      f"{capacity}; {fix}")


def check_table_budget(cfg: EvalConfig) -> None:
    """report.md's main table is read at ``eval.table_budget``, so the evaluation must run that budget."""
    if cfg.table_budget not in cfg.budgets:
        raise ConfigError(f"eval.table_budget: {cfg.table_budget} is not one of eval.budgets {cfg.budgets}; "
                          "the report's main table needs it (add it to eval.budgets or pick one of those)")


# --------------------------------------------------------------------------- student.training


def _check_training(recipe: Recipe) -> None:
    """Keys, values and a dry construction of the train stage's TrainingArguments."""
    from .train.run import build_training_arguments

    build_training_arguments(recipe, has_eval=recipe.student.eval_fraction > 0, dry_run=True)


@functools.cache
def _training_fields() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """TrainingArguments' init fields: name -> (resolved annotation, declared choices or ())."""
    import dataclasses

    from transformers import TrainingArguments

    hints = typing.get_type_hints(TrainingArguments)
    return {f.name: (hints.get(f.name, Any), tuple(f.metadata.get("choices") or ()))
            for f in dataclasses.fields(TrainingArguments) if f.init}


def check_training_section(training: Mapping[str, Any]) -> None:
    """Every ``student.training`` key is a TrainingArguments field and every value fits its annotation."""
    fields = _training_fields()
    for key, value in training.items():
        dotted = f"student.training.{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=1)
            hint = f"; did you mean 'student.training.{close[0]}'?" if close else ""
            raise ConfigError(f"unknown key {dotted!r} (not a TrainingArguments field){hint}")
        annotation, choices = fields[key]
        _check_value(dotted, value, annotation, choices)


def _check_value(dotted: str, value: Any, annotation: Any, choices: tuple[Any, ...]) -> None:
    if not _matches(value, annotation):
        expected = _describe(annotation)
    elif choices and isinstance(value, str) and value not in choices:
        expected = "one of " + ", ".join(repr(c) for c in choices)
    else:
        return
    valid = [*choices, *_strings_of(annotation)]
    close = difflib.get_close_matches(value, [str(v) for v in valid], n=1) if isinstance(value, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{dotted}: expected {expected}, got {value!r}{hint}")


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _options(tp: Any) -> tuple[Any, ...]:
    """Members of a union; `str` is dropped beside an enum (``SchedulerType | str`` takes its values as strings)."""
    if typing.get_origin(tp) not in (Union, types.UnionType):
        return (tp,)
    args = typing.get_args(tp)
    return tuple(a for a in args if a is not str) if any(_is_enum(a) for a in args) else args


def _strings_of(tp: Any) -> list[str]:
    """The valid strings an annotation spells out (enum values, string literals), for did-you-mean hints."""
    out: list[str] = []
    for option in _options(tp):
        if _is_enum(option):
            out += [str(m.value) for m in option]
        elif typing.get_origin(option) is Literal:
            out += [a for a in typing.get_args(option) if isinstance(a, str)]
    return out


def _matches(value: Any, tp: Any) -> bool:
    """Whether `value` (as YAML gives it) fits the annotation `tp`; ints fit float fields."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_matches(value, option) for option in _options(tp))
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if tp is list or origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value if args)
    if tp is dict or origin is dict:
        return isinstance(value, dict) and (not args or all(
            _matches(k, args[0]) and _matches(v, args[1]) for k, v in value.items()))
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if _is_enum(tp):
        return isinstance(value, tp) or value in [m.value for m in tp]
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # an annotation we cannot read: TrainingArguments' own checks decide


_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
          list: "a list", type(None): "null"}


def _describe(tp: Any) -> str:
    """What an annotation accepts, in words: ``an integer``, ``one of 'linear', 'cosine'``, ``a string or null``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(option) for option in _options(tp))
    if origin is Literal:
        return " or ".join(repr(a) for a in args)
    if origin is list:
        return f"a list (each item {_describe(args[0])})" if args else "a list"
    if origin is dict:
        return "a mapping"
    if _is_enum(tp):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


# --------------------------------------------------------------------------- dry construction


@functools.cache
def _dry_arguments_class() -> type:
    """TrainingArguments whose device is the CPU without setting up accelerate's process state.

    The real ``device`` resets `AcceleratorState` and creates a `PartialState` (a process-wide
    singleton): created here with ``cpu=True`` it would pin the later stages of this process to the
    CPU, and under ``accelerate launch`` start a gloo process group before the real one.
    """
    import torch
    from transformers import TrainingArguments

    class DryTrainingArguments(TrainingArguments):
        @property
        def device(self) -> torch.device:
            return torch.device("cpu")

    return DryTrainingArguments


@contextlib.contextmanager
def _without_env(*names: str) -> Iterator[None]:
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def dry_training_arguments(kwargs: Mapping[str, Any]) -> Any:
    """Construct TrainingArguments from `kwargs` so that its own ``__post_init__`` checks run.

    On the CPU, with output_dir in a temporary directory and `_DRY_OVERRIDES` applied, no process-wide
    state changes (see `_dry_arguments_class`; accelerate's DeepSpeed variable is hidden meanwhile).
    A rejection is a ConfigError naming ``student.training``.
    """
    cls = _dry_arguments_class()
    with tempfile.TemporaryDirectory(prefix="purecover-validate-") as tmp, \
            _without_env("ACCELERATE_USE_DEEPSPEED"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices come again from the real run
        try:
            return cls(**{**kwargs, **_DRY_OVERRIDES, "output_dir": tmp})
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"student.training: transformers.TrainingArguments rejects these settings: "
                              f"{' '.join(str(exc).split())}") from None
