"""`purecover prompts`: the listing, one template, and the wording a recipe uses."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.prompts import PROMPTS, load_prompt

FOLDER = Path(str(resources.files("purecover.prompts")))
DEMO = str(Path(__file__).resolve().parents[2] / "configs" / "recipes" / "demo_cpu.yaml")


def test_the_listing_names_every_template_with_its_file_placeholders_and_key(capsys):
    assert main(["prompts"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split()[0]: b for b in out.split("\n\n")[1:] if b.strip()}
    assert set(blocks) == set(PROMPTS)
    for name, spec in PROMPTS.items():
        block = blocks[name]
        assert spec.file in block and "for:" in block
        assert (spec.recipe_key or "none (fixed)") in block
        for part in spec.parts.values():
            for placeholder in part.names:
                assert f"{{{placeholder}}}" in block, (name, placeholder)
    assert "[[closed_book_user]] {question}" in blocks["rag_answer"]


@pytest.mark.parametrize("name", list(PROMPTS))
def test_a_name_prints_our_file(capsys, name):
    assert main(["prompts", name]) == 0
    captured = capsys.readouterr()
    assert captured.out == (FOLDER / PROMPTS[name].file).read_text(encoding="utf-8")
    assert captured.err.startswith(f"{name}: ours")


def test_with_a_recipe_it_prints_the_override(capsys, tmp_path):
    path = tmp_path / "answer.txt"
    path.write_text("[[reply]]\nOne word only.\n", encoding="utf-8")
    assert main(["prompts", "rag_answer", "--recipe", DEMO, "--set", f"eval.prompt_file={path}"]) == 0
    captured = capsys.readouterr()
    assert captured.out == load_prompt("rag_answer", path).text + "\n"
    assert "[[reply]]\nOne word only.\n\n[[yes_no_reply]]" in captured.out  # the other parts: ours
    assert f"eval.prompt_file: {path}" in captured.err
    assert main(["prompts", "--set", f"eval.prompt_file={path}"]) == 0  # the listing shows the value set
    assert f"eval.prompt_file = {str(path)!r}" in capsys.readouterr().out
    assert main(["prompts", "reasoning", "--recipe", DEMO]) == 0  # the demo recipe sets no override: ours
    assert capsys.readouterr().out == load_prompt("reasoning").text + "\n"


def test_errors_name_the_prompt_or_the_file(capsys, tmp_path):
    assert main(["prompts", "reasonning"]) == 1
    assert "unknown prompt 'reasonning'; did you mean 'reasoning'" in capsys.readouterr().err
    bad = tmp_path / "mine.txt"
    bad.write_text("{documents} and nothing else", encoding="utf-8")
    assert main(["prompts", "reasoning", "--set", f"teacher.prompt_file={bad}"]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "lacks the placeholder {question}" in err
    assert main(["prompts", "--set", "eval.prompt_fil=x"]) == 2  # recipe errors are recipe errors
    assert "did you mean 'eval.prompt_file'" in capsys.readouterr().err
