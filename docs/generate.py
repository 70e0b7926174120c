"""Regenerate the generated pages of the documentation site (run from the repository root).

    python docs/generate.py           # rewrite docs/reference/cli.md, docs/reference/run-files.md, docs/recipe.md
    python docs/generate.py --check   # exit 1 naming every page that is not current

tests/test_docs_reference.py and tests/test_recipe_reference.py fail when a committed page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sitegen.reference import (  # docs/sitegen: the site's own code, beside this
    cli_reference,
    run_files_reference,
)

from purecover.cli import build_parser
from purecover.config.reference import recipe_reference

DOCS = Path(__file__).resolve().parent


def pages() -> dict[Path, str]:
    """Each generated page and the text it must hold."""
    return {
        DOCS / "reference" / "cli.md": cli_reference(build_parser()),
        DOCS / "reference" / "run-files.md": run_files_reference(),
        DOCS / "recipe.md": recipe_reference(),
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in pages().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{path.relative_to(DOCS.parent)}: {'stale' if check else 'rewritten'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
