"""The one prompt loader: our files, users' files, placeholder and part checks, recipe overrides."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.prompts import (
    PROMPTS,
    TemplateError,
    check_recipe_prompts,
    effective_prompt,
    load_prompt,
    parse_parts,
    recipe_override,
)

FOLDER = Path(str(resources.files("purecover.prompts")))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_every_file_of_the_folder_is_a_listed_prompt_and_back():
    assert sorted(p.name for p in FOLDER.glob("*.txt")) == sorted(spec.file for spec in PROMPTS.values())


@pytest.mark.parametrize("name", list(PROMPTS))
def test_our_prompts_load_with_their_metadata(name):
    prompt = load_prompt(name)
    spec = PROMPTS[name]
    raw = (FOLDER / spec.file).read_text(encoding="utf-8")
    assert raw.endswith("\n") and not raw.endswith("\n\n")
    assert prompt.name == name and Path(prompt.source).name == spec.file
    assert prompt.text == raw.removesuffix("\n")  # our files are in canonical form
    assert prompt.sha256 == hashlib.sha256(prompt.text.encode()).hexdigest()
    assert prompt.is_default and set(prompt.parts) == set(spec.parts)
    used = {n for part in spec.parts.values() for n in part.required}
    assert used <= set(prompt.placeholders)
    for part, takes in spec.parts.items():  # every part renders with the values it takes
        rendered = prompt.render(part, **{n: f"<{n}>" for n in takes.names})
        assert all(f"<{n}>" in rendered for n in takes.required)


def test_placeholders_a_prompt_takes():
    assert load_prompt("reasoning").placeholders == ("documents", "question", "max_steps")
    assert load_prompt("lancer_rating").placeholders == ("question", "subquestion", "document")
    assert load_prompt("selector").placeholders == ()
    assert set(load_prompt("rag_answer").placeholders) == {"reply", "text", "i", "title", "documents", "question"}


def test_a_missing_or_unknown_placeholder_names_the_file_and_the_placeholder(tmp_path):
    path = write(tmp_path / "reason.txt", "Docs:\n{documents}\n")
    with pytest.raises(TemplateError, match=r"reason\.txt: the reasoning template lacks the placeholder \{question\}"):
        load_prompt("reasoning", path)
    path = write(tmp_path / "reason.txt", "{documents} {question} {context}")
    with pytest.raises(TemplateError, match=r"reason\.txt: unknown placeholder \{context\} in the reasoning template"):
        load_prompt("reasoning", path)
    path = write(tmp_path / "answer.txt", "[[user]]\n{documents}\nQ: {query}\n")
    with pytest.raises(TemplateError, match=r"answer\.txt: unknown placeholder \{query\} in the \[\[user\]\] part "
                                            r"of the RAG answer template"):
        load_prompt("rag_answer", path)
    path = write(tmp_path / "answer.txt", "[[closed_book_user]]\nNothing to ask.\n")
    with pytest.raises(TemplateError, match=r"answer\.txt: the \[\[closed_book_user\]\] part of the RAG answer "
                                            r"template lacks the placeholder \{question\}"):
        load_prompt("rag_answer", path)
    path = write(tmp_path / "sel.txt", "[[instructions]]\nPick {k} passages.\n")
    with pytest.raises(TemplateError, match=r"sel\.txt: unknown placeholder \{k\}.*it takes no placeholder"):
        load_prompt("selector", path)


@pytest.mark.parametrize(("text", "problem"), [
    ("Intro\n[[user]]\n{documents} {question}", r"line 1: text before the first \[\[part\]\] header"),
    ("[[user]]\n{documents} {question}\n[[answer]]\nx", r"line 3: unknown part \[\[answer\]\] \(parts: \[\[system\]\]"),
    ("[[reply]]\na\n[[reply]]\nb", r"line 3: the part \[\[reply\]\] is given twice"),
    ("Just a system message.", r"line 1: text before the first"),
    ("", r"no \[\[part\]\] header"),
    ("[[user]]\n{documents} {documents} {question}", r"\{documents\} occurs 2 times in the \[\[user\]\] part"),
])
def test_sectioned_files_are_checked(tmp_path, text, problem):
    path = write(tmp_path / "answer.txt", text)
    with pytest.raises(TemplateError, match=problem) as info:
        load_prompt("rag_answer", path)
    assert str(path) in str(info.value)


def test_a_sectioned_file_may_replace_some_parts(tmp_path):
    path = write(tmp_path / "answer.txt", "\n[[reply]]\n\nAnswer in {{one}} word.\n\n[[document]]\n"
                                           "[{i}] {title} - {text}\n")
    ours, mine = load_prompt("rag_answer"), load_prompt("rag_answer", path)
    assert mine.part("reply") == "Answer in {{one}} word." and mine.render("reply") == "Answer in {one} word."
    assert mine.render("document", i=2, title="T", text="x") == "[2] T - x"
    assert {p: mine.part(p) for p in ours.parts if p not in ("reply", "document")} == {
        p: ours.part(p) for p in ours.parts if p not in ("reply", "document")}
    assert mine.source == str(path) and not mine.is_default and mine.sha256 != ours.sha256
    assert parse_parts(mine.text, "canonical") == dict(mine.parts)  # `text` holds every part, ours included


def test_a_copy_of_ours_is_ours(tmp_path):
    """What `purecover prompts NAME` prints, saved as a file, loads as the same wording."""
    for name in ("reasoning", "rag_answer", "selector"):
        path = write(tmp_path / f"{name}.txt", (FOLDER / PROMPTS[name].file).read_text(encoding="utf-8"))
        assert load_prompt(name, path).text == load_prompt(name).text


def test_a_byte_order_mark_is_not_part_of_the_template(tmp_path):
    """A file saved with a UTF-8 byte-order mark (Windows editors) loads as the same wording, not refused."""
    for name in ("reasoning", "rag_answer", "selector"):
        path = tmp_path / f"{name}-bom.txt"
        path.write_bytes(b"\xef\xbb\xbf" + (FOLDER / PROMPTS[name].file).read_bytes())
        assert load_prompt(name, path).text == load_prompt(name).text


def test_lancer_files_are_used_as_read(tmp_path):
    path = write(tmp_path / "rate.txt", "{question} {subquestion} {document}\n")
    assert load_prompt("lancer_rating", path).text.endswith("\n")
    path = write(tmp_path / "reason.txt", "{documents} {question}\n")
    assert load_prompt("reasoning", path).text == "{documents} {question}"


def test_unknown_prompt_and_unreadable_file(tmp_path):
    with pytest.raises(TemplateError, match=r"unknown prompt 'reasonning'; did you mean 'reasoning'"):
        load_prompt("reasonning")
    with pytest.raises(TemplateError, match=r"nope\.txt: cannot read the RAG answer template"):
        load_prompt("rag_answer", tmp_path / "nope.txt")
    path = tmp_path / "latin.txt"
    path.write_bytes("[[reply]]\ncaf\xe9".encode("latin-1"))
    with pytest.raises(TemplateError, match=r"latin\.txt: the RAG answer template is not UTF-8"):
        load_prompt("rag_answer", path)


def test_recipe_overrides_and_their_check(tmp_path):
    good = write(tmp_path / "answer.txt", "[[reply]]\nOne word.\n")
    bad = write(tmp_path / "rate.txt", "{question} {document}")
    recipe = load_recipe(None, [f"eval.prompt_file={good}", f"teacher.lancer.rating_template={bad}"])
    assert recipe_override(recipe, "rag_answer") == str(good)
    assert recipe_override(recipe, "lancer_rating") is None  # LANCER is off: its files are not read
    assert recipe_override(recipe, "selector") is None
    check_recipe_prompts(recipe)
    with pytest.raises(TemplateError, match=r"^teacher\.lancer\.rating_template: .*rate\.txt: the rating template "
                                            r"lacks the placeholder \{subquestion\}"):
        check_recipe_prompts(load_recipe(None, [f"teacher.lancer.rating_template={bad}", "teacher.lancer.enabled=true"]))
    bad = write(tmp_path / "bad.txt", "[[reply]]\n{x}")
    with pytest.raises(TemplateError, match=r"^eval\.prompt_file: .*bad\.txt: unknown placeholder \{x\}"):
        check_recipe_prompts(load_recipe(None, [f"eval.prompt_file={bad}"]))


def test_effective_prompt_follows_the_recipe(tmp_path):
    sub = write(tmp_path / "sub.txt", "Split {question} into {n}.")
    recipe = load_recipe(None, [f"teacher.lancer.subquestion_template={sub}", "teacher.lancer.enabled=true",
                                'teacher.system_prompt=""'])
    assert effective_prompt("lancer_subquestion", recipe) == ("Split {question} into {n}.",
                                                              f"teacher.lancer.subquestion_template: {sub}")
    assert effective_prompt("lancer_system", recipe)[0] is None  # a custom sub-question file runs without it
    assert effective_prompt("reasoning_system", recipe)[0] is None  # empty: no system message
    assert effective_prompt("reasoning", recipe)[0] == load_prompt("reasoning").text
    text, where = effective_prompt("reasoning_system", load_recipe(None, ["teacher.system_prompt=Be {brief}."]))
    assert text == "Be {brief}." and "teacher.system_prompt" in where  # the recipe's text is used as is
    text, where = effective_prompt("reasoning", load_recipe(None, ["teacher.format_example=true"]))
    assert text == load_prompt("reasoning").text + "\n\n" + load_prompt("reasoning_example").text
    assert "reasoning_example.txt (teacher.format_example)" in where


def test_validate_recipe_checks_every_prompt_file(tmp_path):
    from purecover.config import ConfigError
    from purecover.validate import validate_recipe

    good = write(tmp_path / "sel.txt", "[[system]]\nYou pick passages.\n")
    validate_recipe(load_recipe(None, [f"student.prompt_file={good}", f"eval.prompt_file={FOLDER / 'rag_answer.txt'}"]))
    bad = write(tmp_path / "bad.txt", "[[user]]\n{documents}\n")
    with pytest.raises(ConfigError, match=r"eval\.prompt_file: .*bad\.txt: the \[\[user\]\] part of the RAG answer "
                                          r"template lacks the placeholder \{question\}"):
        validate_recipe(load_recipe(None, [f"eval.prompt_file={bad}"]))
    with pytest.raises(ConfigError, match=r"student\.prompt_file: .*bad\.txt: line 1: unknown part \[\[user\]\]"):
        validate_recipe(load_recipe(None, [f"student.prompt_file={bad}"]))
