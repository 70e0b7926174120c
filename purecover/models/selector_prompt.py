"""The student's selection prompt: the question and the K1 candidates, each behind an identifier.

User message layout (rendered with the tokenizer's chat template when it has one)::

    <instructions>

    Question: <question>

    Passages:
    A: <title>
    <text>
    B: ...

    Question: <question>

The question comes first so that every passage is read knowing it (the model is causal) and
again at the end, next to the reply. Each passage body (title + text) is cut to
`max_passage_tokens` tokens; identifiers are never cut. The reply is the identifiers of the
selected passages, one per line, most useful first, then the end-of-turn token.

The readouts (``student.readout``; `purecover.models.readouts`, one module each; docs/guides/student.md#readouts)
render two prompts:

- ``identifier`` (the paper's, `LAYOUT_VERSION`): the scores are the identifiers' logits at the first reply
  position, after the whole prompt.
- ``passage`` (our extension, `PASSAGE_LAYOUT_VERSION`): the same prompt with `PASSAGE_MARKER` after each
  passage body (``A: <title>\n<text>\nRelevant:``); passage k's score is the logit of the fixed token
  `PASSAGE_READ_TOKEN` at the last token of its marker, read in the same single forward pass
  (`SelectorPrompt.read_positions`). The marker has seen the question and its own passage, so a small model
  scores each passage where it sits instead of binding content to a letter. The prompt is tokenised piece by
  piece (the text up to and including each marker, then the rest), so the read positions are exact for any
  tokenizer, with or without a chat template; training and inference tokenise it the same way.

The system message and the instructions are ``purecover/prompts/selector.txt`` (read by
`purecover.prompts.load_prompt`); the layout around them is fixed (`LAYOUT_VERSION`). A trained
selector records its wording and the hash of it in selector_config.json (`prompt_template`);
`SelectorWording.from_record` gives back the wording a recorded selector was trained with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from ..data.passage import doc_passage_text, passage_text
from ..prompts import Prompt, load_prompt
from ..records import CandidateDoc
from .chat import render_chat
from .identifiers import IdentifierScheme
from .prompt_tokens import encode_plain, encode_prompt
from .readouts import READOUT_VALUES, prompt_readout
from .readouts.identifier import LAYOUT_VERSION as IDENTIFIER_LAYOUT
from .readouts.passage import LAYOUT_VERSION as PASSAGE_LAYOUT
from .readouts.passage import MARKER, READ_TOKEN, read_token_id

__all__ = [
    "LAYOUT_VERSION",
    "PASSAGE_LAYOUT_VERSION",
    "PASSAGE_MARKER",
    "PASSAGE_READ_TOKEN",
    "READOUTS",
    "SELECTOR_INSTRUCTIONS",
    "SELECTOR_SYSTEM",
    "SelectorPrompt",
    "SelectorWording",
    "build_selector_prompt",
    "end_token_id",
    "head_token_ids",
    "prompt_template",
    "read_token_id",
    "truncate_text",
]

# the readouts' layouts, marker and read token, defined in purecover.models.readouts (names kept here)
LAYOUT_VERSION = IDENTIFIER_LAYOUT
PASSAGE_LAYOUT_VERSION = PASSAGE_LAYOUT
READOUTS = READOUT_VALUES
PASSAGE_MARKER = MARKER
PASSAGE_READ_TOKEN = READ_TOKEN


@dataclass(frozen=True)
class SelectorWording:
    """The selection prompt's wording: the `system` message and the `instructions` heading the user message."""

    system: str
    instructions: str

    @classmethod
    def default(cls) -> SelectorWording:
        """Ours: ``purecover/prompts/selector.txt``."""
        return cls.from_prompt(load_prompt("selector"))

    @classmethod
    def from_prompt(cls, prompt: Prompt) -> SelectorWording:
        """From a loaded ``selector`` prompt (ours or a user's file)."""
        return cls(prompt.render("system"), prompt.render("instructions"))

    @classmethod
    def from_config(cls, cfg: Any) -> SelectorWording:
        """From ``student.prompt_file`` (null: ours); a file that cannot be used is a TemplateError naming it."""
        path = getattr(cfg, "prompt_file", None)
        return cls.from_prompt(load_prompt("selector", path)) if path else cls.default()

    def template(self, readout: str = "identifier") -> dict[str, str]:
        """What defines the prompt: system, instructions, the layout of `readout` (the ``student.readout`` value)
        and the hash of the three (16 hex chars)."""
        layout = _layout(readout)
        text = self.system + self.instructions + layout
        return {"system": self.system, "instructions": self.instructions, "layout": layout,
                "hash": hashlib.sha256(text.encode()).hexdigest()[:16]}

    @classmethod
    def from_record(cls, stored: Mapping[str, Any], readout: str = "identifier") -> SelectorWording:
        """The wording a selector_config.json's `prompt_template` records for a selector of `readout`, once its
        hash is checked: the recorded system and instructions must hash, with that readout's layout, to the
        recorded hash. ValueError otherwise (another layout, a wording edited after export, or a record without
        the wording)."""
        ours = prompt_template(readout=readout)
        if stored.get("hash") == ours["hash"]:
            return cls.default()
        system, instructions = stored.get("system"), stored.get("instructions")
        if isinstance(system, str) and isinstance(instructions, str) and stored.get("layout") == ours["layout"]:
            wording = cls(system, instructions)
            if wording.template(readout)["hash"] == stored.get("hash"):
                return wording
        raise ValueError(
            f"the selector was trained with prompt template {stored.get('layout')!r} (hash {stored.get('hash')}), "
            f"but this purecover renders {ours['layout']!r} (hash {ours['hash']}) and the recorded system and "
            "instructions do not hash to the recorded hash; use the purecover version recorded in "
            "selector_config.json")


