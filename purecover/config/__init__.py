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

The package, one module per job, each importing only those listed before it:

* `base`: `ConfigError` and the field types the sections share;
* `data_teacher`, `student_eval`, `recipe`: the section dataclasses and the `Recipe`;
* `safe_yaml`: safe YAML reading and its limits;
* `schema`: look-ups in the recipe's JSON schema and the error messages built from them;
* `loading`: `load_recipe` (bases, ``--set`` overrides), `recipe_to_dict`, `dump_recipe_yaml`, `section_fingerprint`.
"""

from __future__ import annotations

from .base import ConfigError
from .base import _SectionError as _SectionError
from .data_teacher import DataConfig, LancerConfig, TeacherConfig
from .loading import MAX_BASE_DEPTH as MAX_BASE_DEPTH
from .loading import (
    dump_recipe_yaml,
    load_recipe,
    parse_override,
    recipe_from_dict,
    recipe_to_dict,
    section_fingerprint,
)
from .recipe import Recipe, TrackingConfig
from .safe_yaml import MAX_RECIPE_BYTES as MAX_RECIPE_BYTES
from .safe_yaml import MAX_RECIPE_VALUES as MAX_RECIPE_VALUES
from .schema import _range_text as _range_text  # the recipe reference's type and range texts
from .schema import _resolve as _resolve
from .schema import _type_name as _type_name
from .schema import recipe_json_schema
from .student_eval import LAUNCH_FLAGS, EvalConfig, ExportConfig, LaunchConfig, LoraConfig, StudentConfig

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
