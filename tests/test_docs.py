"""The README stays a front door and the documentation site stays whole: short README, working links,
every page in the navigation, no pointers to files the repository does not have.

`make docs` (mkdocs build --strict) checks the site's own links too, but needs the docs extra; these
checks run with the test suite alone, and also cover README.md, which the site does not build.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(``.+?``|`[^`\n]+`)")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$", re.M)
_ATTR_ID = re.compile(r"\s*\{[^}]*#([\w-]+)[^}]*\}\s*$")


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code (links there are not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text).replace("\\|", "|")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """Every heading anchor of Markdown file `path` (explicit ``{#id}`` or the slug; repeats get ``_1``...)."""
    found: set[str] = set()
    for _, title in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        explicit = _ATTR_ID.search(title)
        anchor = explicit.group(1) if explicit else _slug(title)
        unique, n = anchor, 0
        while unique in found:
            n += 1
            unique = f"{anchor}_{n}"
        found.add(unique)
    return found


def relative_links(path: Path) -> list[str]:
    """The relative link targets of Markdown file `path` (no scheme, no mail, no bare anchor)."""
    targets = _LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` whose file does not exist, or whose Markdown target lacks the anchor."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    return broken


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def _doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; the manual belongs in docs/ (at most " \
                                      f"{MAX_README_LINES})"


def test_every_relative_link_of_the_readme_works():
    links = relative_links(README)
    assert any(link.startswith("docs/") for link in links), "the README links to no documentation page"
    assert broken_links(README) == []


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_relative_link_of_a_docs_page_works(page):
    assert broken_links(page) == []


def test_every_docs_page_is_in_the_navigation_and_every_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    assert sorted(set(nav)) == sorted(nav), "a page is listed twice in mkdocs.yml's nav"
    pages = {str(p.relative_to(DOCS)) for p in _doc_pages()}
    assert sorted(pages - set(nav)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - pages) == [], "nav entries without a page"
    assert "recipe.md" in nav  # the generated recipe reference (tests/test_recipe_reference.py) is published


def test_no_pointer_to_files_outside_the_repository():
    """The design notes and reference list the project started from are not in the repository: nothing may
    point a reader at them."""
    banned = ["DESIGN " + "\u00a7", "REFERENCES" + ".md", "../" + "shared"]
    for path in [README, ROOT / "mkdocs.yml", *_doc_pages()]:
        text = path.read_text(encoding="utf-8")
        for word in banned:
            assert word not in text, f"{path.relative_to(ROOT)} mentions {word!r}"


def test_the_link_checker_catches_broken_links_and_anchors(tmp_path):
    """The checker itself fails on a missing file and a missing anchor (so a passing run means something)."""
    (tmp_path / "a.md").write_text("# Title\n\n## The `run` directory {#run-dir}\n\n### candidates.jsonl\n")
    (tmp_path / "b.md").write_text(
        "[ok](a.md#title) [ok2](a.md#run-dir) [ok3](a.md#candidatesjsonl) `[code](nope.md)`\n"
        "```\n[fenced](nope.md)\n```\n[bad](nope.md) [bad anchor](a.md#nope) [web](https://example.com)\n")
    assert broken_links(tmp_path / "b.md") == ["nope.md: no such file", "a.md#nope: no heading with anchor #nope"]


def test_each_integration_guide_says_what_its_library_sends():
    """Issue 55 (10): a user reads, in each RAG library's guide, whether the library sends usage data and how to
    stop it; purecover never sets those variables itself."""
    guides = Path(__file__).resolve().parents[1] / "docs" / "guides"
    said = {name: (guides / f"{name}.md").read_text(encoding="utf-8") for name in ("haystack", "langchain", "llamaindex")}
    assert "HAYSTACK_TELEMETRY_ENABLED=False" in said["haystack"]
    assert "LANGSMITH_TRACING" in said["langchain"]
    assert all("**Telemetry.**" in text for text in said.values())
    package = Path(__file__).resolve().parents[1] / "purecover"
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "HAYSTACK_TELEMETRY_ENABLED" not in text and "LANGSMITH_TRACING" not in text, path
