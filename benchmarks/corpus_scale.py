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
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rows import ROWS_ONLY_HELP, Rows, at_least, at_most, machine_info, now, rewrite, with_rows

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIKI18 = 21_015_324
N_QUESTIONS = 20
PASSAGE_WORDS = 100
VOCAB = 200_000
TARGETS = {
    "data_ready_peak_rss_mb": 1536.0,  # <= 1.5 GB with the index built, whatever the corpus size
    "data_ready_seconds_to_first_query": 15.0,
    "bm25_build_rss_mb_per_1m": 1024.0,  # <= 1 GB per 1M passages
}
DENSE_RSS_RATIO_MAX = 1.5  # dense encoding's peak at the largest dense size / at the smallest
DENSE_SPEEDUP_MIN = 1.6  # 2 encoding processes against 1
VERIFY_CHANGED_OVERHEAD_MAX = 0.25  # s: the default check (a stat per file) over opening without any check
VERIFY_ALWAYS_GB_PER_SECOND_MIN = 0.5  # a full check reads the index at least this fast (page cache)


# ---------------------------------------------------------------------- the synthetic corpus


def _vocabulary(rng: np.random.Generator, size: int) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(2, 11, size=size)
    words = np.array(sorted({"".join(rng.choice(letters, n)) for n in lengths}))
    return words[rng.permutation(len(words))]  # a word's frequency rank is independent of its length


def real_questions(n: int) -> tuple[list[dict], str]:
    """`n` HotpotQA dev records (the samples, else the bundled demo set) and where they came from."""
    sys.path.insert(0, str(REPO))
    from purecover.data.samples import SAMPLE_FILES, sample_data_dir

    samples = sample_data_dir()
    if samples is not None:
        path = samples / SAMPLE_FILES["hotpotqa"]
    else:
        path = REPO / "purecover" / "data" / "demo" / "demo_hotpot.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    return records[:n], str(path)


def synthetic_corpus(path: Path, n: int, questions: list[dict], seed: int = 0) -> dict:
    """Write `n` synthetic passages plus every context paragraph of `questions` to `path` (JSONL), seeded.

    Returns what was written (passages, bytes, real paragraphs). Reused when `path` exists with the
    same parameters (a ``.meta.json`` beside it).
    """
    meta_path = path.with_suffix(".meta.json")
    params = {"n": n, "seed": seed, "words": PASSAGE_WORDS, "vocab": VOCAB,
              "questions": [q["_id"] for q in questions], "version": 2}
    if path.is_file() and meta_path.is_file() and json.loads(meta_path.read_text()).get("params") == params:
        return json.loads(meta_path.read_text())
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng, VOCAB)
    real = [(title, "".join(sents).strip()) for q in questions for title, sents in q["context"]]
    real = list(dict.fromkeys(real))
    slots = set(rng.choice(n, size=len(real), replace=False).tolist())
    real_iter = iter(real)
    t0 = time.perf_counter()
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tmp.open("w", encoding="utf-8") as fh:
        chunk = 20_000
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            words = (rng.zipf(1.25, size=(m, PASSAGE_WORDS)) - 1) % len(vocab)
            title_words = rng.integers(0, len(vocab), size=(m, 3))
            title_lens = rng.integers(1, 4, size=m)
            lines = []
            for j in range(m):
                i = start + j
                if i in slots:
                    title, text = next(real_iter)
                    lines.append(json.dumps({"id": f"hp{i}", "title": title, "text": text}, ensure_ascii=False))
                title = " ".join(vocab[title_words[j, :title_lens[j]]]).title()
                text = " ".join(vocab[words[j]])
                lines.append(json.dumps({"id": str(i), "title": title, "text": text}))
            fh.write("\n".join(lines) + "\n")
    tmp.replace(path)
    meta = {"params": params, "passages": n + len(real), "real_paragraphs": len(real), "bytes": path.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=2))
    return meta


# ---------------------------------------------------------------------- child processes

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
job = json.loads(sys.argv[1])
out = {}
kind = job["kind"]
if kind == "store":
    from purecover.data.corpus_store import open_corpus_store
    store = open_corpus_store(job["corpus"], job["index_dir"])
    out["passages"] = len(store)
elif kind == "bm25_build":
    from purecover.data.corpus_store import open_corpus_store
    from purecover.data.retrieval.bm25 import BM25Retriever
    store = open_corpus_store(job["corpus"], job["index_dir"])
    t1 = time.perf_counter()
    r = BM25Retriever(store, index_dir=job["index_dir"])
    out["from_cache"] = r.from_cache
    out["index_seconds"] = time.perf_counter() - t1
