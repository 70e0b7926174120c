"""Checks of ``student.training`` against transformers' TrainingArguments, before anything runs.

`check_training_section` checks every key (a TrainingArguments field, with a close-match hint) and
every value, with pydantic, against the type transformers declares for the field: the field's
annotation, read from ``dataclasses.fields(TrainingArguments)``, with its enums and declared
``choices`` turned into the strings they accept. Scalars are strict, as YAML gives them (``"3"`` is
not an integer, ``1`` is not ``true``; an integer is fine for a float). `dry_training_arguments`
builds TrainingArguments once on the CPU in a temporary directory so its own ``__post_init__``
checks run, without changing process state. Failures are `ConfigError`s naming
``student.training.<key>``. Used by the train stage and by `purecover.validate` (which runs before
any stage).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import functools
import importlib.metadata
import json
import math
import operator
import os
import tempfile
import types
import typing
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple, Union

from pydantic import ConfigDict, InstanceOf, TypeAdapter, ValidationError

from ..config import ConfigError

__all__ = ["check_training_section", "dry_training_arguments"]

# What the dry construction neutralises: settings whose set-up changes process-wide state (TF32
# matmul flags, torch.compile's TF32 switch, DeepSpeed's global config) or reads files that only
# the training machine may have (a DeepSpeed JSON); the real TrainingArguments of the run sets them up.
_DRY_OVERRIDES: dict[str, bool | None] = {"use_cpu": True, "tf32": None, "torch_compile": False,
                                          "torch_compile_backend": None, "torch_compile_mode": None, "deepspeed": None}
_STRICT = ConfigDict(strict=True)


class _FieldCheck(NamedTuple):
    """How one TrainingArguments field is checked: the accepted type, its validator (None: anything goes)."""

    accepted: Any
    adapter: TypeAdapter[Any] | None


SNAPSHOT = Path(__file__).with_name("training_fields.json")  # `_live_fields` of the pinned transformers, encoded


def _live_fields() -> dict[str, Any]:
    """TrainingArguments' init fields, from transformers itself (imports torch: seconds): name -> accepted type."""
    from transformers import TrainingArguments

    hints = typing.get_type_hints(TrainingArguments)
    return {f.name: _accepted(hints.get(f.name, Any), tuple(f.metadata.get("choices") or ()))
            for f in dataclasses.fields(TrainingArguments) if f.init}


def _transformers_version() -> str | None:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def snapshot_record() -> dict[str, Any]:
    """What `SNAPSHOT` holds: the installed transformers version and every field's accepted type (`_encode`)."""
    return {"transformers": _transformers_version(),
            "fields": {name: _encode(tp) for name, tp in sorted(_live_fields().items())}}


