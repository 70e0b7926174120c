"""The demos' wall time, fresh and rerun, by torch thread count, on idle and on busy cores.

    python benchmarks/demo_timing.py [--demo demo|real|coverage] [--threads auto,1,2] [--busy 0,2]
                                     [--out benchmarks/results/demo_timing.json]

Each configuration runs what the demo runs, in a fresh working directory (so nothing is reused), then its
pipeline again (every stage skipped):

* ``demo`` (`make demo`): the demo assets (``python -m purecover.demo runs/demo-assets``), then ``purecover
  pipeline configs/recipes/demo_cpu.yaml``;
* ``real`` (`make demo-real`): ``purecover models fetch smollm2-135m-instruct`` (the user's model cache: after the
  first fetch it only verifies; timed apart, not in the fresh figure), then ``purecover pipeline
  configs/recipes/real_cpu/demo.yaml``;
* ``coverage`` (docs/guides/coverage-evaluation.md): ``python -m purecover.demo``, then ``purecover pipeline
  configs/recipes/coverage_demo_cpu.yaml``.

Rows of ``demo`` keep their names (``demo_timing.fresh_seconds``, ...); the others carry the demo's name
(``demo_timing.real.fresh_seconds``, ...). Results of several ``--demo`` runs merge into one file: a run
replaces the rows of its own demo only. ``--threads``: torch's
intra-op threads: a number through ``OMP_NUM_THREADS``; ``auto``: unset, so purecover chooses at each stage (the
recipe's ``threads: auto``: the usable cores minus the processes running then); ``default``: torch's own choice,
one thread per core (``OMP_NUM_THREADS`` = the core count; runs stored before ``auto`` existed left it unset).
``--busy N``: N processes spin on the CPU meanwhile (``make test`` beside the demo is 2 busy workers on 2
cores): the contended case where the issue measured 241 s. Figures: seconds per configuration, the ratio
of the thread settings per load (``auto_over_best_fixed``: ``auto`` against the fastest fixed setting at the same
load, target ≤ 1.10), and the rerun's seconds. `make demo` sets the thread count these figures
chose; the README and the benchmarks page quote them.

Targets (`TARGETS`), on 2 idle cores with the demo's chosen thread setting (``--chosen-threads``): the fresh run
≤ 60 s (``demo``), ≤ 600 s (``real``: the README's 10 minutes), ≤ 30 s (``coverage``); the rerun ≤ 5 / 10 / 5 s.
The setting is chosen once the runs are in: ``--choose --demo real --chosen-threads 1`` sets it in the stored
``--out`` file and rewrites the rows (nothing is measured).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import harness
from benchlib.harness import busy
from benchlib.rows import Rows, at_most, machine_info, now

REPO = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "WANDB_MODE": "offline"}
DEMOS: dict[str, dict[str, Any]] = {
    # prepare: run once before the clock (its own time is a figure); assets: timed as part of the fresh run
    "demo": {"prepare": None, "assets": ["-m", "purecover.demo", "runs/demo-assets"],
             "recipe": "configs/recipes/demo_cpu.yaml", "run_dir": "runs/demo"},
    "real": {"prepare": ["-m", "purecover", "models", "fetch", "smollm2-135m-instruct"], "assets": None,
             "recipe": "configs/recipes/real_cpu/demo.yaml", "run_dir": "runs/demo-real"},
    "coverage": {"prepare": None, "assets": ["-m", "purecover.demo"],
                 "recipe": "configs/recipes/coverage_demo_cpu.yaml", "run_dir": "runs/coverage-demo"},
}
# Targets, per demo: the fresh run with setup done, on 2 idle cores, with the chosen thread setting (what the docs
# promise), and its rerun.
TARGETS = {"demo": (60.0, 5.0), "real": (600.0, 10.0), "coverage": (30.0, 5.0)}
TARGET_FRESH_S, TARGET_RERUN_S = TARGETS["demo"]
AUTO_TARGET = at_most(1.10)  # threads: auto within 10% of the better fixed setting, idle and busy (issue 53)


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "ab") as out:
        subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - start


def run_demo(threads: str, n_busy: int, log_dir: Path, demo: str = "demo") -> dict[str, Any]:
    spec = DEMOS[demo]
    env = {**os.environ, **OFFLINE}
    env.pop("OMP_NUM_THREADS", None)
    if threads == "default":  # torch's own choice: one thread per core
        env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
    elif threads != "auto":
        env["OMP_NUM_THREADS"] = threads
    log = log_dir / f"{demo}-threads{threads}-busy{n_busy}.log"
    recipe = str(REPO / spec["recipe"])
    prepare = None
    if spec["prepare"]:  # the model fetch: the network only the first time, then a cache check
        prepare = timed([sys.executable, *spec["prepare"]], REPO, {**os.environ}, log)
    with tempfile.TemporaryDirectory(prefix="demo-timing-") as tmp, busy(n_busy):
        cwd = Path(tmp)
        assets = timed([sys.executable, *spec["assets"]], cwd, env, log) if spec["assets"] else 0.0
        pipeline = timed([sys.executable, "-m", "purecover", "pipeline", recipe], cwd, env, log)
        rerun = timed([sys.executable, "-m", "purecover", "pipeline", recipe], cwd, env, log)
        stages = {}
        for manifest in sorted((cwd / spec["run_dir"]).glob("*.run.json")):
            data = json.loads(manifest.read_text(encoding="utf-8"))
            started, finished = data.get("started"), data.get("finished")
            if started and finished:
                stages[data["stage"]] = round((dt.datetime.fromisoformat(finished)
                                               - dt.datetime.fromisoformat(started)).total_seconds(), 1)
    out = {"demo": demo, "threads": threads, "busy": n_busy, "assets_s": round(assets, 1),
           "pipeline_s": round(pipeline, 1), "fresh_s": round(assets + pipeline, 1), "rerun_s": round(rerun, 1),
           "stages_s": stages, **({"prepare_s": round(prepare, 1)} if prepare is not None else {})}
    print(json.dumps(out), flush=True)
    return out


def setting_name(threads: str) -> str:
    """How a thread setting reads in a row's variant: ``threads=auto`` (purecover's choice) or
    ``OMP_NUM_THREADS=<n or default>``."""
    return "threads=auto" if threads == "auto" else f"OMP_NUM_THREADS={threads}"


def rows(result: dict) -> list[dict]:
    table = Rows(result)
    for demo in DEMOS:
        runs = [r for r in result["runs"] if r.get("demo", "demo") == demo]
        chosen = (result.get("chosen_threads_by_demo") or {}).get(demo, result.get("chosen_threads"))
        name = "demo_timing" if demo == "demo" else f"demo_timing.{demo}"
        fresh_target, rerun_target = TARGETS[demo]
        for r in runs:
            variant = f"{setting_name(r['threads'])}, {r['busy']} busy processes"
            is_target = r["threads"] == chosen and r["busy"] == 0
            before = f"assets {r['assets_s']} s + " if r["assets_s"] else ""
            prepared = f"; model fetch (cached) {r['prepare_s']} s, not counted" if "prepare_s" in r else ""
            table.add(f"{name}.fresh_seconds", r["fresh_s"], "s", at_most(fresh_target) if is_target else None,
                      variant=variant, note=f"{before}pipeline {r['pipeline_s']} s; stages "
                                            + ", ".join(f"{k} {v}" for k, v in r["stages_s"].items()) + prepared)
            table.add(f"{name}.rerun_seconds", r["rerun_s"], "s", at_most(rerun_target) if is_target else None,
                      variant=variant, note="every stage skipped")
        by = {(r["threads"], r["busy"]): r["fresh_s"] for r in runs}
        for n_busy in sorted({r["busy"] for r in runs}):
            fixed = {t: v for (t, b), v in by.items() if b == n_busy and t.isdigit()}
            if ("auto", n_busy) in by and fixed:
                best = min(fixed, key=lambda t: fixed[t])
                table.add(f"{name}.auto_over_best_fixed", by[("auto", n_busy)] / fixed[best], "x", AUTO_TARGET,
                          variant=f"{n_busy} busy processes",
                          note=f"{by[('auto', n_busy)]} s with threads: auto vs {fixed[best]} s with "
                               f"OMP_NUM_THREADS={best}, the fastest of " + ", ".join(sorted(fixed)))
            if ("default", n_busy) in by and ("1", n_busy) in by:
                table.add(f"{name}.default_over_one_thread", by[("default", n_busy)] / by[("1", n_busy)], "x",
                          variant=f"{n_busy} busy processes",
                          note=f"{by[('default', n_busy)]} s with torch's default threads vs {by[('1', n_busy)]} s "
                               "with 1")
    return table.rows


def merged(previous: dict[str, Any] | None, demo: str, runs: list[dict[str, Any]], chosen: str) -> dict[str, Any]:
    """`previous` results with the runs of `demo` replaced by `runs` (the other demos' runs kept)."""
    kept = [r for r in (previous or {}).get("runs", []) if r.get("demo", "demo") != demo]
    by_demo = dict((previous or {}).get("chosen_threads_by_demo") or {})
    if previous and "chosen_threads" in previous and "demo" not in by_demo:
        by_demo["demo"] = previous["chosen_threads"]
    by_demo[demo] = chosen
    return {"runs": [*kept, *runs], "chosen_threads": by_demo.get("demo", chosen), "chosen_threads_by_demo": by_demo}


def choose(out: str | Path, demo: str, threads: str, command: str) -> int:
    """Set `demo`'s chosen thread setting in the stored results `out` (chosen once its runs are in: the runs are
    kept, the rows rewritten); an error when `out` has no run of `demo` with that setting on idle cores."""
    stored = harness.load(out)
    runs = [r for r in (stored or {}).get("runs", []) if r.get("demo", "demo") == demo]
    if not any(r["threads"] == threads and r["busy"] == 0 for r in runs):
        raise SystemExit(f"{out}: no {demo} run with OMP_NUM_THREADS={threads} on idle cores to choose")
    result = {**stored, **merged(stored, demo, runs, threads),
              "choices": {**stored.get("choices", {}), demo: {"command": command, "date": now()}}}
    harness.write(out, result, rows)
    print(f"{out}: {demo} runs on OMP_NUM_THREADS={threads}; rows rewritten")
    return 0


MAX_BUSY = 64  # spinning processes: more is no benchmark, only a stalled machine


def thread_settings(text: str) -> list[str]:
    """``--threads``: ``auto``, ``default`` or a thread count from 1 to 1024, comma-separated, at least one."""
    import argparse

    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in ("auto", "default") and not (v.isdigit() and 1 <= int(v) <= 1024)]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"expected auto, default or thread counts 1..1024, got {text!r}")
    return values


