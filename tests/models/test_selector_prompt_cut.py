"""Passages and questions are cut before they are tokenised (`head_token_ids`): the kept tokens equal those of
tokenising the whole text, on real passages and hostile strings, while a multi-megabyte document costs the
tokenizer only a bounded prefix (a server's worker stays free for the next request)."""

from __future__ import annotations

import json

import pytest

from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt, head_token_ids, truncate_text


@pytest.fixture(scope="module")
def texts(sample_file) -> list[str]:
    """Real passages of the HotpotQA sample, single and run together into long texts (up to ~60k characters)."""
    records = json.loads(sample_file("hotpotqa").read_text(encoding="utf-8"))[:40]
    paragraphs = [" ".join(s for s in sentences) for r in records for _, sentences in r["context"]]
    joined = ["\n".join(paragraphs[i: i + n]) for n in (3, 30, 120) for i in range(0, 121, 60)]
    hostile = ["a" * 100_000, " " * 50_000 + "x", "ab " * 40_000, "\n" * 30_000 + "end",
               "é漢字🙂 " * 20_000, "1234567890" * 10_000, "word\t" * 30_000, "x" * 3000 + " y" * 3000,
               "supercalifragilistic" * 5_000]
    return paragraphs[:60] + joined + hostile


@pytest.mark.parametrize("max_tokens", [1, 16, 64, 256])
def test_the_kept_head_equals_that_of_the_whole_text(tokenizer, texts, max_tokens):
    for text in texts:
        whole = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids, longer = head_token_ids(tokenizer, text, max_tokens)
        assert ids == whole[:max_tokens] and longer == (len(whole) > max_tokens), text[:60]
        cut = truncate_text(tokenizer, text, max_tokens)
        assert cut == (tokenizer.decode(whole[:max_tokens]).strip() if len(whole) > max_tokens else text)


def test_a_huge_document_costs_the_tokenizer_a_bounded_prefix(tokenizer):
    seen: list[int] = []

    class Counting:  # the real tokenizer, recording how many characters it is asked to tokenise
        def __call__(self, text, **kwargs):
            seen.append(len(text))
            return tokenizer(text, **kwargs)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    huge = "The Mirren flows past Tollbridge. " * 120_000  # ~4 MB
    scheme = IdentifierScheme("letters").check(tokenizer, 4)
    docs = [{"title": f"T{i}", "text": huge} for i in range(4)]
    prompt = build_selector_prompt(Counting(), "Where is Tollbridge?", docs, scheme, max_passage_tokens=256)
    passages, rendered = seen[:4], seen[4:]  # then the rendered prompt, in pieces between its control tokens
    assert max(passages) <= 256 * 8 + 64 and rendered and sum(rendered) < 30_000
    assert len(prompt.input_ids) < 4 * 256 + 200
