"""The helpers of `corpus_scale.py` (the experiment, its figures and targets are there): the synthetic corpus,
the child process each phase runs in, and the phases themselves.

Each phase runs in a fresh child process (`run_child`: ``python -c _CHILD`` with a JSON job; its own peak RSS
from VmHWM, its seconds) so that one phase's memory never counts in another's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIKI18 = 21_015_324  # wiki-18's passages: every figure measured at several sizes is extrapolated to it
PASSAGE_WORDS = 100
VOCAB = 200_000


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


def recipe_file(path: Path, run_dir: Path, questions: Path, corpus: Path, index_dir: Path | None,
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


# ---------------------------------------------------------------------- the phases


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


def disk_usage(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def same_candidates(a: Path, b: Path) -> bool | None:
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


def index_phases(work: Path, n: int, corpus: Path, index_dir: Path, questions: Path) -> dict:
    """The corpus store and the BM25 index built from `corpus` (each in its own process, `index_dir` emptied
    first), their disk use, then ``purecover data`` with both built (a fresh run directory)."""
    entry: dict = {}
    shutil.rmtree(index_dir, ignore_errors=True)
    entry["store"] = run_child(cwd=work, job={"kind": "store", "corpus": str(corpus), "index_dir": str(index_dir)})
    print(f"[{n:,}] store: {entry['store']}", flush=True)
    entry["bm25_build"] = run_child(cwd=work, job={"kind": "bm25_build", "corpus": str(corpus),
                                                   "index_dir": str(index_dir)})
    print(f"[{n:,}] bm25 build: {entry['bm25_build']}", flush=True)
    entry["disk_bytes"] = {p.name: disk_usage(p) for p in index_dir.iterdir() if p.is_dir()}
    run_dir = work / f"run-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    recipe = recipe_file(work / f"recipe-{n}.yaml", run_dir, questions, corpus, index_dir)
    res = run_child(cwd=work, job={"kind": "data", "recipe": str(recipe), "sets": [],
                                   "manifest": str(run_dir / "data.run.json")})
    s = res["summary"]
    secs = s["seconds"]
    entry["data_ready"] = {"peak_rss_mb": res["peak_rss_mb"], "wall_seconds": res["wall_seconds"],
                           "process_seconds": res["seconds"], "phase_seconds": secs, "index": s["index"],
                           "seconds_to_first_query": round(res["seconds"] - secs["retrieve"], 2),
                           "recall@20": s["supporting_recall@20"], "questions": s["questions"]}
    print(f"[{n:,}] data (index built): {entry['data_ready']}", flush=True)
    return entry


def before_phase(work: Path, n: int, corpus: Path, questions: Path, commit: str) -> dict:
    """The data stage of `commit` (`before_tree`) on the same corpus: a first run, then a second one with the
    first's index linked as a user would; whether it wrote the same candidates as the current one."""
    tree = before_tree(work, commit)
    run_dir = work / f"before-run-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    recipe = recipe_file(work / f"before-recipe-{n}.yaml", run_dir, questions, corpus, None)
    first = run_child(cwd=work, job={"kind": "before_data", "recipe": str(recipe), "sets": [],
                                     "manifest": str(run_dir / "data.run.json")}, pythonpath=tree)
    second_dir = work / f"before-run-{n}-again"
    shutil.rmtree(second_dir, ignore_errors=True)
    second_dir.mkdir()
    (second_dir / "index").symlink_to(run_dir / "index", target_is_directory=True)
    recipe2 = recipe_file(work / f"before-recipe-{n}-again.yaml", second_dir, questions, corpus, None)
    second = run_child(cwd=work, job={"kind": "before_data", "recipe": str(recipe2), "sets": [],
                                      "manifest": str(second_dir / "data.run.json")}, pythonpath=tree)
    assert first["purecover"].startswith(str(tree)), f"the before run imported {first['purecover']}"
    before = {
        "commit": commit,
        "first_run": {"peak_rss_mb": first["peak_rss_mb"], "seconds": first["seconds"],
                      "recall@20": first["summary"]["supporting_recall@20"]},
        "index_built": {"peak_rss_mb": second["peak_rss_mb"], "seconds": second["seconds"],
                        "recall@20": second["summary"]["supporting_recall@20"]},
        "same_candidates_as_after": same_candidates(run_dir, work / f"run-{n}"),
    }
    print(f"[{n:,}] before: {before}", flush=True)
    shutil.rmtree(run_dir / "index", ignore_errors=True)
    return before


# ---------------------------------------------------------------------- extrapolation


def slope(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """Least-squares (per-1M-passage slope, intercept) of `values` over `sizes` (passages)."""
    x = np.asarray(sizes, dtype=float) / 1e6
    y = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(y[0] / x[0]), 0.0
    a, b = np.polyfit(x, y, 1)
    return float(a), float(b)


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