def busy_counts(text: str) -> list[int]:
    """``--busy``: counts of spinning processes from 0 to `MAX_BUSY`, comma-separated, at least one."""
    import argparse

    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values or any(not v.isdigit() or int(v) > MAX_BUSY for v in values):
        raise argparse.ArgumentTypeError(f"expected counts 0..{MAX_BUSY} of busy processes, got {text!r}")
    return [int(v) for v in values]


def log_dir_for(out: Path) -> Path:
    """Where a measuring run's logs go: build/bench for a results file in the repository's results folder (kept
    out of the committed results), else ``<out>.logs`` beside --out."""
    out = Path(out).resolve()
    if out.parent == REPO / "benchmarks" / "results":
        return REPO / "build" / "bench"
    return out.with_name(out.name + ".logs")


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser(__doc__, out="benchmarks/results/demo_timing.json")
    parser.add_argument("--demo", default="demo", choices=sorted(DEMOS))
    parser.add_argument("--threads", default="auto,1,2", type=thread_settings,
                        help="comma-separated: auto, default or a thread count (default: %(default)s)")
    parser.add_argument("--busy", default="0,2", type=busy_counts,
                        help=f"comma-separated counts of spinning processes, each 0..{MAX_BUSY} (default: %(default)s)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="where each run's log goes (default: build/bench for the repository's results folder, "
                             "else <out>.logs beside --out)")
    parser.add_argument("--chosen-threads", default="1", help="the setting the demo's make target uses (the target "
                        "rows)")
    parser.add_argument("--choose", action="store_true", help="measure nothing: set --demo's --chosen-threads in the "
                        "stored --out file (its runs kept) and rewrite the rows")
    args = harness.parse(parser, argv)
    if args.choose:
        command = " ".join(["benchmarks/demo_timing.py", *(sys.argv[1:] if argv is None else argv)])
        with harness.malformed([args.out]):
            return choose(args.out, args.demo, args.chosen_threads, command)
    if (status := harness.stored(args, rows)) is not None:
        return status
    log_dir = args.log_dir or log_dir_for(args.out)
    log_dir.mkdir(parents=True, exist_ok=True)
    previous = harness.load(args.out)  # read (and checked) before an hour of measuring, not after
    runs = [run_demo(t, b, log_dir, args.demo) for b in args.busy for t in args.threads]
    result = {"date": now(), "machine": machine_info(), "command": " ".join(sys.argv),
              **merged(previous, args.demo, runs, args.chosen_threads)}
    harness.write(args.out, result, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
