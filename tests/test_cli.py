from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.cli import main

DEMO = str(Path(__file__).resolve().parents[1] / "configs" / "recipes" / "demo_cpu.yaml")


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "data" in out and "--set section.key=value" in out


def test_stage_help_describes_recipe_and_set(capsys):
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    out = capsys.readouterr().out
    assert "candidates.jsonl" in out and "--set SECTION.KEY=VALUE" in out


def test_config_prints_resolved_recipe(capsys):
    assert main(["config", DEMO, "--set", "data.k1=7"]) == 0
    out = capsys.readouterr().out
    assert "k1: 7" in out and "path: demo" in out


def test_unknown_key_exit_code_and_message(capsys):
    assert main(["config", "--set", "data.kk1=3"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'data.kk1'" in err and "did you mean 'data.k1'" in err


def test_data_command_writes_candidates(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["data", DEMO, "-q", "--set", f"run_dir={run_dir}", "--set", "data.limit=4"])
    assert code == 0
    lines = (run_dir / "candidates.jsonl").read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["qid"] == "demo-001"
    assert "supporting_recall@10" in capsys.readouterr().out


def test_data_errors_are_reported_not_raised(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"_id": "x"}]')
    code = main(["data", "-q", "--set", f"run_dir={tmp_path / 'r'}", "--set", f"data.path={bad}"])
    assert code == 1
    assert "field 'question': missing" in capsys.readouterr().err


@pytest.mark.parametrize("level", ["DEBUG", "INFO"])
def test_debug_log_level_shows_the_traceback_of_a_reported_error(tmp_path, level):
    """Known errors (ValueError, OSError, ...) are one line; with --log-level DEBUG their traceback too."""
    bad = tmp_path / "bad.json"
    bad.write_text('[{"_id": "x"}]')
    proc = subprocess.run([sys.executable, "-m", "purecover", "data", "-q", "--log-level", level,
                           "--set", f"run_dir={tmp_path / 'r'}", "--set", f"data.path={bad}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "field 'question': missing" in proc.stderr
    assert ("Traceback (most recent call last)" in proc.stderr) == (level == "DEBUG")


def test_console_script_entry_point(tmp_path):
    result = subprocess.run([sys.executable, "-m", "purecover", "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("purecover ")


@pytest.mark.samples
def test_issue_command_on_real_hotpotqa(sample_file, tmp_path):
    """The command of issue 2's 'done when', as a user types it."""
    run_dir = tmp_path / "x"
    result = subprocess.run(
        [sys.executable, "-m", "purecover", "data", DEMO, "-q",
         "--set", "data.dataset=hotpotqa", "--set", f"data.path={sample_file('hotpotqa')}",
         "--set", "data.corpus=shared", "--set", "data.k1=20", "--set", f"run_dir={run_dir}"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run_dir / "candidates.jsonl").read_text().splitlines()]
    assert len(records) == 252 and all(len(r["docs"]) == 20 for r in records)


def test_score_command_json(tmp_path, capsys):
    from tests.conftest import hotpot_record, write_json, write_jsonl

    gold = write_json(tmp_path / "gold.json", [hotpot_record("q1"), hotpot_record("q2", answer="yes")])
    preds = write_jsonl(tmp_path / "p.jsonl", [{"qid": "q1", "prediction": "the Mirren"},
                                               {"qid": "q2", "prediction": "no"}])
    assert main(["score", str(preds), "--dataset", "hotpotqa", "--gold", str(gold), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"em": 0.5, "f1": 0.5, "acc": 0.5, "n": 2, "missing": 0}


# --- Ctrl-C that a library re-raised as another error ---------------------------------------------------------

def _raise_wrapped_interrupt_as_transformers_does():
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        raise ModuleNotFoundError("Could not import module 'TrainerCallback'. Are this object's requirements "
                                  "defined correctly?") from exc


def _raise_interrupt_as_context():
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise RuntimeError("cleanup failed") from None  # context kept (suppressed), cause hidden


def _raise_interrupt_deep_in_the_chain():
    try:
        _raise_wrapped_interrupt_as_transformers_does()
    except ModuleNotFoundError as exc:
        raise OSError("stage failed") from exc


def _raise_plain_interrupt():
    raise KeyboardInterrupt


def _with_pipeline_handler(monkeypatch, raiser) -> None:
    import purecover.cli as cli

    help_text, description, _ = cli._COMMANDS["pipeline"]

    def handler(args):
        raiser()

    monkeypatch.setitem(cli._COMMANDS, "pipeline", (help_text, description, handler))


@pytest.mark.parametrize("raiser", [_raise_wrapped_interrupt_as_transformers_does, _raise_interrupt_as_context,
                                    _raise_interrupt_deep_in_the_chain, _raise_plain_interrupt],
                         ids=["module-not-found-from-ctrl-c", "context", "deep", "plain"])
def test_ctrl_c_wrapped_in_another_error_is_an_interruption(monkeypatch, capsys, raiser):
    _with_pipeline_handler(monkeypatch, raiser)
    assert main(["pipeline", DEMO, "-q"]) == 130
    err = capsys.readouterr().err
    assert "purecover pipeline: interrupted; rerun the same command to resume" in err
    assert "unexpected error" not in err and "TrainerCallback" not in err


def _raise_module_not_found():
    raise ModuleNotFoundError("No module named 'nothing_here'")


def _raise_chained_error():
    try:
        raise ValueError("inner")
    except ValueError as exc:
        raise RuntimeError("outer") from exc


@pytest.mark.parametrize(("raiser", "expected"), [(_raise_module_not_found, "unexpected error: ModuleNotFoundError"),
                                                  (_raise_chained_error, "error: outer")])
def test_errors_without_a_ctrl_c_are_still_errors(monkeypatch, capsys, raiser, expected):
    _with_pipeline_handler(monkeypatch, raiser)
    assert main(["pipeline", DEMO, "-q"]) == 1
    err = capsys.readouterr().err
    assert expected in err and "interrupted" not in err


def test_command_line_entries_drop_library_notices():
    """DeepSpeed's "Setting accelerator to CPU" (printed on import, even to build a tokenizer) and transformers'
    deprecations of its own arguments are dropped by the entries' `quiet_library_notices`; other warnings stay."""
    script = ("import sys, warnings\n"
              "if sys.argv[1] == 'quiet':\n"
              "    from purecover.utils.entry import quiet_library_notices; quiet_library_notices()\n"
              "import deepspeed.accelerator\n"
              "deepspeed.accelerator.get_accelerator()\n"
              "warnings.warn('`past_key_values` is deprecated and will be removed', FutureWarning)\n"
              "warnings.warn('something else is deprecated', FutureWarning)\n"
              "from transformers.utils import generic, logging as tl\n"
              "tl.get_logger('transformers.utils.generic').warning_once("
              "'`past_key_values`/`cache_params` are deprecated. Use `cache` instead.')\n")
    outputs = {}
    for mode in ("loud", "quiet"):
        done = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=300,
                              check=True, env={k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"})
        outputs[mode] = done.stdout + done.stderr
    assert "Setting accelerator to CPU" in outputs["loud"] and "past_key_values" in outputs["loud"]
    assert "cache_params` are deprecated" in outputs["loud"]
    assert "Setting accelerator to CPU" not in outputs["quiet"] and "past_key_values" not in outputs["quiet"]
    assert "something else is deprecated" in outputs["quiet"]


def test_the_help_examples_parse_and_the_quick_ones_run_as_written(tmp_path, monkeypatch, capsys):
    """Every example of `purecover --help` is a valid command line naming files that exist or that the demo
    writes; the ones that take seconds run as written in a clone-like folder (the others run in their own
    tests: the pipeline, tune, evaluate and serve on the demo)."""
    import shlex
    import shutil

    from purecover.cli import _EPILOG, build_parser

    repo = Path(__file__).resolve().parents[1]
    text = _EPILOG.split("examples:\n", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    examples = [shlex.split(line) for line in text.splitlines() if line.strip()]
    assert len(examples) >= 14 and all(argv[0] == "purecover" for argv in examples)
    parser = build_parser()
    for argv in examples:
        parser.parse_args(argv[1:])  # exits (SystemExit) on an invalid command line
        for word in argv:
            if word.startswith("configs/"):
                assert (repo / word).is_file(), word
            if word.startswith("runs/") and argv[1] in ("label-report", "serve"):
                assert word.startswith("runs/demo"), f"{word}: the demo writes runs/demo (demo_cpu.yaml)"
    shutil.copytree(repo / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    quick = [a for a in examples if a[1] in ("config", "prompts") or (a[1] == "data" and "demo_cpu.yaml" in a[2])
             or "--dry-run" in a]
    assert len(quick) >= 5
    for argv in quick:
        assert main(argv[1:]) == 0, shlex.join(argv)
    capsys.readouterr()
    assert (tmp_path / "runs" / "demo" / "candidates.jsonl").is_file()
    assert (tmp_path / "runs" / "k10" / "candidates.jsonl").is_file()
