"""Every `python benchmarks/<script>.py ...` command that the README, the docs or the Makefile shows parses with
that script's own options, as written (runs no benchmark: the script stops right after parsing)."""

from __future__ import annotations

import re
import shlex
import sys

import pytest

from tests.test_benchmarks_summary import BENCH, _load

ROOT = BENCH.parent
COMMAND = re.compile(r"python benchmarks/(?P<script>[a-z_]+)\.py(?P<args>[^`\n]*)")


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(where, script, argv) of each documented benchmark command; `\\` continuations joined, `#` comments cut."""
    found = []
    for path in [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = re.sub(r"\\\n\s*", " ", path.read_text())
        for m in COMMAND.finditer(text):
            args = m.group("args").split(" #")[0]
            argv = shlex.split(args, comments=False)
            found.append((f"{path.relative_to(ROOT)}: {m.group(0).strip()}", m.group("script"), argv))
    return found


COMMANDS = documented_commands()


class _Parsed(Exception):
    pass


def test_the_docs_show_benchmark_commands():
    scripts = {script for _, script, _ in COMMANDS}
    assert {"student_readout", "real_models", "gpu_check", "demo_timing"} <= scripts


@pytest.mark.parametrize("where,script,argv", COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_a_documented_benchmark_command_parses(where, script, argv, monkeypatch):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    from benchlib import harness  # the module the scripts use: its parse is replaced for them

    if script == "summarize":
        assert argv == [], where  # summarize.py takes no options
        return
    real_parse = harness.parse
    seen = {}

    def parse_then_stop(parser, args=None):
        seen["args"] = real_parse(parser, args)  # argparse exits 2 on an unknown option or a bad value
        raise _Parsed

    monkeypatch.setattr(harness, "parse", parse_then_stop)
    module = _load(script)
    with pytest.raises(_Parsed):
        module.main(argv)
    assert seen["args"] is not None, where


def test_an_unknown_option_fails_to_parse(capsys):
    """The check above would catch a documented option the script does not have: argparse stops with status 2."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    module = _load("student_readout")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--no-such-option"])
    assert exit_.value.code == 2 and "--no-such-option" in capsys.readouterr().err
