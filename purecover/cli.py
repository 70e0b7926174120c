"""The `purecover` command. Each stage is a subcommand reading a recipe and writing into `run_dir`.

    purecover data RECIPE [--set section.key=value ...]
    purecover config RECIPE [--set ...]        # print the resolved recipe

Stage subcommands come from the registry (`purecover.stages`), which imports each stage lazily so
`purecover --help` stays fast and optional dependencies are only needed by the stages using them;
the other commands (config, pipeline, tune, score, prompts, report, label-report, publish, serve, models) are
declared here (models in `purecover.models.models_cli`).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import shlex
import sys
from collections.abc import Callable
from typing import Any

from . import __version__
from .config import ConfigError, Recipe, dump_recipe_yaml
from .stages import PIPELINE, STAGES, load_hook
from .utils.entry import LOG_LEVEL_HELP, print_summary, quiet_library_notices
from .validate import load_validated_recipe

__all__ = ["build_parser", "main"]

_EPILOG = """\
examples:
  purecover data configs/recipes/demo_cpu.yaml
  purecover data configs/recipes/demo_cpu.yaml --set data.k1=10 --set run_dir=runs/k10
  purecover data --set data.dataset=hotpotqa --set data.path=hotpot_dev_distractor_v1.json \\
                 --set data.corpus=shared --set run_dir=runs/hotpot
  purecover pipeline configs/recipes/demo_cpu.yaml
  purecover pipeline configs/recipes/paper/hotpotqa.yaml --dry-run
  purecover config configs/recipes/demo_cpu.yaml --set teacher.lam=0.5
  purecover tune configs/recipes/demo_cpu.yaml --grid lam=0.05,0.1,0.3 --grid tau_stop=0,0.02
  purecover evaluate configs/recipes/demo_cpu.yaml --set eval.budgets=[1,3,5]
  purecover report runs/hotpotqa runs/2wiki runs/musique runs/strategyqa --out table.md
  purecover score preds.jsonl --dataset hotpotqa --gold hotpot_dev_distractor_v1.json --json
  purecover label-report runs/demo --k 5
  purecover prompts reasoning --recipe configs/recipes/demo_cpu.yaml
  purecover serve runs/demo/selector --port 8000
  purecover models fetch smollm2-135m-instruct

