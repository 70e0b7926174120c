"""Every prompt wording purecover sends to a model, as template files in this folder, and the one loader.

- ``reasoning`` (reasoning.txt): the teacher's reasoning prompt, user message;
- ``reasoning_example`` (reasoning_example.txt): a worked example of the reply's format (``teacher.format_example``);
- ``reasoning_system`` (reasoning_system.txt): its system message;
- ``lancer_subquestion`` (lancer_subquestion.txt): LANCER, the teacher writes sub-questions;
- ``lancer_system`` (lancer_system.txt): the system message of our sub-question prompt;
- ``lancer_rating`` (lancer_rating.txt): LANCER, the teacher rates a document from 0 to 5;
- ``selector`` (selector.txt): the student selector's system message and instructions;
- ``rag_answer`` (rag_answer.txt): the generator's answer prompt in the RAG evaluation.

`PROMPTS` describes each one (placeholders, the recipe key that replaces it); `load_prompt` reads
ours or a user's file and checks it. ``purecover prompts`` lists them and prints any of them.

File format. A template is UTF-8 text with ``{name}`` placeholders (`str.format` fields without
conversions or format specs); ``{{`` and ``}}`` are literal braces. A placeholder the template does
not take, a missing required one, or a malformed brace is a `TemplateError` that names the file and
the placeholder. Our files end with one newline, which is not part of the text. A prompt made of
several parts (``selector``, ``rag_answer``) is one file in which each part starts with a line
``[[part]]``; a part's text is the lines up to the next such line, without the blank lines around
it. A user's file for such a prompt may hold only some of the parts: the others keep our wording.

Rendering these templates with the values the code passes gives, byte for byte, the prompts that
earlier versions wrote as string constants: the hashes recorded in labels, calibration files and
exported selectors stay valid.
"""

from __future__ import annotations

import functools
import hashlib
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Formatter
from typing import Any

__all__ = ["PROMPTS", "Placeholders", "Prompt", "PromptSpec", "TemplateError", "check_recipe_prompts",
           "check_template_text", "effective_prompt", "load_prompt", "parse_parts", "prompt_listing", "prompt_names", "recipe_override",
           "template_placeholders"]


class TemplateError(ValueError):
    """A prompt template that cannot be used; the message names the file and the placeholder."""


@dataclass(frozen=True)
class Placeholders:
    """What one template (or one part of a template) takes: `required` and `optional` names; those in `once`
    may occur at most once."""

    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    once: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.required, *self.optional)

    def describe(self) -> str:
        """``{a}, {b} (once), {c} (optional)``, or ``none``."""
        words = [f"{{{n}}}" + (" (once)" if n in self.once else "") for n in self.required]
        words += [f"{{{n}}} (optional)" for n in self.optional]
        return ", ".join(words) or "none"


@dataclass(frozen=True)
class PromptSpec:
    """One prompt of `PROMPTS`: its file in this folder, what it is for and what it takes.

    `parts`: part name -> placeholders; a single-message template has the one part ``""``. `kind`: how
    error messages name it ("the reasoning template"). `recipe_key`: the recipe key that replaces it (None:
    fixed). `keep_final_newline`: a user's file is used as read, final newline included (the LANCER files,
    as before); otherwise one final newline is dropped.
    """

    name: str
    file: str
    purpose: str
    kind: str
    parts: Mapping[str, Placeholders]
    recipe_key: str | None = None
    recipe_note: str = ""
    keep_final_newline: bool = False

    @property
    def sectioned(self) -> bool:
        """Whether the file is made of ``[[part]]`` sections."""
        return tuple(self.parts) != ("",)

    def describe_placeholders(self) -> str:
        if not self.sectioned:
            return self.parts[""].describe()
        return "; ".join(f"[[{part}]] {takes.describe()}" for part, takes in self.parts.items())


