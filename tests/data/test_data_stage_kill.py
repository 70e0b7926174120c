"""`purecover data` over a corpus file, SIGKILLed while it builds the corpus store and while it builds the
BM25 index, rerun each time: the candidates equal those of an uninterrupted run, and a corpus file that
changes afterwards is stored and indexed again."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data import load_examples
from purecover.data.corpus import corpus_from_examples
from purecover.data.data_stage import run_data_stage
from purecover.records import DataSummary
from tests.conftest import demo_corpus_file
from tests.process_helpers import run_and_kill_when

ROOT = Path(__file__).resolve().parents[2]


def _command(run_dir: Path, corpus: Path, index_dir: Path) -> list[str]:
    return [sys.executable, "-m", "purecover.cli", "data", "-q", "--set", f"run_dir={run_dir}", "--set", "data.path=demo",
            "--set", f"data.corpus={corpus}", "--set", f"data.index_dir={index_dir}", "--set", "data.k1=8"]


def _run_here(run_dir: Path, corpus: Path, index_dir: Path) -> DataSummary:
    """The same data stage in this process (the killed runs need a process of their own; reruns do not)."""
    recipe = load_recipe(None, [f"run_dir={run_dir}", "data.path=demo", f"data.corpus={corpus}",
                                f"data.index_dir={index_dir}", "data.k1=8"])
    summary = run_data_stage(recipe, show_progress=False)
    assert isinstance(summary, DataSummary)
    return summary


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


@pytest.mark.slow
def test_killed_while_storing_and_while_indexing_then_rerun_gives_the_uninterrupted_candidates(tmp_path):
    corpus = demo_corpus_file(tmp_path / "corpus.jsonl", 40_000)
    reference = tmp_path / "reference"
    _run_here(reference, corpus, tmp_path / "reference-index")

    run_dir, index_dir = tmp_path / "run", tmp_path / "index"
    cmd = _command(run_dir, corpus, index_dir)

    def storing() -> bool:
        return any(p.stat().st_size > 100_000 for p in index_dir.glob(".corpus-*/passages.arrow"))

    def indexing() -> bool:
        return any(index_dir.glob(".bm25-*/run-*"))

    run_and_kill_when(cmd, storing, what="data stage (storing the corpus)", cwd=ROOT, env=_env())
    assert not list(index_dir.glob("corpus-*")) and not (run_dir / "candidates.jsonl").exists()
    run_and_kill_when(cmd, indexing, what="data stage (building the BM25 index)", cwd=ROOT, env=_env())
    assert list(index_dir.glob("corpus-*")) and not list(index_dir.glob("bm25-*"))
    summary = _run_here(run_dir, corpus, index_dir)
    assert (run_dir / "candidates.jsonl").read_bytes() == (reference / "candidates.jsonl").read_bytes()
    assert summary.index == "built" and summary.corpus_size == 40_000 + len(
        corpus_from_examples(load_examples("hotpotqa", "demo")))
    assert not [p for p in index_dir.iterdir() if p.name.startswith(".") and p.is_dir()], "killed builds cleaned"

    # A second run over the same corpus loads everything; a changed corpus file is stored and indexed again.
    again = _run_here(tmp_path / "again", corpus, index_dir)
    assert again.index == "loaded"
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "new", "title": "Newcomer", "text": "A passage added later."}) + "\n")
    os.utime(corpus, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = _run_here(tmp_path / "changed", corpus, index_dir)
    assert changed.index == "built" and changed.corpus_fingerprint != again.corpus_fingerprint
    assert changed.corpus_size == (summary.corpus_size or 0) + 1
