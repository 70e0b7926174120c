"""The generated pages of the documentation site (docs/reference/cli.md, docs/reference/run-files.md) are
current: generated from the command line's parser and the run files' record types, never edited by hand."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from docs.sitegen.reference import cli_reference, documented_records, run_files_reference
from purecover.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
RUN_FILES_PAGE = ROOT / "docs" / "reference" / "run-files.md"
REGENERATE = "regenerate it with `python docs/generate.py`"


def test_docs_reference_cli_md_is_current():
    assert CLI_PAGE.read_text(encoding="utf-8") == cli_reference(build_parser()), f"{CLI_PAGE} is stale: {REGENERATE}"


def test_docs_reference_run_files_md_is_current():
    assert RUN_FILES_PAGE.read_text(encoding="utf-8") == run_files_reference(), \
        f"{RUN_FILES_PAGE} is stale: {REGENERATE}"


def test_every_subcommand_and_option_is_documented():
    parser = build_parser()
    text = cli_reference(parser)
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"data", "label", "pipeline", "select", "score", "publish"} <= set(subs.choices)
    for name, sub in subs.choices.items():
        section = text.split(f"## `purecover {name}` {{#purecover-{name}}}", 1)
        assert len(section) == 2, f"purecover {name} has no section"
        body = section[1].split("\n## ", 1)[0]
        assert (sub.description or "")[:40] in body
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in body, f"purecover {name} {flag} is not documented"


def test_the_cli_page_follows_a_new_option():
    """An option added to a subcommand shows up in the page (the page is read off the parser)."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    subs.choices["report"].add_argument("--brand-new", metavar="X", help="a new option")
    text = cli_reference(parser)
    assert "| `--brand-new` | `X` |  | a new option |" in text
    assert "[--brand-new X]" in text


def test_every_record_and_field_is_documented():
    text = run_files_reference()
    found = documented_records()
    assert {"CandidateRecord", "LabelRecord", "SelectionRecord", "StageManifest", "TuneRow"} <= set(found)
    for name, cls in found.items():
        assert f"\n### {name}\n" in text, f"record {name} has no section"
        body = text.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        fields = cls.model_fields if issubclass(cls, BaseModel) else cls.__annotations__
        for field in fields:
            assert f"| `{field}` |" in body, f"{name}.{field} has no row"
    assert "| `qid` | str | required | The question's id, unique in the file. |" in text  # from the Field
    assert "| `selected` | list[int (>= 0)] | required |" in text  # constraints of annotated types
    assert "[CandidateDoc](#candidatedoc)" in text  # nested records link to their section


def test_generate_check_passes_on_the_committed_pages():
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "generate.py"), "--check"], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prose_of_the_cli_page_has_no_stray_emphasis_and_every_option_says_what_it_does():
    """A `*` in a help text (``lancer_*``, ``plots/*.png``) is escaped outside code spans, so the rendered page
    shows no italics between them; every option's row has a description (``--log-level`` had none)."""
    import re

    from markdown import markdown

    page = cli_reference(build_parser())
    html = markdown(page, extensions=["tables"])
    assert "<em>" not in html and "lancer_*" in html and "plots/*.png" in html
    rows = re.findall(r"^\| `-.*\|$", page, flags=re.M)
    assert len(rows) > 50 and any(r.startswith("| `--log-level`") for r in rows)
    for row in rows:
        assert row.rstrip("|").replace("\\|", "").split("|")[-1].strip(), row
