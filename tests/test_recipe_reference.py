"""docs/recipe.md is generated from the recipe's models and must be current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from purecover.config import recipe_json_schema
from purecover.config.reference import recipe_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "recipe.md"


def test_docs_recipe_md_is_the_generated_reference():
    assert DOC.read_text(encoding="utf-8") == recipe_reference(), \
        "docs/recipe.md is stale: regenerate it with `purecover config --reference > docs/recipe.md`"


def test_every_key_of_every_section_has_a_row_with_its_range_and_default():
    text = recipe_reference()
    schema = recipe_json_schema()
    for name, ref in schema["properties"].items():
        section = schema["$defs"].get(ref.get("$ref", "").rsplit("/", 1)[-1])
        for key in (section or {}).get("properties", {}):
            assert f"| `{name}.{key}" in text, f"{name}.{key} has no row"
    assert "| `data.k1` | >= 1 | `20` |" in text  # range and default come from the Field
    assert "| `seed` | in [0, 4294967295] | `0` |" in text
    assert "| `student.lora.dropout` | in [0, 1) |" in text  # nested sections are flattened


def test_purecover_config_reference_prints_it():
    out = subprocess.run([sys.executable, "-m", "purecover", "config", "--reference"], capture_output=True,
                         text=True, check=True).stdout
    assert out == recipe_reference()
