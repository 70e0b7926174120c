"""Checks of ``student.training`` against transformers' TrainingArguments, before anything runs.

`check_training_section` checks every key (a TrainingArguments field, with a close-match hint) and
every value (against the field's annotation and declared choices); `dry_training_arguments` builds
TrainingArguments once on the CPU in a temporary directory so its own ``__post_init__`` checks run,
without changing process state. Failures are `ConfigError`s naming ``student.training.<key>``.
Used by the train stage and by `purecover.validate` (which runs before any stage).
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
from typing import Any, Literal, Union

from ..config import ConfigError

__all__ = ["check_training_section", "dry_training_arguments"]

# What the dry construction neutralises: settings whose set-up changes process-wide state (TF32
# matmul flags, torch.compile's TF32 switch, DeepSpeed's global config) or reads files that only
# the training machine may have (a DeepSpeed JSON); the real TrainingArguments of the run sets them up.
_DRY_OVERRIDES: dict[str, Any] = {"use_cpu": True, "tf32": None, "torch_compile": False,
                                  "torch_compile_backend": None, "torch_compile_mode": None, "deepspeed": None}


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