_DEFAULT = SelectorWording.default()
SELECTOR_SYSTEM = _DEFAULT.system
SELECTOR_INSTRUCTIONS = _DEFAULT.instructions


def _layout(readout: str) -> str:
    return prompt_readout(readout).layout


def prompt_template(wording: SelectorWording | None = None, readout: str = "identifier") -> dict[str, str]:
    """What defines the prompt (stored in selector_config.json so a deployed selector is self-describing);
    `wording`: ours when None; `readout`: whose layout (the ``student.readout`` value)."""
    return (wording or _DEFAULT).template(readout)


@dataclass
class SelectorPrompt:
    """A rendered prompt: its text, token ids and how many passages it lists.

    `read_positions` (passage readout only, else None): for each passage k, the index in `input_ids` of the last
    token of its marker, where its score is read; strictly increasing, all before the final question."""

    text: str
    input_ids: list[int]
    n_docs: int
    read_positions: list[int] | None = None


# Cutting before tokenising: a text is tokenised whole only when it is short; a long one (a 1 MB document sent
# to `purecover serve`) only by growing prefixes, cut at a whitespace, until the prefix has comfortably more
# than the tokens kept. Tokens never span a whitespace-started word of these tokenizers' pre-tokenisation, so
# the kept head equals that of the whole text (a test compares both on real passages and hostile strings).
_PREFIX_CHARS_PER_TOKEN = 8
_PREFIX_MARGIN_TOKENS = 16


def head_token_ids(tokenizer: Any, text: str, max_tokens: int) -> tuple[list[int], bool]:
    """(the first `max_tokens` token ids of `text`, whether `text` has more), tokenising at most a prefix a few
    times the kept length (characters), never the whole of a long text."""
    size = max_tokens * _PREFIX_CHARS_PER_TOKEN + 64
    while size < len(text):
        cut = max(text.rfind(" ", size // 2, size), text.rfind("\n", size // 2, size))
        prefix = text[: cut if cut > 0 else size]
        ids = encode_plain(tokenizer, prefix)["input_ids"]
        if len(ids) > max_tokens + _PREFIX_MARGIN_TOKENS:
            return list(ids[:max_tokens]), True
        size *= 4
    ids = encode_plain(tokenizer, text)["input_ids"]
    return list(ids[:max_tokens]), len(ids) > max_tokens


def truncate_text(tokenizer: Any, body: str, max_tokens: int) -> str:
    """`body` cut to its first `max_tokens` tokens (decoded, stripped), or unchanged when it has no more."""
    ids, longer = head_token_ids(tokenizer, body, max_tokens)
    return tokenizer.decode(ids).strip() if longer else body


def _passage(doc: CandidateDoc | Mapping[str, JsonValue]) -> str:
    """The passage a candidate is shown as (`purecover.data.passage`): a `CandidateDoc` or its JSON form."""
    if isinstance(doc, CandidateDoc):
        return passage_text(doc.title, doc.text)
    return doc_passage_text(doc)


def build_selector_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc | Mapping[str, JsonValue]],
                          scheme: IdentifierScheme, max_passage_tokens: int = 192,
                          wording: SelectorWording | None = None, readout: str = "identifier") -> SelectorPrompt:
    """Render the prompt for `docs` (`CandidateDoc` records, or dicts with ``title``/``text`` as in
    candidates.jsonl); `scheme` must be checked for len(docs). `wording`: ours when None. `readout`: the
    ``student.readout`` value whose prompt is rendered: tokenised whole when its readout has no marker
    (``identifier``), else with its marker after each passage (``passage``: `PASSAGE_MARKER`), tokenised in
    pieces that end at each marker (`SelectorPrompt.read_positions`)."""
    wording = wording or _DEFAULT
    marker = prompt_readout(readout).marker
    if len(docs) > len(scheme.token_ids):
        raise ValueError(f"{len(docs)} passages but the identifier scheme is bound to {len(scheme.token_ids)}")
    q = question.strip()
    user = f"{wording.instructions}\n\nQuestion: {q}\n\nPassages:\n"
    cuts = []  # character offsets in `user` just after each marker
    for i, (label, d) in enumerate(zip(scheme.labels, docs)):
        body = truncate_text(tokenizer, _passage(d), max_passage_tokens)
        user += ("\n" if i else "") + f"{label}: {body}{marker}"
        cuts.append(len(user))
    user += f"\n\nQuestion: {q}"
    chat = render_chat(tokenizer, wording.system, user)
    text = chat.text
    if not marker:
        return SelectorPrompt(text=text, input_ids=encode_prompt(tokenizer, text)[0], n_docs=len(docs))
    ids, positions, _ = encode_prompt(tokenizer, text, [chat.user_offset + c for c in cuts])
    return SelectorPrompt(text=text, input_ids=ids, n_docs=len(docs), read_positions=positions)




def end_token_id(tokenizer: Any) -> int:
    """The token that ends the reply: the chat template's end of turn (``<|im_end|>`` for Qwen), else EOS."""
    for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if (isinstance(tid, int) and tid >= 0 and tid != tokenizer.unk_token_id
                and tokenizer.convert_ids_to_tokens(tid) == token):
            return tid
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no end-of-turn or EOS token")
    return tokenizer.eos_token_id