_ONE = Placeholders
PROMPTS: dict[str, PromptSpec] = {spec.name: spec for spec in (
    PromptSpec(
        "reasoning", "reasoning.txt",
        "The teacher's reasoning prompt (user message): the candidate documents, the question and the reply "
        "format ([Step N]: lines, then [Answer]:); our wording of the paper's six instructions.",
        "reasoning", {"": _ONE(("documents", "question"), ("max_steps",), once=("documents",))},
        recipe_key="teacher.prompt_file"),
    PromptSpec(
        "reasoning_example", "reasoning_example.txt",
        "A worked example of the reasoning reply's format, added at the end of the reasoning prompt's user message "
        "with teacher.format_example: true (for small teachers that drift from the format).",
        "reasoning example", {"": _ONE()}),
    PromptSpec(
        "reasoning_system", "reasoning_system.txt", "The system message of the teacher's reasoning prompt.",
        "reasoning system", {"": _ONE()},
        recipe_key="teacher.system_prompt", recipe_note="the text itself, not a file; empty: no system message"),
    PromptSpec(
        "lancer_subquestion", "lancer_subquestion.txt",
        "LANCER: the teacher breaks the question into {n} sub-questions (user message).",
        "subquestion", {"": _ONE(("question", "n"))},
        recipe_key="teacher.lancer.subquestion_template", recipe_note="a file replacing the whole message; it "
        "runs without a system message", keep_final_newline=True),
    PromptSpec(
        "lancer_system", "lancer_system.txt",
        "LANCER: the system message of our sub-question prompt (not sent with a custom sub-question file).",
        "LANCER system", {"": _ONE()}),
    PromptSpec(
        "lancer_rating", "lancer_rating.txt",
        "LANCER: the teacher rates how well a document answers the question joined with one sub-question, "
        "0 to 5 (user message, no system message).",
        "rating", {"": _ONE(("question", "subquestion", "document"))},
        recipe_key="teacher.lancer.rating_template", keep_final_newline=True),
    PromptSpec(
        "selector", "selector.txt",
        "The student selector's system message and the instructions heading its user message; the layout "
        "around them (question, lettered passages, question again) is fixed.",
        "selector", {"system": _ONE(), "instructions": _ONE()},
        recipe_key="student.prompt_file",
        recipe_note="used in training; selector_config.json records the wording, which the selector then uses"),
    PromptSpec(
        "rag_answer", "rag_answer.txt",
        "The RAG evaluation's answer prompt: system message ({reply}: yes_no_reply for StrategyQA, reply "
        "otherwise; closed_book_* without passages), one line per selected passage, the user message.",
        "RAG answer", {
            "system": _ONE((), ("reply",)),
            "closed_book_system": _ONE((), ("reply",)),
            "reply": _ONE(),
            "yes_no_reply": _ONE(),
            "document": _ONE(("text",), ("i", "title")),
            "untitled_document": _ONE(("text",), ("i",)),
            "user": _ONE(("documents", "question"), once=("documents",)),
            "closed_book_user": _ONE(("question",)),
        },
        recipe_key="eval.prompt_file"),
)}


def prompt_names() -> list[str]:
    """The names of `PROMPTS`, in listing order."""
    return list(PROMPTS)


def _spec(name: str) -> PromptSpec:
    try:
        return PROMPTS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, PROMPTS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TemplateError(f"unknown prompt {name!r}{hint} (prompts: {', '.join(PROMPTS)})") from None


# ---------------------------------------------------------------------------- checking


def template_placeholders(text: str, source: str) -> list[str]:
    """The placeholder names of `text`, in order (repeats kept); TemplateError naming `source` for bad braces."""
    try:
        parsed = list(Formatter().parse(text))
    except ValueError as exc:
        raise TemplateError(f"{source}: malformed braces ({exc}); write {{{{ and }}}} for literal braces") from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise TemplateError(f"{source}: placeholder {{{name}}} has a conversion or format spec; "
                                f"write a plain {{{name}}}")
        names.append(name)
    return names


def check_template_text(text: str, takes: Placeholders, source: str, what: str) -> str:
    """`text` if its placeholders are those of `takes` (every required one, no other, each of `once` at most
    once); else TemplateError naming `source`, `what` ("the rating template") and the placeholder."""
    names = template_placeholders(text, source)
    allowed = takes.names
    listed = ", ".join(f"{{{n}}}" for n in allowed) or "no placeholder"
    for name in names:
        if name not in allowed:
            raise TemplateError(f"{source}: unknown placeholder {{{name}}} in {what} "
                                f"(it takes {listed}; write {{{{ and }}}} for literal braces)")
    for name in takes.required:
        if name not in names:
            needs = ", ".join(f"{{{n}}}" for n in takes.required)
            raise TemplateError(f"{source}: {what} lacks the placeholder {{{name}}} (it needs {needs})")
    for name in takes.once:
        if names.count(name) > 1:
            raise TemplateError(f"{source}: the placeholder {{{name}}} occurs {names.count(name)} times in {what}; "
                                "it must occur once")
    return text


_HEADER = re.compile(r"^\[\[([A-Za-z_][A-Za-z0-9_]*)\]\][ \t]*$")


