"""Shared fixtures: the real sample folder (skip when absent) and small hand-written files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from purecover.data.samples import SAMPLE_FILES, sample_data_dir

# No library's usage telemetry from the tests: Haystack's posthog thread (set up when haystack is imported)
# tries the network, which this machine and CI do not have, and its urllib3 retry warnings land in the
# captured logs of whatever test runs beside it.
for _name, _off in (("HAYSTACK_TELEMETRY_ENABLED", "False"), ("HF_HUB_DISABLE_TELEMETRY", "1"),
                    ("DO_NOT_TRACK", "1")):
    os.environ.setdefault(_name, _off)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with the most `slow` tests first. Under pytest-xdist (`make test`: --dist loadfile with
    --no-loadscope-reorder) each file runs on one worker and files are handed out in this order, so the long
    drills start early and the many quick files fill in around them, instead of one worker running a
    kill drill alone at the end. The order inside a file is kept."""
    collected = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
    slow = dict.fromkeys(collected, 0)
    for item in items:
        slow[item.path] += item.get_closest_marker("slow") is not None
    items.sort(key=lambda item: (-slow[item.path], collected[item.path]))  # stable: same-file order kept
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu and not os.environ.get("PURECOVER_GPU_TEST_DEVICE"):  # set: the gpu tests run on that device
        import torch

        if not torch.cuda.is_available():
            skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.py runs these on a GPU machine)")
            for item in gpu:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_index_dir(tmp_path_factory, monkeypatch):
    """Corpus stores, indexes and converted models of each test in its own directories, never the user's cache."""
    monkeypatch.setenv("PURECOVER_INDEX_DIR", str(tmp_path_factory.mktemp("index")))
    monkeypatch.setenv("PURECOVER_MODELS_DIR", str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    path = sample_data_dir()
    if path is None:
        pytest.skip("real sample data not found: set PURECOVER_SAMPLE_DATA or put ../shared/data beside the repo")
    return path


@pytest.fixture(scope="session")
def sample_file(sample_dir: Path):
    def get(dataset: str) -> Path:
        return sample_dir / SAMPLE_FILES[dataset]

    return get


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def hotpot_record(qid: str = "q1", **changes):
    """A small valid HotpotQA record (bridge question over two of three paragraphs)."""
    record = {
        "_id": qid,
        "question": "Which river flows through the town where Ada Brill was born?",
        "answer": "Mirren",
        "type": "bridge",
        "level": "easy",
        "supporting_facts": [["Ada Brill", 0], ["Tollbridge", 1]],
        "context": [
            ["Ada Brill", ["Ada Brill was born in Tollbridge.", " She built clocks."]],
            ["Tollbridge", ["Tollbridge is a market town.", " The river Mirren flows through it."]],
            ["Corven", ["Corven is a fishing village.", " It has a lighthouse."]],
        ],
    }
    record.update(changes)
    return record


def demo_corpus_file(path: Path, n: int) -> Path:
    """A corpus JSONL of the demo set's own paragraphs (so its questions have gold passages) among `n` generated
    passages of Zipf-distributed words (seeded), titled ``Synthetic <i // 3>``."""
    import numpy as np

    from purecover.data import corpus_from_examples, load_examples

    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(5000)])
    rows = [{"id": d.doc_id, "title": d.title, "text": d.text}
            for d in corpus_from_examples(load_examples("hotpotqa", "demo")).docs]
    rows += [{"id": f"s{i}", "title": f"Synthetic {i // 3}", "text": " ".join(words[rng.zipf(1.3, 60) % 5000])}
             for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


COVERAGE_TOPICS = [{"topic_id": "101", "query": "river flood crop losses", "nuggets": ["crops lost", "farms evacuated"]},
                   {"topic_id": "102", "query": "canal construction history", "nuggets": ["opened in 1820"]}]
COVERAGE_CORPUS = [
    {"id": "a1", "title": "Flood", "text": "The river flood destroyed crop fields across the valley."},
    {"id": "a2", "title": "Evacuation", "text": "Farms near the river were evacuated during the flood."},
    {"id": "a3", "title": "Canal", "text": "The canal construction began in 1815 and it opened in 1820."},
    {"id": "a4", "title": "Weather", "text": "Rain fell for ten days before the river rose."},
    {"id": "a5", "title": "Bridges", "text": "Two bridges over the canal were rebuilt in stone."},
]
COVERAGE_QRELS = "101 n1 a1 1\n101 n2 a2 2\n101 n1 a4 0\n102 n1 a3 1\n"


def write_coverage_collection(directory: Path) -> None:
    """A tiny coverage collection in `directory`: topics.jsonl, corpus.jsonl and qrels.txt (nugget qrels)."""
    (directory / "topics.jsonl").write_text("".join(json.dumps(t) + "\n" for t in COVERAGE_TOPICS))
    (directory / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in COVERAGE_CORPUS))
    (directory / "qrels.txt").write_text(COVERAGE_QRELS)
