"""The teacher's reasoning prompt as a template file: default wording, custom files, errors, keys, records."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from purecover.config import ConfigError, load_recipe
from purecover.records import PromptWording
from purecover.teacher.calibration import bias_keys, load_bias
from purecover.teacher.lancer import TemplateError
from purecover.teacher.prompts import (
    SYSTEM_PROMPT,
    ReasoningPrompt,
    build_reasoning_prompt,
    build_teacher_sequence,
    load_reasoning_template,
    template_key,
)
from purecover.validate import validate_recipe
from tests.teacher.test_prompts import DOCS  # titled, untitled and non-ASCII documents

BODIES = ["Tollbridge\nTollbridge is a market town on the Mirren.", "Ada Brill was born in Tollbridge in 1841.",
          "Café Ölm\nA café with ünïcode — and “quotes”."]

# Documents in the middle, a literal brace pair, the question first and {max_steps} omitted.
CUSTOM = ("Question first: {question}\n{{not a placeholder}}\nEvidence:\n{documents}\nEnd of evidence.\n"
          "Reason in [Step N]: lines and end with [Answer]: .\n")


@pytest.fixture(scope="module")
def tok(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


@pytest.fixture
def custom_file(tmp_path) -> Path:
    path = tmp_path / "my_prompt.txt"
    path.write_text(CUSTOM, encoding="utf-8")
    return path


def test_default_template_has_six_instructions_and_the_format():
    default = ReasoningPrompt.default()
    text = default.template
    assert default.source == "reasoning.txt" and default.system == SYSTEM_PROMPT
    numbered = re.findall(r"^(\d)\. ", text, flags=re.MULTILINE)
    assert numbered == ["1", "2", "3", "4", "5", "6"]
    assert '"[Step N]:"' in text and '"[Answer]:"' in text and "{max_steps}" in text
    assert text.count("{documents}") == 1 and "{question}" in text
    for topic in ("every document", "bridge", "single fact", "name the entity", "do not help", "yes or no"):
        assert topic in text, topic
    user, _ = default.user_message("Q?", DOCS)
    assert "at most 5 steps" in user and "{" not in user
    assert "at most 3 steps" in ReasoningPrompt.default(max_steps=3).user_message("Q?", DOCS)[0]


def test_custom_template_spans_map_exactly(tok, custom_file):
    prompt = ReasoningPrompt(load_reasoning_template(custom_file), None, str(custom_file))
    text, spans = build_reasoning_prompt(tok, "Which river flows through Ada Brill's birthplace?", DOCS, prompt)
    assert [text[a:b] for a, b in spans] == BODIES
    assert "{not a placeholder}" in text and "Question first: Which river" in text
    assert text.index("Evidence:") < spans[0][0] and spans[-1][1] < text.index("End of evidence.")
    assert SYSTEM_PROMPT not in text  # system_prompt "" -> no system message of ours
    seq = build_teacher_sequence(tok, text, spans, ["Ada Brill was born in Tollbridge.", "The Mirren flows there."],
                                 "the Mirren")

    def decode(span):
        return tok.decode(seq.input_ids[span[0] : span[1]]).strip()

    assert [decode(s) for s in seq.doc_spans] == BODIES
    assert [decode(s) for s in seq.step_spans] == ["Ada Brill was born in Tollbridge.", "The Mirren flows there."]
    assert decode(seq.answer_span) == "the Mirren"
    flat = [*seq.doc_spans, *seq.step_spans, seq.answer_span]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(flat))


def test_from_config(custom_file):
    recipe = load_recipe(None, [f"teacher.prompt_file={custom_file}", "teacher.system_prompt=Be brief.",
                                "teacher.max_steps=3"])
    prompt = ReasoningPrompt.from_config(recipe.teacher)
    assert prompt.template == CUSTOM.removesuffix("\n") and prompt.system == "Be brief." and prompt.max_steps == 3
    rec = prompt.record()
    assert rec.file == "my_prompt.txt" and len(rec.sha256) == 64 and rec.system_sha256
    none = ReasoningPrompt.from_config(load_recipe(None, ['teacher.system_prompt=""']).teacher)
    assert none.system is None and none.record().system_sha256 is None and none.source == "reasoning.txt"
    assert ReasoningPrompt.from_config(load_recipe(None, []).teacher) == ReasoningPrompt.default()


@pytest.mark.parametrize(("content", "pattern"), [
    ("Docs {documents}", r"lacks the placeholder \{question\}"),
    ("Q {question}", r"lacks the placeholder \{documents\}"),
    ("{documents} {question} {steps}", r"unknown placeholder \{steps\}"),
    ("{documents} {question} {documents}", r"\{documents\} occurs 2 times"),
    ("{documents} {question} {", "malformed braces"),
    ("{documents} {question!r}", "conversion or format spec"),
])
def test_bad_template_files_name_the_file_and_placeholder(tmp_path, content, pattern):
    path = tmp_path / "bad.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TemplateError, match=pattern) as info:
        load_reasoning_template(path)
    assert str(path) in str(info.value)


def test_unreadable_template_files(tmp_path):
    with pytest.raises(TemplateError, match=r"missing\.txt: cannot read the reasoning template"):
        load_reasoning_template(tmp_path / "missing.txt")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("{documents} {question} caf\xe9".encode("latin-1"))
    with pytest.raises(TemplateError, match=r"latin1\.txt: the reasoning template is not UTF-8"):
        load_reasoning_template(latin)


def test_validate_recipe_checks_the_prompt_file(tmp_path, custom_file):
    validate_recipe(load_recipe(None, [f"teacher.prompt_file={custom_file}"]))  # a good file passes
    bad = tmp_path / "bad.txt"
    bad.write_text("only {documents}", encoding="utf-8")
    for path, pattern in ((bad, r"teacher\.prompt_file: .*bad\.txt.*lacks the placeholder \{question\}"),
                          (tmp_path / "nope.txt", r"teacher\.prompt_file: .*nope\.txt: cannot read")):
        with pytest.raises(ConfigError, match=pattern):
            validate_recipe(load_recipe(None, [f"teacher.prompt_file={path}"]))


def test_calibration_key_changes_with_the_wording(tok, custom_file, tmp_path):
    default = ReasoningPrompt.default()
    custom = ReasoningPrompt(load_reasoning_template(custom_file), default.system, str(custom_file))
    other_system = ReasoningPrompt(default.template, "Another system message.")
    no_system = ReasoningPrompt(default.template, None)
    keys = {template_key(tok, p) for p in (default, custom, other_system, no_system,
                                          ReasoningPrompt.default(max_steps=4))}
    assert len(keys) == 5
    assert template_key(tok) == template_key(tok, default)  # default wording when none is given

    def bias_for(prompt):
        return bias_keys("m", 3, tok, "all", [10, 10, 10], weights="sha256:w", prompt=prompt)

    assert bias_for(custom).template == template_key(tok, custom)
    path = tmp_path / "bias.json"
    path.write_text(json.dumps({"keys": bias_for(default).to_json_dict(), "bias": [0.0, 0.0, 0.0]}),
                    encoding="utf-8")
    load_bias(path, bias_for(default))
    with pytest.raises(ValueError, match="calibration key 'template' differs"):
        load_bias(path, bias_for(custom))


def test_label_records_record_the_template(tmp_path, custom_file):
    from purecover.teacher.label_stage import _Labeler

    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"teacher.prompt_file={custom_file}"])
    labeler = _Labeler(recipe, 0, 1, False)
    assert labeler.prompt.template == CUSTOM.removesuffix("\n")
    assert labeler.meta.prompt == PromptWording(file="my_prompt.txt", sha256=labeler.prompt.sha256,
                                                system_sha256=ReasoningPrompt.default().record().system_sha256)