def parse_parts(text: str, source: str, known: tuple[str, ...] | None = None) -> dict[str, str]:
    """The ``[[part]]`` sections of `text`: part -> its text (without the blank lines around it).

    TemplateError naming `source` for text before the first header, a part given twice, or (with `known`) a
    part not in `known`.
    """
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        header = _HEADER.match(line)
        if header is None:
            if current is None:
                if line.strip():
                    raise TemplateError(f"{source}: line {number}: text before the first [[part]] header")
                continue
            current.append(line)
            continue
        part = header.group(1)
        if known is not None and part not in known:
            raise TemplateError(f"{source}: line {number}: unknown part [[{part}]] (parts: "
                                + ", ".join(f"[[{p}]]" for p in known) + ")")
        if part in parts:
            raise TemplateError(f"{source}: line {number}: the part [[{part}]] is given twice")
        current = parts[part] = []
    if not parts:
        expected = ", ".join(f"[[{p}]]" for p in known) if known else "[[name]]"
        raise TemplateError(f"{source}: no [[part]] header (expected sections {expected})")
    return {part: "\n".join(lines).strip("\n") for part, lines in parts.items()}


def _what(spec: PromptSpec, part: str) -> str:
    return f"the {spec.kind} template" if not part else f"the [[{part}]] part of the {spec.kind} template"


# ---------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Prompt:
    """A checked prompt template: ours (`source` a file of this folder) or a user's file.

    `text` is the template as used; for a prompt of several parts, every part in our order as
    ``[[part]]`` sections (ours for the parts a user's file leaves out). `parts` maps each part to its
    template (the one part ``""`` for a single message).
    """

    name: str
    text: str
    source: str
    parts: Mapping[str, str] = field(repr=False)

    @property
    def spec(self) -> PromptSpec:
        return PROMPTS[self.name]

    @property
    def sha256(self) -> str:
        """sha256 (hex) of `text`."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Every placeholder the template takes (over all its parts, each once)."""
        return tuple(dict.fromkeys(n for takes in self.spec.parts.values() for n in takes.names))

    @property
    def is_default(self) -> bool:
        """Whether this is our wording, unchanged."""
        return self.text == load_prompt(self.name).text

    def part(self, part: str = "") -> str:
        """The template text of `part` (``""``: the single message)."""
        return self.parts[part]

    def render(self, part: str = "", /, **values: Any) -> str:
        """`part` with its placeholders replaced by `values` (``{{``/``}}`` become braces)."""
        return self.parts[part].format(**values)


def _join_parts(parts: Mapping[str, str], order: tuple[str, ...]) -> str:
    return "\n\n".join(f"[[{p}]]\n{parts[p]}" for p in order)


def _read(path: Path, spec: PromptSpec) -> str:
    try:  # utf-8-sig: a byte-order mark some editors write first is an encoding mark, not template text
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TemplateError(f"{path}: the {spec.kind} template is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read the {spec.kind} template ({exc.strerror or exc})") from None


def _build(spec: PromptSpec, raw: str, source: str, ours: Prompt | None) -> Prompt:
    """Check `raw` (a file's text, final newline already handled) against `spec`; parts missing from a user's
    sectioned file come from `ours`."""
    if not spec.sectioned:
        check_template_text(raw, spec.parts[""], source, _what(spec, ""))
        return Prompt(spec.name, raw, source, {"": raw})
    order = tuple(spec.parts)
    given = parse_parts(raw, source, order)
    for part, text in given.items():
        check_template_text(text, spec.parts[part], source, _what(spec, part))
    missing = [p for p in order if p not in given]
    if missing and ours is None:
        raise TemplateError(f"{source}: the {spec.kind} template lacks the parts "
                            + ", ".join(f"[[{p}]]" for p in missing))
    parts = {p: given[p] if p in given else ours.parts[p] for p in order}  # type: ignore[union-attr]
    return Prompt(spec.name, _join_parts(parts, order), source, parts)


@functools.cache
def _ours(name: str) -> Prompt:
    spec = _spec(name)
    path = resources.files(__package__) / spec.file
    raw = path.read_text(encoding="utf-8").removesuffix("\n")
    return _build(spec, raw, str(path), None)


def load_prompt(name: str, path: str | Path | None = None) -> Prompt:
    """The prompt `name` of `PROMPTS`: ours (`path` None) or the user's file `path`, checked.

    A user's single-message file is used as read, less one final newline (except the LANCER files, used
    as read); a sectioned one may hold only some parts, the others keep our wording. Raises TemplateError
    (a ValueError) naming the file and the placeholder or part at fault.
    """
    spec = _spec(name)
    if path is None:
        return _ours(name)
    raw = _read(Path(path), spec)
    if not spec.keep_final_newline:
        raw = raw.removesuffix("\n")
    return _build(spec, raw, str(path), _ours(name))


