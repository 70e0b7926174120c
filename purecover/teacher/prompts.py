"""The teacher's goal-oriented reasoning prompt and the token spans the capture needs.

The user message is a template *file* (default: ``purecover/prompts/reasoning.txt``, our wording of the
paper's six instructions, Appendix F; the system message is ``reasoning_system.txt`` there, both read by
`purecover.prompts.load_prompt`) with the placeholders ``{documents}`` (required, once: we
render the numbered block ``[1] Title`` + newline + text, one document per line, so the document
spans are known by construction), ``{question}`` (required) and ``{max_steps}`` (optional);
``{{``/``}}`` are literal braces. ``teacher.prompt_file`` replaces it, ``teacher.system_prompt``
the system message (`ReasoningPrompt.from_config`). The reply format is fixed: at most
``max_steps`` lines ``[Step N]: ...`` then ``[Answer]: ...``. After parsing, the reply is
rewritten in canonical form (`canonical_reply`) and the capture runs on prompt + canonical reply,
so every span is known by construction and mapped to tokens through the tokenizer's offsets.

Spans (docs/concepts/method.md#segment-attention): a document span covers its title and text (not the ``[k]`` label); a
step span the text after ``[Step n]: ``; the answer span the text after ``[Answer]: ``.

The capture's layout (``teacher.attention_layout``, `build_attention_prompt`): ``chat``, the reasoning prompt the
reply was generated from (ours), or ``plain``, the text the authors' released code runs its separate attention
pass over: no chat template, system message or instructions, the documents as ``[Doc 0]`` + body lines, then
``Query:`` + question and ``Answer:``, the reply right after (docs/paper/released-code.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Formatter
from typing import Any

from ..data.passage import passage_text
from ..models.chat import bos_prefix, render_chat
from ..models.generated import Generated, generate_detailed
from ..models.prompt_tokens import PromptText, encode_prompt, extend_prompt
from ..prompts import PROMPTS, check_template_text, load_prompt
from ..records import CandidateDoc, PromptWording
from .parsing import answer_closed

__all__ = [
    "ATTENTION_LAYOUTS",
    "DEFAULT_TEMPLATE_FILE",
    "REASONING_FIELDS",
    "SYSTEM_PROMPT",
    "ReasoningPrompt",
    "TeacherSequence",
    "build_attention_prompt",
    "build_plain_prompt",
    "build_reasoning_prompt",
    "build_teacher_sequence",
    "canonical_reply",
    "char_span_to_tokens",
    "check_reasoning_template",
    "document_body",
    "load_reasoning_template",
    "reasoning_replies",
    "template_key",
]

SYSTEM_PROMPT = load_prompt("reasoning_system").text

DEFAULT_TEMPLATE_FILE = PROMPTS["reasoning"].file  # in purecover/prompts/

# Placeholders of a reasoning template: required ones, and the optional one.
REASONING_FIELDS: dict[str, tuple[str, ...]] = {"required": PROMPTS["reasoning"].parts[""].required,
                                                "optional": PROMPTS["reasoning"].parts[""].optional}


ATTENTION_LAYOUTS = ("chat", "plain")


def check_reasoning_template(text: str, source: str) -> str:
    """`text` if it has ``{documents}`` exactly once, ``{question}``, at most ``{max_steps}`` besides.

    Raises `purecover.prompts.TemplateError` (a ValueError) naming `source` and the placeholder.
    """
    return check_template_text(text, PROMPTS["reasoning"].parts[""], source, "the reasoning template")


def load_reasoning_template(path: str | Path) -> str:
    """Read a UTF-8 reasoning template (one final newline dropped) and check its placeholders."""
    return load_prompt("reasoning", path).text


def _default_template() -> str:
    return load_prompt("reasoning").text


@dataclass(frozen=True)
class ReasoningPrompt:
    """The reasoning prompt's wording: user-message `template`, `system` message (None: none), its `source`; and
    the layout the attention is captured over (`attention_layout`: chat, this prompt; plain, `build_plain_prompt`)."""

    template: str
    system: str | None = SYSTEM_PROMPT
    source: str = DEFAULT_TEMPLATE_FILE
    max_steps: int = 5
    attention_layout: str = "chat"
    example: str | None = None  # the worked example of the format appended to `template` (format_example), if any

    def __post_init__(self) -> None:
        check_reasoning_template(self.template, self.source)
        if self.attention_layout not in ATTENTION_LAYOUTS:
            raise ValueError(f"attention_layout {self.attention_layout!r}; expected one of "
                             f"{', '.join(ATTENTION_LAYOUTS)}")

    @classmethod
    def default(cls, max_steps: int = 5) -> ReasoningPrompt:
        """Our wording (templates/reasoning.txt) and our system message."""
        return cls(_default_template(), SYSTEM_PROMPT, DEFAULT_TEMPLATE_FILE, max_steps)

    @classmethod
    def from_config(cls, cfg: Any) -> ReasoningPrompt:
        """From ``teacher.prompt_file`` (null: ours), ``teacher.system_prompt`` (null: ours, "": none), ``max_steps``
        and ``attention_layout``."""
        path = getattr(cfg, "prompt_file", None)
        template = load_reasoning_template(path) if path else _default_template()
        source = str(path) if path else DEFAULT_TEMPLATE_FILE
        example = None
        if getattr(cfg, "format_example", False):  # our worked example of the format, after the user's message
            example = load_prompt("reasoning_example").text
            template = template + "\n\n" + example.replace("{", "{{").replace("}", "}}")
            source += " + " + PROMPTS["reasoning_example"].file
        system = getattr(cfg, "system_prompt", None)
        system = SYSTEM_PROMPT if system is None else (system or None)
        return cls(template, system, source, int(getattr(cfg, "max_steps", 5)),
                   str(getattr(cfg, "attention_layout", "chat")), example)

    @property
    def sha256(self) -> str:
        """sha256 (hex) of the template text used (after the final newline is dropped)."""
        return hashlib.sha256(self.template.encode()).hexdigest()

    def record(self) -> PromptWording:
        """What label records (the ``teacher.prompt`` block) and bias.json keep about the wording."""
        return PromptWording(file=Path(self.source).name, sha256=self.sha256,
                             system_sha256=None if self.system is None
                             else hashlib.sha256(self.system.encode()).hexdigest())

    def user_message(self, question: str, docs: Sequence[CandidateDoc]) -> tuple[str, list[tuple[int, int]]]:
        """The user message and each document's (title + text) character span inside it."""
        chunks, rel, pos = [], [], 0
        for k, d in enumerate(docs, start=1):
            label, body = f"[{k}] ", document_body(d)
            rel.append((pos + len(label), pos + len(label) + len(body)))
            chunks.append(label + body)
            pos += len(label) + len(body) + 1  # "\n" between documents
        values = {"documents": "\n".join(chunks), "question": question.strip(), "max_steps": str(self.max_steps)}
        out: list[str] = []
        pos, spans = 0, []
        for literal, name, _, _ in Formatter().parse(self.template):
            out.append(literal)
            pos += len(literal)
            if name is None:
                continue
            if name == "documents":
                spans = [(pos + a, pos + b) for a, b in rel]
            out.append(values[name])
            pos += len(values[name])
        return "".join(out), spans