Every key of the recipe can be overridden with --set section.key=value (values are YAML:
numbers, true/false, null, [lists]). Unknown keys are errors that name the closest valid key.
"""


def _recipe(args: argparse.Namespace) -> Recipe:
    """RECIPE with its overrides, the whole of it validated (`purecover.validate`) before any work."""
    return load_validated_recipe(args.recipe, args.overrides)


def _cmd_config(args: argparse.Namespace) -> int:
    if args.reference:
        from .config.reference import recipe_reference

        sys.stdout.write(recipe_reference())
        return 0
    # keys, types and ranges without torch (seconds faster); the stage commands also build TrainingArguments
    recipe = load_validated_recipe(args.recipe, args.overrides, build_training=False)
    sys.stdout.write(dump_recipe_yaml(recipe))
    _warn_about_gold(recipe)
    return 0


def _warn_about_gold(recipe: Recipe) -> None:
    """Warnings when the first questions of a local data file lack gold passages or the oracle steps the teacher
    reads (`purecover.data.gold_check`)."""
    from .data.gold_check import probe_gold

    for problem in probe_gold(recipe):
        print(f"warning: {problem}", file=sys.stderr)


def _cmd_tune(args: argparse.Namespace) -> int:
    from .teacher.tune import parse_grid, tune

    recipe = _recipe(args)
    grid = parse_grid(args.grid) if args.grid else None
    result = tune(recipe, grid, tune_fraction=args.tune_fraction, max_fallback=args.max_fallback,
                  show_progress=not args.quiet)
    out = recipe.run_path / "tune"
    print((out / "tune.md").read_text(encoding="utf-8"))
    chosen = result.chosen
    print(f"chosen: {chosen['overrides']}")
    print(f"  tuning questions:   F1 {chosen['tune']['f1']:.3f}, |S| {chosen['tune']['mean_size']:.2f}, "
          f"fallback {chosen['tune']['fallback_rate']:.1%}")
    print(f"  held-out questions: F1 {chosen['heldout']['f1']:.3f}, |S| {chosen['heldout']['mean_size']:.2f}, "
          f"fallback {chosen['heldout']['fallback_rate']:.1%}")
    print(f"written: {out / 'tune.json'}, {out / 'tune.md'}" + "".join(f", {p}" for p in result.plots or []))
    print("to label with it: put these keys in the recipe and relabel (a new run_dir, or delete labels.jsonl "
          "and label_shards/ first)")
    return 0


def _run_registered(args: argparse.Namespace) -> int:
    """A registered stage (`purecover.stages`): validate, run (after its `before` stages), print the summary."""
    from .contract import run_stage

    recipe = _recipe(args)
    if getattr(args, "test_set", False):
        recipe = _test_set_recipe(recipe)
    if STAGES[args.command].launcher is not None:  # e.g. train with student.launch: accelerate launch
        from .pipeline import run_launched_train, train_needs_launch

        if train_needs_launch(recipe):
            print_summary(args.command, run_launched_train(recipe, show_progress=not args.quiet))
            return 0
    print_summary(args.command, run_stage(args.command, recipe, show_progress=not args.quiet))
    return 0


def _test_set_recipe(recipe: Recipe) -> Recipe:
    """``--test-set``: the recipe whose run_dir is the test set's (run_dir/test) and whose data section is the test set, exactly as
    the evaluate stage builds it (`purecover.data.data_stage.evaluation_recipe`: eval.path, split, sample, ...)."""
    from .data.data_stage import evaluation_recipe

    if not recipe.eval.path:
        raise ConfigError("--test-set needs eval.path (the test set's file or Hub dataset); without it the "
                          "evaluation questions are run_dir's own")
    return evaluation_recipe(recipe)


def _cmd_publish(args: argparse.Namespace) -> int:
    from .publish import publish

    result = publish(args.run_dir, args.what, to_disk=args.to_disk, push_to_hub=args.push_to_hub,
                     private=args.private, revision=args.revision, commit_message=args.commit_message)
    where = result.get("url") or result.get("path")
    state = "already pushed" if result.get("already_pushed") else "published"
    print(f"{state}: {result['rows']} {args.what} rows -> {where}")
    return 0


def _print_estimate(recipe: Recipe, stages: list[str]) -> None:
    """The dry run's rough time estimate of the stages with work (`purecover.estimate`)."""
    from .estimate import estimate_stages, total_text
    from .utils.progress import duration_text

    if not stages:
        return
    estimates = estimate_stages(recipe, stages)
    print(f"\nestimate (rough, within about x3; from the benchmarks' figures on 2 CPU cores with SmolLM2-135M, "
          f"scaled by questions, parameters and K1): {total_text(estimates)}")
    for e in estimates:
        when = "—" if e.seconds is None else "fast" if e.seconds == 0 else f"~{duration_text(e.seconds)}"
        print(f"  {e.stage:<9}  {when:<10}  {e.how}")


def _cmd_pipeline(args: argparse.Namespace) -> int:
    from .pipeline import (
        check_stages_with_work,
        figure_legend,
        plan_pipeline,
        resolve_resources,
        run_pipeline,
        summary_table,
    )

    # Keys, types and ranges here, without torch; the stages' slow checks (the train stage's TrainingArguments)
    # run on the plan, only for stages with work, still before any stage runs: a rerun whose stages are all
    # complete stays fast, and no recipe error can come after an expensive stage.
    recipe = load_validated_recipe(args.recipe, args.overrides, build_training=False)
    if args.dry_run:  # a real run makes its plan once, under the run directory's lock
        resources = resolve_resources(recipe)
        plans = plan_pipeline(recipe, args.start)
        check_stages_with_work(recipe, plans, dry_run=True)
        print(f"purecover pipeline (dry run): {args.recipe or 'built-in defaults'} -> run_dir {recipe.run_dir}")
        print("\nresources:")
        width = max(len(r.key) for r in resources)
        for r in resources:
            print(f"  {r.key:<{width}}  {r.status:<8}  {r.value}  ({r.note})")
        print("\nplan:")
        for p in plans:
            print(f"  {p.stage:<9}  {p.action:<10}  {p.reason}")
            if p.command is not None:  # the train stage under accelerate launch (student.launch)
                print(f"  {'':<9}  {'command':<10}  {shlex.join(p.command)}")
                print(f"  {'':<9}  {'':<10}  (the resolved recipe is written to {p.command[-1]} when the stage "
                      "starts)")
        _print_estimate(recipe, [p.stage for p in plans if p.action in ("run", "resume", "redo", "rerun")])
        missing = [r for r in resources if r.status == "missing"]
        blocked = [p for p in plans if p.action == "blocked"]
        _warn_about_gold(recipe)
        if missing:
            print(f"\nwarning: {len(missing)} input(s) missing here: " + ", ".join(r.key for r in missing)
                  + " (needed when their stage runs)", file=sys.stderr)
        if blocked:
            print(f"error: stage {blocked[0].stage} is blocked: {blocked[0].reason}", file=sys.stderr)
            return 1
        return 1 if (missing and args.strict) else 0
    rows = run_pipeline(recipe, args.start, show_progress=not args.quiet)
    print("\npurecover pipeline: done\n")
    print(summary_table(rows))
    print(figure_legend(rows))
    report = recipe.run_path / "eval" / "report.md"
    if report.is_file():
        print(f"\nreport: {report}")
    return 0