def recipe_override(recipe: Any, name: str) -> str | None:
    """The value of the recipe key that replaces prompt `name` (`PromptSpec.recipe_key`), None when unset or
    when the prompt has no such key. LANCER's files count only with ``teacher.lancer.enabled``."""
    spec = _spec(name)
    if spec.recipe_key is None:
        return None
    node: Any = recipe
    for attr in spec.recipe_key.split("."):
        node = getattr(node, attr, None)
    if spec.recipe_key.startswith("teacher.lancer.") and not recipe.teacher.lancer.enabled:
        return None
    return node


def check_recipe_prompts(recipe: Any) -> None:
    """Load and check every prompt file `recipe` names (``teacher.prompt_file``, LANCER's two files when
    LANCER is on, ``eval.prompt_file``); TemplateError whose message starts with the recipe key."""
    for name, spec in PROMPTS.items():
        if spec.recipe_key is None or name == "reasoning_system":  # no key, or the text itself
            continue
        path = recipe_override(recipe, name)
        if path is not None:
            try:
                load_prompt(name, path)
            except TemplateError as exc:
                raise TemplateError(f"{spec.recipe_key}: {exc}") from None


def effective_prompt(name: str, recipe: Any = None) -> tuple[str | None, str]:
    """(the wording of prompt `name` that `recipe`'s runs send, where it comes from). The text is None when no
    such message is sent (an empty ``teacher.system_prompt``; our sub-question system message next to a custom
    sub-question file). Without a recipe: ours. A user's file is loaded and checked (TemplateError)."""
    spec = _spec(name)
    ours = load_prompt(name)
    where = f"ours ({spec.file})"
    if recipe is None:
        return ours.text, where
    if name == "lancer_system" and recipe_override(recipe, "lancer_subquestion"):
        return None, "not sent: teacher.lancer.subquestion_template replaces the sub-question prompt, system " \
                     "message included"
    value = recipe_override(recipe, name)
    if value is None:
        text, where = ours.text, where if spec.recipe_key is None else f"{where}; {spec.recipe_key} is not set"
    elif name == "reasoning_system":  # the recipe holds the text itself
        return (value or None), f"{spec.recipe_key} in the recipe" + ("" if value else " (empty: no system message)")
    else:
        text, where = load_prompt(name, value).text, f"{spec.recipe_key}: {value}"
    if name == "reasoning" and getattr(getattr(recipe, "teacher", None), "format_example", False):
        example = PROMPTS["reasoning_example"].file
        return f"{text}\n\n{load_prompt('reasoning_example').text}", f"{where}; then {example} " \
                                                                      "(teacher.format_example)"
    return text, where


def prompt_listing(recipe: Any = None) -> str:
    """Every prompt of `PROMPTS`: name, file, what it is for, placeholders and the recipe key that replaces it
    (with `recipe`: the value it sets)."""
    lines = ["Prompt templates, files in purecover/prompts/ (`purecover prompts NAME` prints one):", ""]
    width = max(len(n) for n in PROMPTS)
    pad = " " * 18

    def wrapped(label: str, text: str) -> list[str]:
        return textwrap.wrap(text, 110, initial_indent=f"    {label:<14}", subsequent_indent=pad,
                             break_on_hyphens=False)

    for spec in PROMPTS.values():
        lines.append(f"{spec.name:<{width}}  {spec.file}")
        lines += wrapped("for:", spec.purpose)
        if spec.sectioned:
            rows = [f"[[{part}]] {takes.describe()}" for part, takes in spec.parts.items()]
            lines += [f"    {'placeholders:':<14}{rows[0]}", *(pad + r for r in rows[1:])]
        else:
            lines.append(f"    {'placeholders:':<14}{spec.describe_placeholders()}")
        if spec.recipe_key is None:
            key = "none (fixed)"
        else:
            key = spec.recipe_key
            if recipe is not None:
                value = recipe_override(recipe, spec.name)
                key += " = " + ("(not set: ours)" if value is None else repr(value))
        lines.append(f"    {'replaced by:':<14}{key}")  # one line: a path is never cut
        if spec.recipe_note:
            lines += wrapped("", f"({spec.recipe_note})")
        lines.append("")
    return "\n".join(lines)
