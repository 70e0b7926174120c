"""`make demo`'s wall time, fresh and rerun, by torch thread count, on idle and on busy cores.

    python benchmarks/demo_timing.py [--threads default,1] [--busy 0,2] [--out benchmarks/results/demo_timing.json]

Each configuration runs what `make demo` runs, in a fresh working directory (so nothing is reused): the
demo assets (``python -m purecover.demo runs/demo-assets``), then ``purecover pipeline
configs/recipes/demo_cpu.yaml``, then the same pipeline again (every stage skipped). ``--threads``: torch's
intra-op threads through ``OMP_NUM_THREADS`` (``default``: unset, torch's own choice, one per core).
``--busy N``: N processes spin on the CPU meanwhile (``make test`` beside the demo is 2 busy workers on 2
cores): the contended case where the issue measured 241 s. Figures: seconds per configuration, the ratio
of the thread settings per load, and the rerun's seconds. `make demo` sets the thread count these figures
chose; the README and the benchmarks page quote them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rows import ROWS_ONLY_HELP, Rows, at_most, machine_info, now, rewrite, with_rows

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "recipes" / "demo_cpu.yaml"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_MODE": "offline"}
# Targets: the demo with setup done, on 2 idle cores, with the chosen setting; its rerun.
TARGET_FRESH_S = 60.0
TARGET_RERUN_S = 5.0


@contextmanager
def busy(n: int):
    """`n` processes spinning on the CPU for the duration."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "ab") as out:
        subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - start


def run_demo(threads: str, n_busy: int, log_dir: Path) -> dict[str, Any]:
    env = {**os.environ, **OFFLINE}
    env.pop("OMP_NUM_THREADS", None)
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    log = log_dir / f"demo-threads{threads}-busy{n_busy}.log"
    with tempfile.TemporaryDirectory(prefix="demo-timing-") as tmp, busy(n_busy):
        cwd = Path(tmp)
        assets = timed([sys.executable, "-m", "purecover.demo", "runs/demo-assets"], cwd, env, log)
        pipeline = timed([sys.executable, "-m", "purecover", "pipeline", str(RECIPE)], cwd, env, log)
        rerun = timed([sys.executable, "-m", "purecover", "pipeline", str(RECIPE)], cwd, env, log)
        stages = {}
        for manifest in sorted((cwd / "runs" / "demo").glob("*.run.json")):
            data = json.loads(manifest.read_text(encoding="utf-8"))
            started, finished = data.get("started"), data.get("finished")
            if started and finished:
                stages[data["stage"]] = round((dt.datetime.fromisoformat(finished)
                                               - dt.datetime.fromisoformat(started)).total_seconds(), 1)
    out = {"threads": threads, "busy": n_busy, "assets_s": round(assets, 1), "pipeline_s": round(pipeline, 1),
           "fresh_s": round(assets + pipeline, 1), "rerun_s": round(rerun, 1), "stages_s": stages}
    print(json.dumps(out), flush=True)
    return out


def rows(result: dict) -> list[dict]:
    table = Rows(result)
    runs = result["runs"]
    chosen = result["chosen_threads"]
    for r in runs:
        variant = f"OMP_NUM_THREADS={r['threads']}, {r['busy']} busy processes"
        is_target = r["threads"] == chosen and r["busy"] == 0
        table.add("demo_timing.fresh_seconds", r["fresh_s"], "s", at_most(TARGET_FRESH_S) if is_target else None,
                  variant=variant, note=f"assets {r['assets_s']} s + pipeline {r['pipeline_s']} s; stages "
                                        + ", ".join(f"{k} {v}" for k, v in r["stages_s"].items()))
        table.add("demo_timing.rerun_seconds", r["rerun_s"], "s", at_most(TARGET_RERUN_S) if is_target else None,
                  variant=variant, note="every stage skipped")
    by = {(r["threads"], r["busy"]): r["fresh_s"] for r in runs}
    for n_busy in sorted({r["busy"] for r in runs}):
        if ("default", n_busy) in by and ("1", n_busy) in by:
            table.add("demo_timing.default_over_one_thread", by[("default", n_busy)] / by[("1", n_busy)], "x",
                      variant=f"{n_busy} busy processes",
                      note=f"{by[('default', n_busy)]} s with torch's default threads vs {by[('1', n_busy)]} s with 1")
    return table.rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="default,1")
    parser.add_argument("--busy", default="0,2")
    parser.add_argument("--chosen-threads", default="1", help="the setting `make demo` uses (the target rows)")
    parser.add_argument("--out", default="benchmarks/results/demo_timing.json")
    parser.add_argument("--rows-only", action="store_true", help=ROWS_ONLY_HELP)
    args = parser.parse_args()
    if args.rows_only:
        return rewrite(args.out, rows)
    log_dir = REPO / "build" / "bench"
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = [run_demo(t, int(b), log_dir) for b in args.busy.split(",") for t in args.threads.split(",")]
    result = {"date": now(), "machine": machine_info(), "command": " ".join(sys.argv),
              "chosen_threads": args.chosen_threads, "runs": runs}
    from purecover.utils.io import atomic_write_json

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, with_rows(result, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