@functools.cache
def _training_fields() -> dict[str, _FieldCheck]:
    """TrainingArguments' init fields: name -> the type its values must have and a pydantic validator of it.

    Read from `SNAPSHOT` when it was made from the installed transformers version, so checking a recipe never
    imports transformers' trainer (and torch); from transformers itself otherwise. A test keeps the snapshot
    equal to the live fields (regenerate: ``python -m purecover.train.arguments``).
    """
    fields: dict[str, Any] | None = None
    try:
        stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        if stored.get("transformers") == _transformers_version():
            fields = {name: _decode(spec) for name, spec in stored["fields"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        fields = None
    if fields is None:
        fields = _live_fields()
    return {name: _FieldCheck(tp, _adapter(tp)) for name, tp in fields.items()}


_SCALARS: dict[Any, str] = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null", dict: "dict",
                            list: "list", Any: "any"}
_FROM_NAME = {v: k for k, v in _SCALARS.items()}


def _encode(tp: Any) -> Any:
    """An accepted type (`_accepted`) as JSON: ``"int"``, ``{"literal": [...]}``, ``{"union": [...]}``,
    ``{"list": T}``, ``{"dict": [K, V]}``, ``{"instance": "ClassName"}``."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return {"literal": list(args)}
    if origin in (Union, types.UnionType):
        return {"union": [_encode(a) for a in args]}
    if origin is list:
        return {"list": _encode(args[0])}
    if origin is dict:
        return {"dict": [_encode(args[0]), _encode(args[1])]}
    if origin is typing.Annotated:  # InstanceOf[cls]
        return {"instance": getattr(args[0], "__name__", str(args[0]))}
    return "any"


def _decode(spec: Any) -> Any:
    """`_encode`'s inverse. An instance of a library class (``ParallelismConfig``) becomes an instance check of a
    stand-in class of that name: no value a recipe can spell (YAML scalars, lists, mappings) is one, as before."""
    if isinstance(spec, str):
        return _FROM_NAME[spec]
    if "literal" in spec:
        return Literal[tuple(spec["literal"])]
    if "union" in spec:
        return functools.reduce(operator.or_, [_decode(a) for a in spec["union"]])
    if "list" in spec:
        return list[_decode(spec["list"])]
    if "dict" in spec:
        return dict[_decode(spec["dict"][0]), _decode(spec["dict"][1])]
    if "instance" in spec:
        return InstanceOf[type(str(spec["instance"]), (), {})]
    return Any


def _adapter(accepted: Any) -> TypeAdapter[Any] | None:
    if accepted is Any:
        return None
    try:
        return TypeAdapter(accepted, config=_STRICT)
    except Exception:  # a type pydantic cannot check: TrainingArguments' own checks decide
        return None


# Ranges TrainingArguments does not check itself (a negative or NaN learning rate is accepted there and fails, or
# silently diverges, only in training): (low, low inclusive, high, high inclusive); every float must be finite.
RANGES: dict[str, tuple[float | None, bool, float | None, bool]] = {
    "learning_rate": (0.0, False, None, False),
    "weight_decay": (0.0, True, None, False),
    "adam_beta1": (0.0, True, 1.0, False),
    "adam_beta2": (0.0, True, 1.0, False),
    "adam_epsilon": (0.0, False, None, False),
    "max_grad_norm": (0.0, True, None, False),
    "num_train_epochs": (0.0, False, None, False),
    "label_smoothing_factor": (0.0, True, 1.0, False),
}


def _check_range(dotted: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise ConfigError(f"{dotted}: expected a finite number, got {value!r}")
    if key not in RANGES:
        return
    low, low_in, high, high_in = RANGES[key]
    bad_low = low is not None and (value < low or (value == low and not low_in))
    bad_high = high is not None and (value > high or (value == high and not high_in))
    if bad_low or bad_high:
        lo = "" if low is None else f"{'≥' if low_in else '>'} {low:g}"
        hi = "" if high is None else f"{'≤' if high_in else '<'} {high:g}"
        raise ConfigError(f"{dotted}: expected a number {' and '.join(x for x in (lo, hi) if x)}, got {value!r}")


def check_training_section(training: Mapping[str, Any]) -> None:
    """Every ``student.training`` key is a TrainingArguments field, every value fits its type, every number is
    finite and within `RANGES`. Needs neither transformers' trainer nor torch (`_training_fields`)."""
    fields = _training_fields()
    for key, value in training.items():
        dotted = f"student.training.{key}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=1)
            hint = f"; did you mean 'student.training.{close[0]}'?" if close else ""
            raise ConfigError(f"unknown key {dotted!r} (not a TrainingArguments field){hint}")
        check = fields[key]
        try:
            if check.adapter is not None:
                check.adapter.validate_python(value)
        except ValidationError:
            valid = _strings_of(check.accepted)
            close = difflib.get_close_matches(value, valid, n=1) if isinstance(value, str) else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{dotted}: expected {_describe(check.accepted)}, got {value!r}{hint}") from None
        _check_range(dotted, key, value)


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _accepted(tp: Any, choices: tuple[Any, ...] = ()) -> Any:
    """The type of the values a recipe may give for annotation `tp`: an enum becomes the Literal of its values
    (``SchedulerType | str`` takes exactly those strings), a ``str`` with declared `choices` their Literal,
    and a class pydantic does not know an isinstance check."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is str and choices:
        return Literal[choices]
    if tp is Any or tp in (bool, int, float, str, type(None), dict, list):
        return tp
    if _is_enum(tp):
        return Literal[tuple(m.value for m in tp)]
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not str] if any(_is_enum(a) for a in args) else list(args)
        return functools.reduce(operator.or_, [_accepted(a, choices) for a in options])
    if origin is Literal:
        return tp
    if origin is list and args:
        return list[_accepted(args[0])]
    if origin is dict and args:
        return dict[_accepted(args[0]), _accepted(args[1])]
    if isinstance(tp, type):
        return InstanceOf[tp]
    return Any  # an annotation we cannot read: TrainingArguments' own checks decide


def _strings_of(tp: Any) -> list[str]:
    """The strings a type spells out (its Literal values), for did-you-mean hints."""
    options = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
    return [a for o in options if typing.get_origin(o) is Literal for a in typing.get_args(o) if isinstance(a, str)]


_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
          list: "a list", type(None): "null"}


def _describe(tp: Any) -> str:
    """What a type accepts, in words: ``an integer``, ``one of 'linear', 'cosine'``, ``a string or null``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(option) for option in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args) if len(args) > 1 else repr(args[0])
    if origin is list:
        return f"a list (each item {_describe(args[0])})" if args else "a list"
    if origin is dict:
        return "a mapping"
    if origin is typing.Annotated:  # InstanceOf[cls]
        return f"a {getattr(args[0], '__name__', args[0])}"
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


# --------------------------------------------------------------------------- dry construction


@functools.cache
def _dry_arguments_class() -> type:
    """SelectorTrainingArguments whose device is the CPU without setting up accelerate's process state.

    The real ``device`` resets `AcceleratorState` and creates a `PartialState` (a process-wide
    singleton): created here with ``cpu=True`` it would pin the later stages of this process to the
    CPU, and under ``accelerate launch`` start a gloo process group before the real one.
    """
    import torch

    from .selector_arguments import SelectorTrainingArguments

    class DryTrainingArguments(SelectorTrainingArguments):
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
    """SelectorTrainingArguments built from `kwargs` so that TrainingArguments' own ``__post_init__`` checks run.

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


if __name__ == "__main__":  # regenerate the snapshot after a transformers upgrade
    SNAPSHOT.write_text(json.dumps(snapshot_record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