def _cmd_prompts(args: argparse.Namespace) -> int:
    from .config import load_recipe
    from .prompts import effective_prompt, prompt_listing

    recipe = load_recipe(args.recipe, args.overrides) if (args.recipe or args.overrides) else None
    if args.name is None:
        sys.stdout.write(prompt_listing(recipe))
        return 0
    text, where = effective_prompt(args.name, recipe)
    print(f"{args.name}: {where}", file=sys.stderr)
    if text is not None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .eval.report import write_combined_report

    sys.stdout.write(write_combined_report(args.runs, args.out, args.k))
    if args.out:
        print(f"written to {args.out}", file=sys.stderr)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from .serve import require_serve_extra

    try:
        require_serve_extra()
    except ImportError as exc:
        print(f"purecover serve: error: {exc}", file=sys.stderr)
        return 1
    from .serve.server import serve_command

    return serve_command(args.selector_dir, host=args.host, port=args.port, backend=args.backend,
                         device=args.device, dtype=args.dtype, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                         max_queue=args.max_queue, model_name=args.model_name, api_key_env=args.api_key_env,
                         log_level=args.log_level, shutdown_timeout=args.shutdown_timeout,
                         max_body_bytes=int(args.max_body_mb * 2**20), head_timeout=args.head_timeout,
                         max_connections=args.max_connections)


