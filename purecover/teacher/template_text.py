"""Prompt template files: the one brace parser and error type shared by the reasoning prompt
(`purecover.teacher.prompts`) and the LANCER prompts (`purecover.teacher.lancer`).

A template is plain text with ``{name}`` placeholders (`str.format` syntax without conversions or
format specs); ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

from pathlib import Path
from string import Formatter

__all__ = ["TemplateError", "read_template", "template_placeholders"]


class TemplateError(ValueError):
    """A prompt template that cannot be used; the message names the file and the placeholder."""


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


def read_template(path: str | Path, kind: str) -> str:
    """The UTF-8 text of the `kind` ("reasoning", "rating", ...) template file `path`; TemplateError naming the
    file when it cannot be read or is not UTF-8."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateError(f"{p}: the {kind} template is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TemplateError(f"{p}: cannot read the {kind} template ({exc.strerror or exc})") from None