def template_key(tokenizer: Any = None, prompt: ReasoningPrompt | None = None) -> str:
    """Hash of everything that shapes the prompt layout (system message, template text, max_steps, chat template)."""
    prompt = prompt or ReasoningPrompt.default()
    h = hashlib.sha256()
    h.update(b"system:" + (b"\0none" if prompt.system is None else prompt.system.encode()) + b"\0")
    h.update(b"template:" + prompt.template.encode() + b"\0")
    h.update(f"max_steps:{prompt.max_steps}\0layout-v2\0".encode())
    if prompt.attention_layout != "chat":  # the chat layout's keys stay those of bias files written before
        h.update(f"attention-layout:{prompt.attention_layout}\0".encode())
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not template and tokenizer is not None and bos_prefix(tokenizer):  # the plain layout starts with BOS
        template = f"plain+bos:{bos_prefix(tokenizer)}"
    h.update((template or "plain").encode() if isinstance(template, str) else str(template).encode())
    return h.hexdigest()[:16]


def document_body(doc: CandidateDoc) -> str:
    """A document as the teacher's prompts show it: title and text on two lines (the text alone without a title;
    `purecover.data.passage.passage_text`)."""
    return passage_text(doc.title, doc.text)


def build_reasoning_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc],
                           prompt: ReasoningPrompt | None = None) -> tuple[str, list[tuple[int, int]]]:
    """The rendered prompt (ending where the reply starts) and the document character spans in it.

    `prompt`: the wording (default: `ReasoningPrompt.default()`).
    """
    prompt = prompt or ReasoningPrompt.default()
    user, spans = prompt.user_message(question, docs)
    chat = render_chat(tokenizer, prompt.system, user)
    return chat.text, [chat.shift(s) for s in spans]


