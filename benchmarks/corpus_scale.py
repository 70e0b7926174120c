"""The data stage at corpus scale: memory and seconds per phase at 0.2M, 1M and 5M passages, before and after.

    python benchmarks/corpus_scale.py [--sizes 200000,1000000,5000000] [--before-sizes 200000,1000000]
        [--dense-sizes 100000,500000] [--verify-sizes 1000000] [--work /tmp/purecover-corpus-scale]
        [--out benchmarks/results/corpus_scale.json]
    python benchmarks/corpus_scale.py --verify-only [--verify-sizes 1000000]   # only the verification figures,
                                                                              # merged into the existing --out

About 40 minutes on 2 cores, and ~15 GB of disk under --work at 5M (corpus files, store, BM25 index;
generated corpora are kept and reused).

Corpus: a seeded synthetic wiki-like corpus (`synthetic_corpus`): 100 Zipf-distributed words per passage
(~740 bytes a JSONL line, like wiki-18's 100-word passages), 1-3 word titles, with the context paragraphs of
20 real HotpotQA dev questions placed at seeded positions, so supporting-paragraph recall@20 is checked at
every size. Questions: those 20 (the sample folder of ``purecover.data.samples`` or ``$PURECOVER_SAMPLE_DATA``;
without the samples the bundled demo questions are used).

Every phase runs in its own child process, which reports its own peak RSS (``ru_maxrss``) and seconds:

* ``store``: building the corpus store (Arrow + sorted-hash lookups) from the JSONL file;
* ``bm25_build``: building the chunked BM25 index from the store;
* ``data_ready``: ``purecover data`` with the store and index built (a fresh run directory): peak RSS,
  seconds before the first query (questions + corpus + index load), retrieval seconds, recall@20;
* ``dense_encode``: sharded dense encoding + a ``Flat`` FAISS index with a tiny encoder built from a config
  (mechanics and memory, not e5's speed), 1 process; ``dense_2proc``: 2 processes under torchrun
  (1 thread each) against 1 process (1 thread) on the same shards;
* ``verify``: opening the corpus store and the BM25 index that were built, checked against their build
  checksums (`purecover.utils.built_files`) three ways: ``none`` (the files opened without any check, as
  before checksums existed), ``changed`` (the default ``data.index_verify``: a stat per file, nothing
  read, as the stamps are fresh) and ``always`` (every file read and its CRC-32 computed); each in a fresh
  process, best of 3, with the files in the page cache (a cold disk reads slower);
* ``before_*``: the previous implementation (the data stage of ``--before-commit``, extracted with
  ``git archive`` and run as it was): first run (corpus in Python objects, bm25s index built in memory)
  and second run (index already built, ``index/`` linked as a user would).

Each figure gets a per-1M-passage slope (least squares over the sizes) and an extrapolation to wiki-18's
21,015,324 passages. JSON output; ``rows`` holds the summary rows (see rows.py).

Targets (`TARGETS` and the bounds below it): with the index built, ``purecover data`` ≤ 1.5 GB peak and
≤ 15 s before the first query at the largest size; BM25 build memory ≤ 1 GB per 1M passages (the slope);
dense encoding's peak at the largest dense size ≤ 1.5× the smallest's, 2 encoding processes ≥ 1.6× one; the
default index check ≤ 0.25 s over no check, the full check ≥ 0.5 GB/s. The helpers (corpus, child
processes, phases) are in ``corpus_scale_parts.py``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from benchlib import harness
from benchlib.rows import Rows, at_least, at_most, machine_info, now
from corpus_scale_parts import (
    HERE,
    WIKI18,
    before_phase,
    dense_phase,
    extrapolate,
    index_phases,
    real_questions,
    synthetic_corpus,
    verify_phase,
    versions,
)

N_QUESTIONS = 20
TARGETS = {
    "data_ready_peak_rss_mb": 1536.0,  # <= 1.5 GB with the index built, whatever the corpus size
    "data_ready_seconds_to_first_query": 15.0,
    "bm25_build_rss_mb_per_1m": 1024.0,  # <= 1 GB per 1M passages
}
DENSE_RSS_RATIO_MAX = 1.5  # dense encoding's peak at the largest dense size / at the smallest
DENSE_SPEEDUP_MIN = 1.6  # 2 encoding processes against 1
VERIFY_CHANGED_OVERHEAD_MAX = 0.25  # s: the default check (a stat per file) over opening without any check
VERIFY_ALWAYS_GB_PER_SECOND_MIN = 0.5  # a full check reads the index at least this fast (page cache)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out=HERE / "results" / "corpus_scale.json")
    parser.add_argument("--sizes", default="200000,1000000,5000000")
    parser.add_argument("--before-sizes", default="200000,1000000")
    parser.add_argument("--dense-sizes", default="100000,500000")
    parser.add_argument("--verify-sizes", default="1000000")
    parser.add_argument("--verify-repeats", type=int, default=3, help="fresh processes per verify mode (best of)")
    parser.add_argument("--verify-only", action="store_true",
                        help="only the verify phase, merged into the existing --out (builds what is missing)")
    parser.add_argument("--before-commit", default="e43e30e")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "purecover-corpus-scale"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", default="", help="phases to leave out, e.g. before,dense")
    args = harness.parse(parser, argv)
    if (status := harness.stored(args, rows)) is not None:
        return status
    sizes = [int(s) for s in args.sizes.split(",") if s]
    before_sizes = [int(s) for s in args.before_sizes.split(",") if s]
    dense_sizes = [int(s) for s in args.dense_sizes.split(",") if s]
    verify_sizes = [int(s) for s in args.verify_sizes.split(",") if s]
    skip = set(args.skip.split(",")) - {""}
    if args.verify_only:
        sizes, before_sizes, dense_sizes = [], [], []
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    records, question_source = real_questions(N_QUESTIONS)
    questions = work / "questions.json"
    questions.write_text(json.dumps(records), encoding="utf-8")
    out: dict = {"benchmark": "corpus_scale", "date": now(), "machine": machine_info(), "versions": versions(),
                 "questions": question_source, "k1": 20, "seed": args.seed, "sizes": {}, "targets": TARGETS}
    if args.verify_only and args.out.is_file():  # the other phases' figures stay as they were measured
        out = harness.load(args.out)
        out.pop("rows", None)

    def save() -> None:
        out["extrapolation_21m"] = extrapolate(out)
        harness.write(args.out, out, rows)

    for n in sorted(set(sizes) | set(before_sizes) | set(dense_sizes) | set(verify_sizes)):
        corpus = work / f"corpus-{n}.jsonl"
        gen = synthetic_corpus(corpus, n, records, args.seed)
        entry: dict = out["sizes"].setdefault(str(n), {"corpus": gen})
        print(f"[{n:,}] corpus: {gen['passages']:,} passages, {gen['bytes'] / 1e9:.2f} GB", flush=True)
        index_dir = work / f"index-{n}"
        if n in sizes:
            entry.update(index_phases(work, n, corpus, index_dir, questions))
            save()
        if n in verify_sizes and "verify" not in skip:
            entry["verify"] = verify_phase(work, corpus, index_dir, args.verify_repeats)
            print(f"[{n:,}] verify: {entry['verify']}", flush=True)
            save()
        if n in before_sizes and "before" not in skip:
            entry["before"] = before_phase(work, n, corpus, questions, args.before_commit)
            save()
        if n in dense_sizes and "dense" not in skip:
            entry["dense"] = dense_phase(work, n, corpus, records, compare_processes=n == min(dense_sizes))
            print(f"[{n:,}] dense: {entry['dense']}", flush=True)
            save()
    save()
    print(json.dumps(out["extrapolation_21m"], indent=2))
    return 0


def rows(out: dict) -> list[dict]:
    """The summary rows: the data stage with the index built at the largest size, BM25 build memory (and its
    slope per 1M passages), the figures extrapolated to wiki-18's size, dense encoding memory and speed-up."""
    table = Rows(out)
    sizes = out["sizes"]
    largest = max((int(n) for n, e in sizes.items() if "data_ready" in e), default=None)
    if largest is not None:
        at = f"{largest / 1e6:g}M passages"
        d = sizes[str(largest)]["data_ready"]
        table.add("corpus_scale.data_ready_peak_rss", d["peak_rss_mb"], "MB",
                  at_most(TARGETS["data_ready_peak_rss_mb"]), variant=at, note="purecover data, index built")
        table.add("corpus_scale.data_ready_seconds_to_first_query", d["seconds_to_first_query"], "s",
                  at_most(TARGETS["data_ready_seconds_to_first_query"]), variant=at, note="purecover data, index built")
        table.add("corpus_scale.bm25_build_peak_rss", sizes[str(largest)]["bm25_build"]["peak_rss_mb"], "MB", variant=at)
    ex = out["extrapolation_21m"]
    fit = ex.get("bm25_build_peak_rss_mb")
    if fit is not None and len(fit["points"]) >= 2:  # the marginal memory per 1M passages (the fitted slope)
        table.add("corpus_scale.bm25_build_rss_per_1m_passages", fit["per_1m"], "MB",
                  at_most(TARGETS["bm25_build_rss_mb_per_1m"]),
                  note="least-squares slope over " + ", ".join(f"{n / 1e6:g}M" for n, _ in fit["points"]))
    for key, unit in (("bm25_build_peak_rss_mb", "MB"), ("bm25_build_seconds", "s"), ("store_build_seconds", "s"),
                      ("before_first_run_peak_rss_mb", "MB")):
        if key in ex:
            table.add(f"corpus_scale.{key.removesuffix('_mb')}_at_21m", ex[key]["at_21m"], unit,
                      note=f"extrapolated to {WIKI18:,} passages" + (" (the previous implementation)"
                                                                      if key.startswith("before") else ""))
    dense = sorted((int(n), e["dense"]) for n, e in sizes.items() if "dense" in e)
    if len(dense) >= 2:  # flat, not extrapolated: one shard and the model are all encoding holds
        (n0, d0), (n1, d1) = dense[0], dense[-1]
        table.add("corpus_scale.dense_peak_rss_ratio",
                  round(d1["encode_and_index"]["peak_rss_mb"] / d0["encode_and_index"]["peak_rss_mb"], 2), "x",
                  at_most(DENSE_RSS_RATIO_MAX), variant=f"{n1 / 1e6:g}M / {n0 / 1e6:g}M passages",
                  note="dense encoding + Flat index, tiny encoder")
    for n, e in sorted(sizes.items(), key=lambda kv: int(kv[0])):
        if "verify" in e:
            v, at = e["verify"], f"{int(n) / 1e6:g}M passages"
            table.add("corpus_scale.index_open_check_overhead", v["changed_overhead_seconds"], "s",
                      at_most(VERIFY_CHANGED_OVERHEAD_MAX), variant=at,
                      note=f"data.index_verify: changed ({v['open_seconds_changed']:g} s) against no check "
                           f"({v['open_seconds_none']:g} s): corpus store + BM25, {v['files']} files")
            table.add("corpus_scale.index_open_full_check_speed", v["always_gb_per_second"], "GB/s",
                      at_least(VERIFY_ALWAYS_GB_PER_SECOND_MIN), variant=at,
                      note=f"data.index_verify: always reads {v['bytes'] / 1e9:.2f} GB in "
                           f"{v['open_seconds_always']:g} s (page cache)")
        if "speedup_2_over_1" in e.get("dense", {}):
            table.add("corpus_scale.dense_2_processes_speedup", e["dense"]["speedup_2_over_1"], "x",
                      at_least(DENSE_SPEEDUP_MIN), variant=f"{int(n) / 1e6:g}M passages",
                      note=f"2 encoding processes against 1; bound {e['dense']['speedup_bound']:g} "
                           f"({e['dense']['shards']} shards)")
    return table.rows


if __name__ == "__main__":
    sys.exit(main())