elif kind == "open_indexes":
    from purecover.data.corpus_store import CorpusStore, open_corpus_store
    from purecover.data.retrieval.bm25 import BM25Retriever
    from purecover.data.retrieval.bm25_index import BM25Index
    t1 = time.perf_counter()
    if job["verify"] == "none":
        store = CorpusStore(job["store_dir"])
        index = BM25Index.load(job["bm25_dir"], len(store))
    else:
        store = open_corpus_store(job["corpus"], job["index_dir"], verify=job["verify"])
        r = BM25Retriever(store, index_dir=job["index_dir"], verify=job["verify"])
        assert r.from_cache, "the index was built again"
    out["open_seconds"] = time.perf_counter() - t1
elif kind in ("data", "before_data"):
    from purecover.cli import main
    rc = main(["data", job["recipe"], *sum([["--set", s] for s in job["sets"]], [])])
    out["rc"] = rc
    out["summary"] = json.loads(open(job["manifest"]).read()).get("summary")
elif kind == "dense_encode":
    import torch
    torch.set_num_threads(job["threads"])
    from purecover.data.corpus_store import open_corpus_store
    from purecover.data.retrieval.dense import DenseRetriever
    store = open_corpus_store(job["corpus"], job["index_dir"])
    t1 = time.perf_counter()
    r = DenseRetriever(store, job["model"], cache_dir=job["index_dir"], shard_size=job["shard_size"],
                       batch_size=job["batch_size"], embedding_dtype=job["dtype"], index_factory=job["factory"])
    out["index_seconds"] = time.perf_counter() - t1
    out["from_cache"] = r.from_cache
    hits = r.search(job["queries"], 20)
    out["query_seconds"] = time.perf_counter() - t1 - out["index_seconds"]
elif kind == "dense_shards":
    import os, torch
    torch.set_num_threads(job["threads"])
    from purecover.data.corpus_store import open_corpus_store
    from purecover.data.retrieval.dense import load_sentence_transformer
    from purecover.data.retrieval.embedding_shards import encode_shards, launch_rank
    store = open_corpus_store(job["corpus"], job["index_dir"])
    rank, world = launch_rank()
    model = load_sentence_transformer(job["model"], device="cpu")
    t1 = time.perf_counter()
    done = encode_shards(store, model, job["shard_dir"], passage_prefix="", batch_size=job["batch_size"],
                         dtype=job["dtype"], shard_size=job["shard_size"], rank=rank, world_size=world)
    out["encode_seconds"] = time.perf_counter() - t1
    out["rank"], out["world"], out["shards"] = rank, world, len(done)
    if rank != 0:
        sys.exit(0)