def _number(kind: type, low: float, high: float = math.inf, low_inclusive: bool = True) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` in [low, high] (or (low, high]); bad values fail at parse time, before a
    model loads, with the accepted range in the message."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        ok = math.isfinite(value) and (value >= low if low_inclusive else value > low) and value <= high
        if not ok:
            bounds = f"{'≥' if low_inclusive else '>'} {low:g}" + ("" if high == math.inf else f" and ≤ {high:g}")
            raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number {bounds}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _add_serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``purecover serve SELECTOR_DIR``: takes an exported selector directory, not a recipe."""
    p = sub.add_parser(
        "serve",
        help="serve an exported selector over HTTP: /v1/select, /v1/rerank (Cohere/Jina shape), /health, /metrics",
        description="Load SELECTOR_DIR (the output of `purecover export`) and serve it with uvicorn: POST /v1/select "
                    "(the kept set and every document's score), POST /v1/rerank and /v2/rerank (the Cohere/Jina "
                    "rerank shape, plus `selected` and `logit`), GET /health, GET /v1/models and GET /metrics "
                    "(Prometheus). Concurrent requests are batched into one forward pass (--max-batch, "
                    "--max-wait-ms); beyond --max-queue waiting requests the server answers 429. SIGTERM or "
                    "Ctrl-C stops it gracefully (requests in flight are answered). Needs the serve extra: "
                    "pip install -e '.[serve]'. Guide: docs/guides/serving.md.",
    )
    p.add_argument("selector_dir", metavar="SELECTOR_DIR", help="an exported selector directory (run_dir/selector)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=_number(int, 0, 65535), default=8000, help="port (default 8000; 0: any free port)")
    p.add_argument("--backend", default="hf", choices=["hf", "vllm"], help="inference backend (default hf)")
    p.add_argument("--device", default="auto", help="hf backend: auto | cpu | cuda[:N] (default auto)")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 (default auto)")
    p.add_argument("--max-batch", type=_number(int, 1), default=16, help="requests gathered into one forward pass (default 16)")
    p.add_argument("--max-wait-ms", type=_number(float, 0), default=5.0,
                   help="how long a batch waits for more requests after its first one, in ms (default 5)")
    p.add_argument("--max-queue", type=_number(int, 1), default=256,
                   help="waiting requests beyond which new ones get HTTP 429 (default 256)")
    p.add_argument("--model-name", default=None, help="the model name in responses (default: the directory's name)")
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="require `Authorization: Bearer KEY`, KEY read from environment variable NAME "
                        "(the key itself is never taken on the command line)")
    p.add_argument("--max-body-mb", type=_number(float, 0, 1024, low_inclusive=False), default=4.0,
                   help="request bodies larger than this many MiB get HTTP 413 (default 4)")
    p.add_argument("--shutdown-timeout", type=_number(float, 0), default=30.0,
                   help="seconds in-flight requests get to finish after SIGTERM (default 30)")
    p.add_argument("--head-timeout", type=_number(float, 0, low_inclusive=False), default=10.0,
                   help="seconds a client has to send a whole request line and headers; slower ones are "
                        "disconnected (default 10)")
    p.add_argument("--max-connections", type=_number(int, 1), default=512,
                   help="open connections beyond which new requests get HTTP 503 (default 512)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    p.set_defaults(handler=_cmd_serve)


def _cmd_label_report(args: argparse.Namespace) -> int:
    from .teacher.label_report import label_report, render_label_report

    report = label_report(args.run_dir, args.out, args.k)
    if args.json:
        print(json.dumps(report.to_json_dict(), indent=2, ensure_ascii=False))
        if report.warning:
            print(f"warning: {report.warning}", file=sys.stderr)
    else:
        sys.stdout.write(render_label_report(report))
    return 0


# name -> (one-line help, description, handler)
_COMMANDS: dict[str, tuple[str, str, Callable[[argparse.Namespace], int]]] = {
    "tune": (
        "choose teacher.lam / tau_stop / temperatures on questions with gold passages -> run_dir/tune/",
        "Label once (the label stage, skipped when complete), then re-solve every point of --grid from the raw "
        "scores stored in labels.jsonl and report label precision/recall/F1 against the gold passages, mean |S| "
        "and fallback rate. The first --tune-fraction of the questions with gold passages choose the setting "
        "(best F1 with fallback <= --max-fallback); the rest are held out and only reported. Writes "
        "run_dir/tune/tune.json, tune.md and plots/. Grid keys: lam, tau_stop, budget, min_select, tau1, tau2, "
        "embedding_tau, embedding_tau_e, normalize, cot_weighting, calibrate, beta, repeated_steps; without "
        "--grid: lam x the W and e temperatures x {0.5, 1, 2}.",
        _cmd_tune,
    ),
    "pipeline": (
        f"run every stage in order: {', '.join(PIPELINE)}",
        f"Run {' -> '.join(PIPELINE)} on RECIPE, skipping stages already complete for the same configuration "
        "(their <stage>.run.json says complete for the same config hash and their outputs still match it) and "
        "resuming partly done ones. --from STAGE reruns STAGE and everything after it; --dry-run validates the "
        "recipe, resolves every model, dataset and file (Hub ids are not fetched) and prints the plan. Ends with a "
        "summary table.",
        _cmd_pipeline,
    ),
    "config": (
        "print the resolved recipe (validates the whole recipe, as every stage does first)",
        "Load RECIPE, apply --set overrides, validate the whole recipe (every key and value, student.training "
        "keys, types and ranges against transformers' TrainingArguments fields, data.k1 against "
        "student.identifiers, eval.table_budget against eval.budgets) and print the resolved recipe as YAML. "
        "Imports no torch; the stage commands also build TrainingArguments before any work.",
        _cmd_config,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="purecover",
        description="Distilled set-wise document selection for RAG (PureCover).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"purecover {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = {name: (st.help, st.description, _run_registered) for name, st in STAGES.items()}
    for name, (help_text, description, handler) in {**commands, **_COMMANDS}.items():
        p = sub.add_parser(name, help=help_text, description=description)
        p.add_argument("recipe", nargs="?", metavar="RECIPE",
                       help="recipe YAML (omit to start from the built-in defaults)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="override a recipe key (repeatable), e.g. --set data.k1=50")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress (bars on a terminal, log lines in a log file)")
        p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
        if name == "pipeline":
            p.add_argument("--from", dest="start", default=None, metavar="STAGE",
                           choices=list(PIPELINE),
                           help="rerun this stage and every later one")
            p.add_argument("--dry-run", action="store_true", help="validate and print the plan; run nothing")
            p.add_argument("--strict", action="store_true", help="with --dry-run: missing local inputs are an error")
        if name == "config":
            p.add_argument("--reference", action="store_true",
                           help="print the recipe reference (every key: type, range, default, meaning) as Markdown")
        if name == "tune":
            p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                           help="values to try (repeatable), e.g. --grid lam=0.05,0.1,0.3 --grid tau_stop=0,0.02")
            p.add_argument("--tune-fraction", type=float, default=0.5,
                           help="share of the questions with gold passages that choose (the first ones); default 0.5")
            p.add_argument("--max-fallback", type=float, default=0.05,
                           help="largest fallback rate a chosen setting may have on the tuning questions")
        stage = STAGES.get(name)
        if stage is not None and stage.test_set:
            p.add_argument("--test-set", action="store_true",
                           help="run on the test set of eval.path in run_dir/test (its candidates, bias and teacher "
                                "labels, which evaluate reads), drawn exactly as evaluate draws it")
        if stage is not None and stage.command is not None:  # the stage's own options (light modules: no torch)
            handler = functools.partial(load_hook(stage.command)(p), default=_run_registered)
        p.set_defaults(handler=handler)
    from .eval.score_cli import add_score_arguments, main_score  # light module: loaders import lazily

    p = sub.add_parser(
        "score",
        help="score a predictions file ({qid, prediction} JSONL) with the dataset's official rules",
        description="Read PREDICTIONS.jsonl (one {\"qid\": ..., \"prediction\": ...} per line) and the gold "
                    "answers (answer + aliases) from the dataset's own file (--gold; --aliases for 2Wiki's "
                    "id_aliases.json); print EM, F1 and Acc (the rules are in docs/guides/evaluation.md#qa). --json prints one JSON object "
                    "{em, f1, acc, n, missing}. Missing predictions are an error unless --allow-missing.",
    )
    add_score_arguments(p)
    p.set_defaults(handler=main_score)
    from .eval.score_run_cli import (  # light: ir_measures imports lazily
        add_score_run_arguments,
        main_score_run,
    )

    p = sub.add_parser(
        "score-run",
        help="score TREC runs or selections on a coverage collection (nugget qrels): nDCG, P, alpha-nDCG, "
             "StRecall, CRUX Cov",
        description="Score each RUN (a TREC run file or a selections JSONL) against nugget qrels (qid nugget_id "
                    "doc_id rel) with ir_measures and pyndeval: nDCG@K, P@K, alpha_nDCG@K, StRecall@K, and "
                    "CRUX's Cov@K with --judgments; a selections file is also scored as the set it is "
                    "(StRecall@set, Cov@set). Topics the run does not answer score 0. Several runs: bootstrap "
                    "intervals and paired tests against the first (docs/guides/coverage-evaluation.md).",
    )
    add_score_run_arguments(p)
    p.set_defaults(handler=main_score_run)
    p = sub.add_parser(
        "prompts",
        help="list every prompt template (teacher, LANCER, selector, RAG answer), or print one",
        description="Without NAME: list every prompt template in purecover/prompts/ with what it is for, its "
                    "placeholders and the recipe key that replaces it. With NAME: print that template (ours), or "
                    "with --recipe / --set the wording that recipe's runs use (its override file, loaded and "
                    "checked); where it comes from goes to stderr, so the output can be saved as a starting "
                    "point for an override file.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="a prompt name from the listing, e.g. reasoning")
    p.add_argument("--recipe", default=None, metavar="RECIPE", help="show the wording this recipe uses")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a recipe key (repeatable), e.g. --set eval.prompt_file=answer.txt")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    p.set_defaults(handler=_cmd_prompts)
    p = sub.add_parser(
        "report",
        help="the paper's table over several evaluated runs (rows methods, columns datasets x EM/F1/Acc)",
        description="Read RUN_DIR/eval/metrics.json (or a metrics.json path) of each run and print one markdown "
                    "table: a row per method, a column group per dataset (EM, F1, Acc) at each run's "
                    "eval.table_budget (or --k).",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories or metrics.json files")
    p.add_argument("--k", type=int, default=None, help="budget to report (default: each run's eval.table_budget)")
    p.add_argument("--out", default=None, help="also write the table to this file")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    p.set_defaults(handler=_cmd_report)
    p = sub.add_parser(
        "label-report",
        help="diagnostics of RUN_DIR/labels.jsonl: |S| histogram, fallbacks, stops, P/R/F1 against gold",
        description="Read RUN_DIR/labels.jsonl and RUN_DIR/candidates.jsonl; print the |S| histogram, the "
                    "fallback rate and reasons, why selections stopped, the spread of e and W, a warning when "
                    "the fallback rate exceeds teacher.fallback_warn (default 0.1), and P/R/F1 of the labels "
                    "against gold passages next to retrieval's top-|S|, top-2 and top-K. Writes report.json, "
                    "size_histogram.png and precision_recall.png to RUN_DIR/label_report/ (or --out).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with labels.jsonl and candidates.jsonl")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default: RUN_DIR/label_report)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument("--k", type=int, default=None, help="retrieval top-K to compare with (default: the labels' budget)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    p.set_defaults(handler=_cmd_label_report)
    p = sub.add_parser(
        "publish",
        help="RUN_DIR's labels, selections or candidates as a Hugging Face dataset (to disk or to the Hub)",
        description="Build a `datasets.Dataset` from RUN_DIR/<what>.jsonl (nested fields kept) with a dataset card "
                    "(README.md: field meanings, the recipe that made them, the source dataset's licence) and save "
                    "it with save_to_disk (--to-disk DIR) or push it as parquet to a Hub dataset repo "
                    "(--push-to-hub REPO; recorded in RUN_DIR/publish.<what>.push.json).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory")
    p.add_argument("--what", required=True, choices=["labels", "selections", "candidates"])
    dest = p.add_mutually_exclusive_group(required=True)
    dest.add_argument("--to-disk", default=None, metavar="DIR", help="save_to_disk into DIR (replaced atomically)")
    dest.add_argument("--push-to-hub", default=None, metavar="REPO", help="push to this Hub dataset repo")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument("--revision", default=None, metavar="BRANCH", help="with --push-to-hub: the branch (default main)")
    p.add_argument("--commit-message", default=None, help="with --push-to-hub: the commit message")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    p.set_defaults(handler=_cmd_publish)
    _add_serve_parser(sub)
    from .models.models_cli import add_models_parser

    add_models_parser(sub)
    return parser


def _interrupted_within(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the causes / contexts of `exc` (groups included): a Ctrl-C
    that a library re-raised as another error, as transformers' lazy imports do with ModuleNotFoundError."""
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        err = todo.pop()
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, KeyboardInterrupt):
            return True
        todo.extend(e for e in (err.__cause__, err.__context__) if e is not None)
        members = getattr(err, "exceptions", None)  # an exception group (Python 3.11+)
        if isinstance(members, tuple):
            todo.extend(e for e in members if isinstance(e, BaseException))
    return False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_library_notices()
    noisy = ("bm25s", "httpx", "urllib3", "filelock")

    def quiet_libraries(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(noisy)

    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet_libraries)
    from .data.errors import DataFormatError, HubUnavailableError

    try:
        try:
            return args.handler(args)
        except Exception as exc:
            if not _interrupted_within(exc):
                raise
            logging.getLogger("purecover").debug("a Ctrl-C surfaced as this error", exc_info=True)
            raise KeyboardInterrupt from exc
    except ConfigError as exc:
        print(f"purecover: recipe error: {exc}", file=sys.stderr)
        return 2
    except (DataFormatError, HubUnavailableError, FileNotFoundError, PermissionError, ValueError,
            RuntimeError, OSError) as exc:
        logging.getLogger("purecover").debug("traceback of the error below", exc_info=True)
        print(f"purecover {args.command}: error: {_describe(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"purecover {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # anything unexpected: one line, the traceback only on request
        logging.getLogger("purecover").debug("unexpected error", exc_info=True)
        print(f"purecover {args.command}: unexpected error: {type(exc).__name__}: {exc} "
              "(rerun with --log-level DEBUG for the traceback)", file=sys.stderr)
        return 1


def _describe(exc: BaseException) -> str:
    """The message of `exc`; plain OSErrors read "<reason>: <path>" instead of "[Errno N] ..."."""
    if type(exc) in (OSError, FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError) \
            and getattr(exc, "strerror", None) and getattr(exc, "filename", None):
        return f"{exc.strerror}: {exc.filename}"
    return str(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
