"""Label quality with oracle steps + the embedding estimator, next to top-K retrieval (JSON output).

    python benchmarks/oracle_labels.py [--limit N] [--out benchmarks/results/oracle_labels.json]

For each real sample (../shared/data or $PURECOVER_SAMPLE_DATA): BM25 top-20 candidates over
the sample's shared corpus, then `purecover label` with teacher.steps=oracle and
teacher.estimator=embedding (all-MiniLM-L6-v2), default λ, budget 5. Reports the precision
and recall of the selected sets against the gold supporting paragraphs, next to retrieval's
top-|S| (same size per question) and top-5.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from purecover.config import load_recipe
from purecover.data.candidates import run_data_stage
from purecover.data.samples import SAMPLE_FILES, sample_data_dir
from purecover.teacher.job import run_label_stage
from purecover.utils.io import atomic_write_json, read_jsonl
from purecover.utils.provenance import package_versions


def pr(selected: set[str], gold: set[str]) -> tuple[float, float]:
    hit = len(selected & gold)
    return (hit / len(selected) if selected else 0.0), hit / len(gold)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", default="benchmarks/results/oracle_labels.json")
    args = parser.parse_args()
    samples = sample_data_dir()
    if samples is None:
        print("sample data not found (set PURECOVER_SAMPLE_DATA)", file=sys.stderr)
        return 1
    results = {}
    for dataset, file in SAMPLE_FILES.items():
        with tempfile.TemporaryDirectory() as run_dir:
            overrides = [f"run_dir={run_dir}", f"data.dataset={dataset}", f"data.path={samples / file}",
                         "data.k1=20", "teacher.steps=oracle", "teacher.estimator=embedding", "teacher.batch_size=16"]
            if args.limit:
                overrides.append(f"data.limit={args.limit}")
            recipe = load_recipe(None, overrides)
            run_data_stage(recipe, show_progress=False)
            t0 = time.perf_counter()
            summary = run_label_stage(recipe, show_progress=False)
            seconds = time.perf_counter() - t0
            cands = {r["qid"]: r for _, r in read_jsonl(Path(run_dir) / "candidates.jsonl")}
            sums = dict.fromkeys(("sel_p", "sel_r", "top_s_p", "top_s_r", "top5_p", "top5_r", "size"), 0.0)
            n = 0
            for _, lab in read_jsonl(Path(run_dir) / "labels.jsonl"):
                cand = cands[lab["qid"]]
                gold = set(cand["gold_doc_ids"])
                if not gold or lab["status"] == "error":
                    continue
                ids = [d["doc_id"] for d in cand["docs"]]
                sel = set(lab["selected_doc_ids"])
                for key, chosen in (("sel", sel), ("top_s", set(ids[: len(sel)])), ("top5", set(ids[:5]))):
                    p, r = pr(chosen, gold)
                    sums[f"{key}_p"] += p
                    sums[f"{key}_r"] += r
                sums["size"] += len(sel)
                n += 1
            row = {k: round(v / n, 4) for k, v in sums.items()}
            row.update(questions=n, ok=summary["ok"], fallback=summary["fallback"], error=summary["error"],
                       label_seconds=round(seconds, 1))
            results[dataset] = row
            print(dataset, json.dumps(row), flush=True)
    atomic_write_json(args.out, {"benchmark": "oracle_labels", "k1": 20, "budget": 5, "lam": 0.3,
                                 "embedding_model": "sentence-transformers/all-MiniLM-L6-v2", "results": results,
                                 "versions": package_versions()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