import purecover
out["purecover"] = purecover.__file__
out["seconds"] = time.perf_counter() - t0
# VmHWM: this address space's own peak (ru_maxrss would include the parent's size at the fork)
out["peak_rss_mb"] = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
out["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps(out))
"""


def run_child(job: dict, *, cwd: Path, pythonpath: Path = REPO, env_extra: dict | None = None,
              launcher: list[str] | None = None, timeout: float = 4 * 3600) -> dict:
    """Run one phase in a fresh process in `cwd`, importing purecover from `pythonpath`; its RESULT line.

    `cwd` must not hold a ``purecover`` package: ``python -c`` puts the working directory first on
    ``sys.path``, before ``PYTHONPATH`` (so the 'before' tree would be shadowed by the repository).
    Indexes that a recipe does not place go under `cwd` too, never the user's cache.
    """
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "TQDM_DISABLE": "1", "PURECOVER_INDEX_DIR": str(cwd / "default-index"), **(env_extra or {})}
    # `-c` for a plain child; a launcher (torchrun) needs the script as a file
    cmd = [sys.executable, "-c", _CHILD, json.dumps(job)] if launcher is None else \
        [*launcher, _child_file(), json.dumps(job)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{job['kind']} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not results:
        raise RuntimeError(f"{job['kind']}: no result line:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {**results[0], "wall_seconds": round(wall, 2)}


def _child_file() -> str:
    path = Path(tempfile.gettempdir()) / "purecover_corpus_scale_child.py"
    path.write_text(_CHILD)
    return str(path)


def _recipe(path: Path, run_dir: Path, questions: Path, corpus: Path, index_dir: Path | None,
            retriever: str = "bm25") -> Path:
    lines = [f"run_dir: {run_dir}", "data:", "  dataset: hotpotqa", f"  path: {questions}", "  split: dev",
             f"  corpus: {corpus}", f"  retriever: {retriever}", "  k1: 20"]
    if index_dir is not None:
        lines.append(f"  index_dir: {index_dir}")
    path.write_text("\n".join(lines) + "\n")
    return path


def before_tree(work: Path, commit: str) -> Path:
    """The package as it was at `commit` (git archive), for the side-by-side 'before' figures."""
    tree = work / f"before-{commit}"
    if not (tree / "purecover").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "purecover"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


# ---------------------------------------------------------------------- the run


def slope(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares (per-1M-passage slope, intercept) of `values` over `sizes` (passages)."""
    x = np.asarray(sizes, dtype=float) / 1e6
    y = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(y[0] / x[0]), 0.0
    a, b = np.polyfit(x, y, 1)
    return float(a), float(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="200000,1000000,5000000")
    parser.add_argument("--before-sizes", default="200000,1000000")
    parser.add_argument("--dense-sizes", default="100000,500000")
    parser.add_argument("--verify-sizes", default="1000000")
    parser.add_argument("--verify-repeats", type=int, default=3, help="fresh processes per verify mode (best of)")
    parser.add_argument("--verify-only", action="store_true",
                        help="only the verify phase, merged into the existing --out (builds what is missing)")
    parser.add_argument("--before-commit", default="e43e30e")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "purecover-corpus-scale"))
    parser.add_argument("--out", default=str(HERE / "results" / "corpus_scale.json"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", default="", help="phases to leave out, e.g. before,dense")
    parser.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    args = parser.parse_args(argv)
    if args.rows_only:
        return rewrite(args.out, rows)
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
    path_out = Path(args.out)
    if args.verify_only and path_out.is_file():  # the other phases' figures stay as they were measured
        out = json.loads(path_out.read_text(encoding="utf-8"))
        out.pop("rows", None)

    def save() -> None:
        from purecover.utils.io import atomic_write_json

        out["extrapolation_21m"] = extrapolate(out)
        atomic_write_json(path_out, with_rows(out, rows))

    for n in sorted(set(sizes) | set(before_sizes) | set(dense_sizes) | set(verify_sizes)):
        corpus = work / f"corpus-{n}.jsonl"
        gen = synthetic_corpus(corpus, n, records, args.seed)
        entry: dict = out["sizes"].setdefault(str(n), {"corpus": gen})
        print(f"[{n:,}] corpus: {gen['passages']:,} passages, {gen['bytes'] / 1e9:.2f} GB", flush=True)
        index_dir = work / f"index-{n}"
        if n in sizes:
            shutil.rmtree(index_dir, ignore_errors=True)
            entry["store"] = run_child(cwd=work, job={"kind": "store", "corpus": str(corpus),
                                                      "index_dir": str(index_dir)})
            print(f"[{n:,}] store: {entry['store']}", flush=True)
            entry["bm25_build"] = run_child(cwd=work, job={"kind": "bm25_build", "corpus": str(corpus),
                                                           "index_dir": str(index_dir)})
            print(f"[{n:,}] bm25 build: {entry['bm25_build']}", flush=True)
            entry["disk_bytes"] = {p.name: _du(p) for p in index_dir.iterdir() if p.is_dir()}
            run_dir = work / f"run-{n}"
            shutil.rmtree(run_dir, ignore_errors=True)
            recipe = _recipe(work / f"recipe-{n}.yaml", run_dir, questions, corpus, index_dir)
            res = run_child(cwd=work, job={"kind": "data", "recipe": str(recipe), "sets": [],
                             "manifest": str(run_dir / "data.run.json")})
            s = res["summary"]
            secs = s["seconds"]
            entry["data_ready"] = {"peak_rss_mb": res["peak_rss_mb"], "wall_seconds": res["wall_seconds"],
                                   "process_seconds": res["seconds"], "phase_seconds": secs, "index": s["index"],
                                   "seconds_to_first_query": round(res["seconds"] - secs["retrieve"], 2),
                                   "recall@20": s["supporting_recall@20"], "questions": s["questions"]}
            print(f"[{n:,}] data (index built): {entry['data_ready']}", flush=True)
            save()
        if n in verify_sizes and "verify" not in skip:
            entry["verify"] = verify_phase(work, corpus, index_dir, args.verify_repeats)
            print(f"[{n:,}] verify: {entry['verify']}", flush=True)
            save()
        if n in before_sizes and "before" not in skip:
            tree = before_tree(work, args.before_commit)
            run_dir = work / f"before-run-{n}"
            shutil.rmtree(run_dir, ignore_errors=True)
            recipe = _recipe(work / f"before-recipe-{n}.yaml", run_dir, questions, corpus, None)
            first = run_child(cwd=work, job={"kind": "before_data", "recipe": str(recipe), "sets": [],
                               "manifest": str(run_dir / "data.run.json")}, pythonpath=tree)
            second_dir = work / f"before-run-{n}-again"
            shutil.rmtree(second_dir, ignore_errors=True)
            second_dir.mkdir()
            (second_dir / "index").symlink_to(run_dir / "index", target_is_directory=True)
            recipe2 = _recipe(work / f"before-recipe-{n}-again.yaml", second_dir, questions, corpus, None)
            second = run_child(cwd=work, job={"kind": "before_data", "recipe": str(recipe2), "sets": [],
                                "manifest": str(second_dir / "data.run.json")}, pythonpath=tree)
            assert first["purecover"].startswith(str(tree)), f"the before run imported {first['purecover']}"
            entry["before"] = {
                "commit": args.before_commit,
                "first_run": {"peak_rss_mb": first["peak_rss_mb"], "seconds": first["seconds"],
                              "recall@20": first["summary"]["supporting_recall@20"]},
                "index_built": {"peak_rss_mb": second["peak_rss_mb"], "seconds": second["seconds"],
                                "recall@20": second["summary"]["supporting_recall@20"]},
                "same_candidates_as_after": _same_candidates(run_dir, work / f"run-{n}"),
            }
            print(f"[{n:,}] before: {entry['before']}", flush=True)
            shutil.rmtree(run_dir / "index", ignore_errors=True)
            save()
        if n in dense_sizes and "dense" not in skip:
            entry["dense"] = dense_phase(work, n, corpus, records, compare_processes=n == min(dense_sizes))
            print(f"[{n:,}] dense: {entry['dense']}", flush=True)
            save()
    save()
    print(json.dumps(out["extrapolation_21m"], indent=2))
    return 0


def verify_phase(work: Path, corpus: Path, index_dir: Path, repeats: int = 3) -> dict:
    """Seconds to open the built corpus store and BM25 index without checks, with the default check and with a
    full one (best of `repeats` fresh processes each); builds them first when missing."""
    run_child(cwd=work, job={"kind": "bm25_build", "corpus": str(corpus), "index_dir": str(index_dir)})
    (store_dir,) = index_dir.glob("corpus-*")
    (bm25_dir,) = index_dir.glob("bm25-*")
    checked = [p for d in (store_dir, bm25_dir) for p in d.iterdir() if p.suffix in (".arrow", ".npy")]
    result: dict = {"files": len(checked), "bytes": sum(p.stat().st_size for p in checked)}
    for mode in ("none", "changed", "always"):
        job = {"kind": "open_indexes", "verify": mode, "corpus": str(corpus), "index_dir": str(index_dir),
               "store_dir": str(store_dir), "bm25_dir": str(bm25_dir)}
        result[f"open_seconds_{mode}"] = round(min(run_child(cwd=work, job=job)["open_seconds"]
                                                   for _ in range(repeats)), 3)
    result["always_gb_per_second"] = round(result["bytes"] / 1e9 / max(result["open_seconds_always"], 1e-9), 2)
    result["changed_overhead_seconds"] = round(result["open_seconds_changed"] - result["open_seconds_none"], 3)
    return result


def versions() -> dict:
    """Platform, Python and the packages that shape the figures (metadata only: no torch import)."""
    from purecover.utils.provenance import package_versions

    return package_versions(extra=("bm25s", "pyarrow", "faiss-cpu", "sentence-transformers"))


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _same_candidates(a: Path, b: Path) -> bool | None:
    """Whether two runs wrote the same candidates (qid, doc ids and scores), when both exist."""
    fa, fb = a / "candidates.jsonl", b / "candidates.jsonl"
    if not (fa.is_file() and fb.is_file()):
        return None

    def read(f: Path) -> dict:
        out = {}
        for line in f.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            out[r["qid"]] = [(d["doc_id"], d["score"]) for d in r["docs"]]
        return out

    return read(fa) == read(fb)


def dense_phase(work: Path, n: int, corpus: Path, records: list[dict], compare_processes: bool) -> dict:
    """Sharded encoding + Flat index with a tiny encoder (1 process), and (`compare_processes`) 1 vs 2
    processes encoding the same shards."""
    sys.path.insert(0, str(REPO))
    from purecover.demo.tiny import build_tiny_sentence_encoder

    model = work / "tiny-encoder"
    if not (model / "modules.json").is_file():
        build_tiny_sentence_encoder(model)
    index_dir = work / f"index-{n}"
    queries = [r["question"] for r in records]
    common = {"corpus": str(corpus), "index_dir": str(index_dir), "model": str(model), "batch_size": 64,
              "dtype": "float16", "shard_size": 65_536}
    for p in index_dir.glob("dense-*"):
        shutil.rmtree(p, ignore_errors=True)
    encode = run_child(cwd=work, job={"kind": "dense_encode", "factory": "Flat", "queries": queries, "threads": 1,
                                      **common})
    result: dict = {"encode_and_index": encode, "passages_per_second": round(n / encode["index_seconds"], 1)}
    if not compare_processes:
        return result
    # 1 vs 2 processes over the whole corpus (1 thread each: the comparison is processes)
    shards = work / f"shards-{n}"
    timing = {}
    for world in (1, 2):
        shutil.rmtree(shards, ignore_errors=True)
        job = {"kind": "dense_shards", "threads": 1, "shard_dir": str(shards), **common, "shard_size": 8_192}
        launcher = None if world == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                             f"--nproc_per_node={world}"]
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        timing[world] = run_child(job, cwd=work, launcher=launcher, env_extra=env)
    result["processes"] = {str(w): {"wall_seconds": t["wall_seconds"], "encode_seconds": t["encode_seconds"],
                                    "peak_rss_mb_rank0": t["peak_rss_mb"]} for w, t in timing.items()}
    result["speedup_2_over_1"] = round(timing[1]["encode_seconds"] / timing[2]["encode_seconds"], 2)
    n_shards = -(-(n + len({q["_id"] for q in records}) * 10) // 8_192)
    result["shards"] = n_shards  # ranks take whole shards: the best possible speed-up is shards / ceil(shards / 2)
    result["speedup_bound"] = round(n_shards / -(-n_shards // 2), 2)
    shutil.rmtree(shards, ignore_errors=True)
    return result


def extrapolate(out: dict) -> dict:
    """Per-1M slopes and the value at wiki-18's size, for each figure measured at two sizes or more."""
    sizes = out["sizes"]
    series: dict[str, list[tuple[int, float]]] = {}

    def add(name: str, n: str, value: float | None) -> None:
        if value is not None:
            series.setdefault(name, []).append((int(n), float(value)))

    for n, e in sizes.items():
        if "store" in e:
            add("store_build_seconds", n, e["store"]["seconds"])
            add("store_build_peak_rss_mb", n, e["store"]["peak_rss_mb"])
            add("store_disk_gb", n, sum(v for k, v in e["disk_bytes"].items() if k.startswith("corpus-")) / 1e9)
        if "bm25_build" in e:
            add("bm25_build_seconds", n, e["bm25_build"]["index_seconds"])
            add("bm25_build_peak_rss_mb", n, e["bm25_build"]["peak_rss_mb"])
            add("bm25_disk_gb", n, sum(v for k, v in e["disk_bytes"].items() if k.startswith("bm25-")) / 1e9)
        if "data_ready" in e:
            add("data_ready_peak_rss_mb", n, e["data_ready"]["peak_rss_mb"])
            add("data_ready_seconds_to_first_query", n, e["data_ready"]["seconds_to_first_query"])
        if "before" in e:
            add("before_first_run_peak_rss_mb", n, e["before"]["first_run"]["peak_rss_mb"])
            add("before_first_run_seconds", n, e["before"]["first_run"]["seconds"])
            add("before_index_built_peak_rss_mb", n, e["before"]["index_built"]["peak_rss_mb"])
            add("before_index_built_seconds", n, e["before"]["index_built"]["seconds"])
    result = {}
    for name, points in sorted(series.items()):
        points.sort()
        a, b = slope([p[0] for p in points], [p[1] for p in points])
        result[name] = {"points": points, "per_1m": round(a, 3), "intercept": round(b, 3),
                        "at_21m": round(a * WIKI18 / 1e6 + b, 1)}
    return result


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
