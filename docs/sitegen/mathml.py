"""Formulas in the documentation site as MathML, rendered by the browser itself: no JavaScript, no CDN, offline.

A Python-Markdown extension, added to the site's Markdown by this file as a hook of ``mkdocs.yml`` (``hooks:
[docs/sitegen/mathml.py]``: `on_config`; the site's own code, not part of the installed package), that turns

* a display formula, LaTeX between two lines holding only ``$$``, into ``<math display="block">``;
* an inline formula, ``$...$`` (no space just inside either dollar, not ``$$``), into ``<math>``,

with `latex2mathml` (the ``docs`` extra). Code spans and fenced blocks are left alone, so shell variables
such as ``$PURECOVER_API_KEY`` in code are never read as formulas. A formula LaTeX cannot parse fails the
build naming it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from markdown import Extension
from markdown.blockprocessors import BlockProcessor
from markdown.inlinepatterns import InlineProcessor

__all__ = ["MathExtension", "latex_to_mathml", "makeExtension", "on_config"]

_INLINE = r"(?<![\\$\w])\$(?![\s$])(.+?)(?<![\s\\])\$(?![\w$])"


def latex_to_mathml(latex: str, display: bool) -> str:
    """`latex` as a ``<math>`` element (``display="block"`` when `display`); ValueError naming the formula."""
    from latex2mathml.converter import convert

    try:
        return str(convert(latex.strip(), display="block" if display else "inline"))
    except Exception as exc:  # latex2mathml raises its own exception types
        raise ValueError(f"cannot render the formula {latex.strip()!r}: {type(exc).__name__}: {exc}") from None


class _Inline(InlineProcessor):
    def handleMatch(self, m: re.Match[str], data: str) -> tuple[Any, int, int]:
        html = latex_to_mathml(m.group(1), display=False)
        return self.md.htmlStash.store(html), m.start(0), m.end(0)


class _Display(BlockProcessor):
    def test(self, parent: ET.Element, block: str) -> bool:
        return block.strip().startswith("$$") and block.strip().endswith("$$") and len(block.strip()) > 4

    def run(self, parent: ET.Element, blocks: list[str]) -> None:
        latex = blocks.pop(0).strip()[2:-2]
        holder = ET.SubElement(parent, "p")
        holder.set("class", "formula")
        holder.text = self.parser.md.htmlStash.store(latex_to_mathml(latex, display=True))


class MathExtension(Extension):
    def extendMarkdown(self, md: Any) -> None:
        md.inlinePatterns.register(_Inline(_INLINE, md), "purecover_math", 185)  # before emphasis (< backtick 190)
        md.parser.blockprocessors.register(_Display(md.parser), "purecover_math_block", 105)


def makeExtension(**kwargs: Any) -> MathExtension:
    return MathExtension(**kwargs)


def on_config(config: Any) -> Any:
    """The mkdocs hook: the site's Markdown gets `MathExtension` (once, whatever the other extensions are)."""
    extensions = config["markdown_extensions"]
    if not any(isinstance(e, MathExtension) for e in extensions):
        extensions.append(MathExtension())
    return config
