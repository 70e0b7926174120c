"""BM25 index build and query throughput on the union of all sample paragraphs (JSON output).

    python benchmarks/retrieval.py [--out benchmarks/results/retrieval.json] [--repeats 3] [--k 20]

Corpus: every paragraph of the four real samples (the sample folder of `purecover.data.samples`,
or $PURECOVER_SAMPLE_DATA), queries: every sample question. Also reports supporting-paragraph
recall@20 per dataset on that joint corpus, and BM25 on the bundled demo set when the samples are
absent. Against: nothing (the reference figures of the index; the median of --repeats builds and query
passes). Rows (see rows.py): build seconds and queries per second, reported without a target.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
from benchlib import harness
from benchlib.rows import Rows, machine_info, now

from purecover.data import load_examples
from purecover.data.corpus import corpus_from_examples
from purecover.data.data_stage import gold_doc_ids
from purecover.data.retrieval.bm25 import BM25Retriever
from purecover.data.samples import SAMPLE_FILES, sample_data_dir
from purecover.utils.provenance import package_versions


def rows(result: dict) -> list[dict]:
    """The summary rows of a retrieval result: index build time and query throughput."""
    table = Rows(result)
    table.add("retrieval.bm25_build_seconds", result["index_build_seconds"], "s",
              note=f"{result['corpus_passages']:,} passages, "
                   f"{result['index_build_passages_per_second']:,.0f} passages/s")
    table.add("retrieval.bm25_queries_per_second", result["queries_per_second"], "queries/s",
              note=f"top-{result['k']}, {result['queries']:,} queries")
    return table.rows


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/retrieval.json")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=20)
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status

    samples = sample_data_dir()
    if samples is not None:
        examples = {name: load_examples(name, samples / file) for name, file in SAMPLE_FILES.items()}
        source = str(samples)
    else:
        print("sample data not found; benchmarking on the bundled demo set", file=sys.stderr)
        examples = {"demo": load_examples("hotpotqa", "demo")}
        source = "demo"
    all_examples = [ex for exs in examples.values() for ex in exs]
    corpus = corpus_from_examples(all_examples)
    queries = [ex.question for ex in all_examples]
    n_words = sum(len(d.contents.split()) for d in corpus.docs)

    build_times, query_times = [], []
    retriever = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        retriever = BM25Retriever(corpus)
        build_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hits = retriever.search(queries, args.k)
        query_times.append(time.perf_counter() - t0)
    assert retriever is not None

    recall = {}
    start = 0
    for name, exs in examples.items():
        values = []
        for ex, row in zip(exs, hits[start : start + len(exs)]):
            gold = set(gold_doc_ids(ex, None))
            if gold:
                got = {corpus[h.index].doc_id for h in row}
                values.append(len(gold & got) / len(gold))
        start += len(exs)
        recall[name] = round(float(np.mean(values)), 4) if values else None

    build = statistics.median(build_times)
    query = statistics.median(query_times)
    result = {
        "benchmark": "retrieval",
        "date": now(),
        "source": source,
        "corpus_passages": len(corpus),
        "corpus_words": n_words,
        "queries": len(queries),
        "k": args.k,
        "repeats": args.repeats,
        "index_build_seconds": round(build, 4),
        "index_build_passages_per_second": round(len(corpus) / build, 1),
        "query_seconds": round(query, 4),
        "queries_per_second": round(len(queries) / query, 1),
        "supporting_recall_at_k_joint_corpus": recall,
        "machine": machine_info(),
        "versions": package_versions(),
    }
    result = harness.write(args.out, result, rows)
    print(json.dumps({k: v for k, v in result.items() if k not in ("versions", "rows")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