def build_plain_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc]) -> tuple[str, list[tuple[int, int]]]:
    """The released code's attention text up to the reply, and each document body's character span in it:
    the tokenizer's BOS (`bos_prefix`), then ``[Doc 0]`` + body + newline per document, ``\nQuery:`` + question,
    ``\nAnswer:``."""
    bos = bos_prefix(tokenizer)
    text, spans = bos, []
    for k, d in enumerate(docs):
        text += f"[Doc {k}]"
        body = document_body(d)
        spans.append((len(text), len(text) + len(body)))
        text += body + "\n"
    return PromptText(text + "\nQuery:" + question.strip() + "\nAnswer:", ((0, len(bos)),) if bos else ()), spans


def build_attention_prompt(tokenizer: Any, question: str, docs: Sequence[CandidateDoc],
                           prompt: ReasoningPrompt | None = None) -> tuple[str, list[tuple[int, int]]]:
    """The text the attention is captured over, up to the reply, and the document spans: `build_reasoning_prompt`
    for ``prompt.attention_layout`` chat, `build_plain_prompt` for plain."""
    prompt = prompt or ReasoningPrompt.default()
    if prompt.attention_layout == "plain":
        return build_plain_prompt(tokenizer, question, docs)
    return build_reasoning_prompt(tokenizer, question, docs, prompt)


def reasoning_replies(generator: Any, tokenizer: Any, records: Sequence[Any], prompt: ReasoningPrompt,
                      reply_prefix: str, max_new_tokens: int) -> list[Generated]:
    """The teacher's reply to each record (``question``, ``docs``): the reasoning prompt + `reply_prefix` generated
    by `generator` (`purecover.models.generation.generate_detailed`), the prefix kept as the start of the reply.
    Generation stops once the reply holds a closed answer line (`purecover.teacher.parsing.answer_closed`; the HF
    backend), and each reply says whether it ended by itself (``finished``) or at `max_new_tokens`."""
    prompts = [extend_prompt(build_reasoning_prompt(tokenizer, r.question, r.docs, prompt)[0], reply_prefix)
               for r in records]
    outs = generate_detailed(generator, prompts, max_new_tokens,
                             stop_when=lambda text: answer_closed(reply_prefix + text))
    return [Generated(reply_prefix + out.text, out.finished) for out in outs]


def canonical_reply(steps: Sequence[str], answer: str) -> tuple[str, list[tuple[int, int]], tuple[int, int]]:
    """``[Step n]: ...`` lines and the ``[Answer]: ...`` line, with the step and answer character spans."""
    text = ""
    step_spans = []
    for n, step in enumerate(steps, start=1):
        label = f"[Step {n}]: "
        start = len(text) + len(label)
        text += label + step + "\n"
        step_spans.append((start, start + len(step)))
    label = "[Answer]: "
    start = len(text) + len(label)
    text += label + answer
    return text, step_spans, (start, start + len(answer))


def char_span_to_tokens(offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> tuple[int, int]:
    """Token range ``[first, last + 1)`` of the tokens overlapping the character span (empty → (i, i))."""
    a, b = span
    if b <= a:
        for i, (s, _) in enumerate(offsets):
            if s >= a:
                return i, i
        return len(offsets), len(offsets)
    first = last = None
    for i, (s, e) in enumerate(offsets):
        if e > a and s < b and e > s:
            if first is None:
                first = i
            last = i
    if first is None or last is None:
        raise ValueError(f"character span {span} covers no token")
    return first, last + 1


@dataclass
class TeacherSequence:
    """Prompt + canonical reply as token ids, with token spans (positions in `input_ids`)."""

    input_ids: list[int]
    doc_spans: list[tuple[int, int]]
    step_spans: list[tuple[int, int]]
    answer_span: tuple[int, int]
    text: str


def build_teacher_sequence(tokenizer: Any, prompt: str, doc_char_spans: Sequence[tuple[int, int]],
                           steps: Sequence[str], answer: str) -> TeacherSequence:
    """Tokenise prompt + canonical reply once and map every span through the offsets."""
    reply, step_chars, answer_chars = canonical_reply(steps, answer)
    text = extend_prompt(prompt, reply)
    ids, _, offsets = encode_prompt(tokenizer, text, offsets=True)
    assert offsets is not None
    base = len(prompt)
    return TeacherSequence(
        input_ids=ids,
        doc_spans=[char_span_to_tokens(offsets, s) for s in doc_char_spans],
        step_spans=[char_span_to_tokens(offsets, (a + base, b + base)) for a, b in step_chars],
        answer_span=char_span_to_tokens(offsets, (answer_chars[0] + base, answer_chars[1] + base)),
        text=text,
    )
