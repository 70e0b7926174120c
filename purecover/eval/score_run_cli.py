"""`purecover score-run RUN [RUN ...] --qrels QRELS [--judgments FILE] [--depth K] [--json]`: score runs or selections
on a coverage collection (`purecover.eval.coverage_scoring`).

RUN is a TREC run file, purecover's ``candidates.jsonl`` (the retrieval ranking) or a JSONL selections file
(purecover's ``selections.jsonl``, or ``{qid, doc_ids}`` lines),
named by its file name or ``NAME=PATH``. One run prints a table of its measures (with ``--json``: one object
whose keys are the measure names as ir_measures prints them, ``nDCG@20``, ``P@20``, ``alpha_nDCG@20``,
``StRecall@20``, plus ``Cov@20`` with judgments and the ``@set`` forms for selections). Several runs print
each measure's mean and 95% percentile bootstrap interval over topics, and each run against the first with a
paired sign-flip permutation test (`purecover.eval.stats`, as the evaluate stage reports QA).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..utils.entry import LOG_LEVEL_HELP

__all__ = ["add_score_run_arguments", "main_score_run", "score_runs"]


def _named(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if sep and name and path:
        return name, Path(path)
    return Path(spec).stem, Path(spec)


def _is_selection(path: Path) -> bool:
    """A JSONL of selected sets (also scored as sets), not a ranking: TREC runs and candidates.jsonl (``docs``)
    are rankings. Read after `read_ranked` checked the file."""
    if path.suffix != ".jsonl":
        return False
    with path.open("r", encoding="utf-8") as fh:
        first = next((line for line in fh if line.strip()), "{}")
    return "docs" not in json.loads(first)


def score_runs(specs: list[str], qrels: str | Path, judgments: str | Path | None = None, depth: int = 20,
               doc_qrels: str | Path | None = None, answerable_only: bool = False, seed: int = 0) -> dict:
    """The report `purecover score-run` prints as JSON (see the module docstring)."""
    from .coverage_collections import (
        CoverageCollection,
        read_judgments,
        read_nugget_qrels,
        read_ranked,
        read_run_scores,
    )
    from .coverage_scoring import measure_names, score_ranked
    from .stats import bootstrap_ci, paired_test

    named = [_named(s) for s in specs]
    if len({n for n, _ in named}) != len(named):
        raise ValueError("two runs have the same name: name them NAME=PATH")
    collection = CoverageCollection({}, read_nugget_qrels(qrels), read_judgments(judgments) if judgments else None,
                                    source=str(qrels))
    levels = None
    if doc_qrels is not None:
        from ..utils.trec import read_trec_qrels

        levels = read_trec_qrels(doc_qrels)
    runs = {}
    for name, path in named:  # every file is read (and checked) before any is scored
        runs[name] = (read_ranked(path), _is_selection(path), read_run_scores(path))
    scored = {name: score_ranked(ranked, collection, depth, doc_qrels=levels, selections=sel,
                                 answerable_only=answerable_only, scores=file_scores)
              for name, (ranked, sel, file_scores) in runs.items()}
    if len(scored) == 1:
        ((name, scores),) = scored.items()
        out: dict = {m: scores.mean(m) for m in scores.per_topic}
        out.update(topics=len(scores.topics), missing=len(scores.missing), unjudged=len(scores.unjudged))
        return out
    report: dict = {"runs": {}, "paired": {}, "baseline": named[0][0]}
    baseline = scored[named[0][0]]
    for name, scores in scored.items():
        entry: dict = {"topics": len(scores.topics), "missing": len(scores.missing), "unjudged": len(scores.unjudged)}
        for m in scores.per_topic:
            ci = bootstrap_ci(scores.values(m), seed=seed)
            entry[m] = {"mean": ci.mean, "low": ci.low, "high": ci.high}
        report["runs"][name] = entry
        if scores is not baseline:
            report["paired"][name] = {}
            for m in measure_names(depth, judgments is not None):
                test = paired_test(scores.values(m), baseline.values(m), seed=seed)
                report["paired"][name][m] = {"diff": test.diff, "low": test.low, "high": test.high, "p": test.p}
    return report


def add_score_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `purecover score-run`."""
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="a TREC run file or a selections JSONL; NAME=PATH names it (default: the file name)")
    parser.add_argument("--qrels", required=True, metavar="FILE",
                        help="nugget qrels, ndeval's layout: qid nugget_id doc_id rel (a local file, or a Hub "
                             "dataset's: hf://datasets/OWNER/NAME/PATH)")
    parser.add_argument("--judgments", metavar="FILE", default=None,
                        help='CRUX judge lines {"id", "docid", "ratings": [0-5 per sub-question]}: adds Cov@K')
    parser.add_argument("--doc-qrels", metavar="FILE", default=None,
                        help="document qrels (qid 0 doc_id rel) for nDCG and P; default: a document's highest "
                             "grade over the nuggets")
    parser.add_argument("--depth", type=int, default=20, metavar="K", help="the cut-off k of every @k measure (1-20)")
    parser.add_argument("--answerable-only", action="store_true",
                        help="Cov@K over the sub-questions some judged document answers (CRUX's filter_by_oracle)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help=LOG_LEVEL_HELP)


def _table(report: dict) -> str:
    if "runs" not in report:
        counts = {k: report.pop(k) for k in ("topics", "missing", "unjudged")}
        lines = [f"{m:<16}{v:8.4f}" for m, v in report.items()]
        return "\n".join([*lines, f"topics {counts['topics']}, missing {counts['missing']} (scored 0), "
                                  f"unjudged {counts['unjudged']} (left out)"])
    names = list(report["runs"])
    measures = list(dict.fromkeys(m for n in names for m in report["runs"][n]
                                  if m not in ("topics", "missing", "unjudged")))
    lines = ["measure".ljust(16) + "".join(n[:26].ljust(28) for n in names)]
    for m in measures:
        cells = []
        for n in names:
            v = report["runs"][n].get(m)
            if v is None:  # a set measure of another run's selections
                cells.append("-".ljust(28))
                continue
            cell = f"{v['mean']:.4f} [{v['low']:.3f}, {v['high']:.3f}]"
            paired = report["paired"].get(n, {}).get(m)
            cells.append((cell + (f" p={paired['p']:.3g}" if paired else "")).ljust(28))
        lines.append(m.ljust(16) + "".join(cells))
    lines.append(f"paired tests against {report['baseline']}; topics {report['runs'][names[0]]['topics']}")
    return "\n".join(lines)


def main_score_run(args: argparse.Namespace) -> int:
    """Handler for `purecover score-run`: exit code 1 with one line on a bad file or setting."""
    from ..data.errors import HubUnavailableError
    from .coverage_collections import CoverageDataError

    try:
        report = score_runs(args.runs, args.qrels, args.judgments, args.depth, args.doc_qrels, args.answerable_only)
    except (CoverageDataError, ValueError, OSError, ImportError, HubUnavailableError) as exc:
        print(f"purecover score-run: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report) if args.json else _table(report))
    return 0
