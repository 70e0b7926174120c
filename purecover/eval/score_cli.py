"""`purecover score PREDICTIONS.jsonl --dataset NAME --gold FILE`: score an existing predictions file.

The predictions file holds one ``{"qid": ..., "prediction": "..."}`` object per line (other fields
are ignored): any system's answers, or the evaluate stage's ``eval/predictions/<method>@<K>.jsonl``, whose
lines are checked whole (`purecover.records.PredictionRecord`). Gold answers (answer + aliases) come from
the dataset's own file, read with the same loader as the `data` stage, and are scored with the dataset's
rules (`purecover.eval.qa_metrics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..utils.entry import LOG_LEVEL_HELP
from .qa_metrics import QAScores, score_predictions

__all__ = ["add_score_arguments", "main_score", "read_predictions", "run_score"]

_DATASETS = ("hotpotqa", "2wiki", "musique", "strategyqa", "flashrag")


def read_predictions(path: str | Path) -> dict[str, str]:
    """qid → prediction from a JSONL file; a bad line or a duplicate qid is an error naming the line.

    A line is either the public ``{qid, prediction}`` form (other keys ignored; an integer qid or a numeric
    prediction is read as text) or one the evaluate stage wrote, recognised by its ``prompt_key`` and checked
    as a whole `PredictionRecord` (errors name line and field), so a damaged evaluation output is not scored.
    """
    from ..records import PredictionRecord, validate_line
    from ..utils.io import JsonlLineError, read_jsonl

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {str(path)!r} does not exist")
    predictions: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, record in read_jsonl(path):
        if "prompt_key" in record:  # the evaluate stage's own line: checked whole
            validate_line(PredictionRecord, record, path, lineno)
        if "qid" not in record:
            hint = f" (this line has {sorted(k for k in record if k in ('id', '_id', 'question_id'))[0]!r}: name it qid)" \
                if any(k in record for k in ("id", "_id", "question_id")) else ""
            raise JsonlLineError(path, lineno, f"field 'qid': missing{hint}")
        qid = record.get("qid")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        if not isinstance(qid, str) or not qid:
            raise JsonlLineError(path, lineno, f"field 'qid': expected a non-empty string, got {qid!r}")
        if "prediction" not in record:
            raise JsonlLineError(path, lineno, "field 'prediction': missing")
        prediction = record["prediction"]
        if isinstance(prediction, (int, float)) and not isinstance(prediction, bool):
            prediction = str(prediction)
        if not isinstance(prediction, str):
            raise JsonlLineError(path, lineno, f"field 'prediction': expected a string, got "
                                               f"{type(prediction).__name__}")
        if qid in predictions:
            raise JsonlLineError(path, lineno, f"field 'qid': duplicate {qid!r} (first at line {first_line[qid]})")
        predictions[qid] = prediction
        first_line[qid] = lineno
    return predictions


def run_score(predictions_path: str | Path, dataset: str, gold_path: str | Path, allow_missing: bool = False,
              aliases: str | Path | None = None, allow_missing_option: str = "allow_missing=True") -> QAScores:
    """Score `predictions_path` against the gold answers of `gold_path` (means and counts)."""
    from ..data.loaders import ExampleSource

    if dataset not in _DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {', '.join(_DATASETS)}")
    predictions = read_predictions(predictions_path)
    golds = {ex.qid: list(ex.answers)
             for ex in ExampleSource(dataset, gold_path, aliases_path=aliases, require_paragraphs=False)}
    if not golds:
        raise ValueError(f"gold file {str(gold_path)!r} has no questions")
    return score_predictions(dataset, predictions, golds, allow_missing=allow_missing,
                             allow_missing_option=allow_missing_option)


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `purecover score` (positional PREDICTIONS, --dataset, --gold, ...)."""
    parser.add_argument("predictions", metavar="PREDICTIONS.jsonl",
                        help="one {\"qid\": ..., \"prediction\": ...} object per line")
    parser.add_argument("--dataset", required=True, choices=_DATASETS,
                        help="scoring rules and gold file format")
    parser.add_argument("--gold", required=True, metavar="FILE",
                        help="the dataset's own file (official JSON/JSONL or FlashRAG JSONL) with the gold answers")
    parser.add_argument("--aliases", metavar="FILE", default=None,
                        help="2Wiki id_aliases.json: add the answer aliases to the gold answers")
    parser.add_argument("--allow-missing", action="store_true",
                        help="score the questions that have a prediction instead of failing on missing ones")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object {"em","f1","acc","n","missing"} (fractions in 0..1)')
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)


def main_score(args: argparse.Namespace) -> int:
    """Handler for `purecover score`: prints the summary; exit code 1 with a message on errors."""
    from ..data.errors import HubUnavailableError

    try:
        summary = run_score(args.predictions, args.dataset, args.gold, allow_missing=args.allow_missing,
                            aliases=args.aliases, allow_missing_option="--allow-missing")
    except (ValueError, OSError, HubUnavailableError) as exc:
        print(f"purecover score: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(dataclasses.asdict(summary)))
        return 0
    print(f"purecover score: {args.dataset}, {summary.n} question(s) scored, {summary.missing} missing")
    for value, label in ((summary.em, "EM"), (summary.f1, "F1"), (summary.acc, "Acc")):
        print(f"  {label:<4}{100 * value:7.2f}")
    return 0
