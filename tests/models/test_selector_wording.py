"""The selector's wording: ours from purecover/prompts/selector.txt, or the one a selector_config.json records."""

from __future__ import annotations

import pytest

from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import (
    LAYOUT_VERSION,
    SELECTOR_INSTRUCTIONS,
    SELECTOR_SYSTEM,
    SelectorWording,
    build_selector_prompt,
    prompt_template,
)
from purecover.prompts import load_prompt
from tests.prompts.fakes import DOCS, PlainTokenizer

SCHEME = IdentifierScheme(token_ids=list(range(26)))


def test_ours_comes_from_the_prompt_file():
    ours = SelectorWording.default()
    prompt = load_prompt("selector")
    assert (ours.system, ours.instructions) == (prompt.render("system"), prompt.render("instructions"))
    assert (ours.system, ours.instructions) == (SELECTOR_SYSTEM, SELECTOR_INSTRUCTIONS)
    assert prompt_template() == ours.template() == prompt_template(ours)
    assert prompt_template()["layout"] == LAYOUT_VERSION


def test_a_recorded_wording_is_used_when_it_hashes_to_the_recorded_hash(tmp_path):
    path = tmp_path / "selector.txt"
    path.write_text("[[instructions]]\nList the letters of the passages that answer the question.\n",
                    encoding="utf-8")
    mine = SelectorWording.from_prompt(load_prompt("selector", path))
    assert mine.system == SELECTOR_SYSTEM and mine.instructions.startswith("List the letters")
    stored = prompt_template(mine)
    assert stored["hash"] != prompt_template()["hash"]
    assert SelectorWording.from_record(stored) == mine
    assert SelectorWording.from_record(prompt_template()) == SelectorWording.default()
    text = build_selector_prompt(PlainTokenizer(), "Which river?", DOCS, SCHEME, wording=mine).text
    assert text.startswith(f"{SELECTOR_SYSTEM}\n\nList the letters") and SELECTOR_INSTRUCTIONS not in text
    assert build_selector_prompt(PlainTokenizer(), "Which river?", DOCS, SCHEME).text.startswith(
        f"{SELECTOR_SYSTEM}\n\n{SELECTOR_INSTRUCTIONS}\n\nQuestion: Which river?")


@pytest.mark.parametrize("change", [
    {"instructions": "Edited after export."},  # the wording no longer hashes to the recorded hash
    {"hash": "0000"},
    {"layout": "selector-layout-v0"},
    {"system": None},
])
def test_a_record_that_does_not_hash_is_refused(change):
    stored = {**prompt_template(SelectorWording("S", "I")), **change}
    stored = {k: v for k, v in stored.items() if v is not None}
    with pytest.raises(ValueError, match="the selector was trained with prompt template"):
        SelectorWording.from_record(stored)
