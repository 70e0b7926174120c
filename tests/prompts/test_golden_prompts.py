"""Our prompts render byte for byte as they did before they moved into template files.

golden_prompts.json was written by the string-constant code that preceded purecover/prompts/, with the
inputs and stand-in tokenizers of `tests.prompts.fakes`; it is a fixed record and is never regenerated.
Every hash a run records over the wording (the reasoning template's sha256 and calibration key, the
selector's prompt hash in selector_config.json) must stay the same, or existing labels, bias files and
exported selectors would no longer match.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from purecover.eval import rag_prompt as rp
from purecover.models import selector_prompt as sp
from purecover.models.identifiers import IdentifierScheme
from purecover.teacher import lancer
from purecover.teacher import prompts as tp
from tests.prompts.fakes import DOCS, QUESTION, SUBQUESTION, ChatTokenizer, PlainTokenizer

GOLDEN = json.loads((Path(__file__).parent / "golden_prompts.json").read_text(encoding="utf-8"))
TOKENIZERS = {"plain": PlainTokenizer, "chat": ChatTokenizer}


def _reasoning() -> dict[str, Any]:
    r: dict[str, Any] = {}
    for steps in (5, 2):
        p = tp.ReasoningPrompt.default(steps)
        text, spans = p.user_message(QUESTION, DOCS)
        r[f"user_max_steps_{steps}"] = {"text": text, "spans": [list(s) for s in spans]}
        for name, tok in TOKENIZERS.items():
            t, s = tp.build_reasoning_prompt(tok(), QUESTION, DOCS, p)
            r[f"prompt_{name}_max_steps_{steps}"] = {"text": t, "spans": [list(x) for x in s]}
        r[f"template_key_none_{steps}"] = tp.template_key(None, p)
        r[f"template_key_chat_{steps}"] = tp.template_key(ChatTokenizer(), p)
    no_system = tp.ReasoningPrompt(tp.ReasoningPrompt.default().template, None)
    r["prompt_plain_no_system"] = tp.build_reasoning_prompt(PlainTokenizer(), QUESTION, DOCS, no_system)[0]
    r["template_key_default"] = tp.template_key()
    r["template_key_no_system"] = tp.template_key(None, no_system)
    r["system"] = tp.SYSTEM_PROMPT
    r["template"] = tp.ReasoningPrompt.default().template
    r["sha256"] = tp.ReasoningPrompt.default().sha256
    r["record"] = tp.ReasoningPrompt.default().record().model_dump(mode="json")
    return r


def _lancer() -> dict[str, Any]:
    out: dict[str, Any] = {"subquestion_template": lancer.SUBQUESTION_TEMPLATE, "rating_template": lancer.RATING_TEMPLATE}
    for name, tok in TOKENIZERS.items():
        out[f"subquestion_{name}"] = lancer.subquestion_prompt(tok(), QUESTION, 3)
        out[f"rating_{name}"] = [lancer.rating_prompt(tok(), QUESTION, SUBQUESTION, d) for d in DOCS]
        out[f"subquestion_custom_{name}"] = lancer.subquestion_prompt(tok(), QUESTION, 4,
                                                                      "List {n} sub-questions of: {question}")
        out[f"rating_custom_{name}"] = lancer.rating_prompt(tok(), QUESTION, SUBQUESTION, DOCS[0],
                                                            "Q={question} S={subquestion} D={document}")
    return out


def _selector() -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_template": sp.prompt_template(), "system": sp.SELECTOR_SYSTEM,
                           "instructions": sp.SELECTOR_INSTRUCTIONS}
    scheme = IdentifierScheme(token_ids=list(range(26)))
    for name, tok in TOKENIZERS.items():
        for max_tokens in (192, 4):
            out[f"prompt_{name}_{max_tokens}"] = sp.build_selector_prompt(tok(), QUESTION, DOCS, scheme, max_tokens).text
        out[f"prompt_{name}_dicts"] = sp.build_selector_prompt(tok(), QUESTION, [d.model_dump() for d in DOCS],
                                                               scheme).text
    return out


def _rag() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ds in ("hotpotqa", "strategyqa", "musique"):
        out[f"messages_{ds}"] = list(rp.qa_messages(QUESTION, DOCS, ds))
        out[f"messages_{ds}_closed_book"] = list(rp.qa_messages(QUESTION, [], ds))
        for name, tok in TOKENIZERS.items():
            out[f"prompt_{name}_{ds}"] = rp.render_qa_prompt(tok(), QUESTION, DOCS, ds)
            out[f"prompt_{name}_{ds}_closed_book"] = rp.render_qa_prompt(tok(), QUESTION, [], ds)
    out["messages_dicts"] = list(rp.qa_messages(QUESTION, [d.model_dump() for d in DOCS], "hotpotqa"))
    return out


RENDER = {"reasoning": _reasoning, "lancer": _lancer, "selector": _selector, "rag": _rag}


@pytest.mark.parametrize("group", list(RENDER))
def test_prompts_render_byte_identical_to_the_recorded_ones(group):
    rendered = RENDER[group]()
    assert set(rendered) == set(GOLDEN[group])
    for key, want in GOLDEN[group].items():
        assert rendered[key] == want, f"{group}.{key} differs from the recorded prompt"


def test_recorded_hashes_are_those_existing_runs_hold():
    """The hash exported selectors carry in selector_config.json (checked when a selector loads) and the
    reasoning template's sha256 labels and bias.json record."""
    assert sp.prompt_template()["hash"] == GOLDEN["selector"]["prompt_template"]["hash"] == "a8037cb56e6d7716"
    assert tp.ReasoningPrompt.default().sha256 == GOLDEN["reasoning"]["sha256"]
    assert tp.template_key() == GOLDEN["reasoning"]["template_key_default"]


def test_the_golden_inputs_exercise_what_could_drift():
    """The fixed inputs carry braces, untitled passages, padding spaces and passages the selector cuts."""
    assert "{" in QUESTION and QUESTION.strip() != QUESTION and any(not d.title for d in DOCS)
    assert GOLDEN["selector"]["prompt_plain_4"] != GOLDEN["selector"]["prompt_plain_192"]
    assert "{the}" in GOLDEN["rag"]["messages_hotpotqa"][1]
