"""TREC run files: ``qid Q0 doc_id rank score run_name``, one line per ranked document.

`trec_run_lines` renders rankings (written with `atomic_write_text` by the caller). `read_trec_run`
parses a run file back into per-question doc ids ordered by the rank column (ties: file order): how
purecover reads a selection or ranking it is given. `read_trec_scores` keeps the scores in file order,
as trec_eval and ndeval read them (they ignore the rank column and sort by score): what `score-run`
hands to them, so that it gives exactly what they give, ties included (`trec_eval_order` is their order).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = [
    "MAX_GRADE",
    "MIN_GRADE",
    "TREC_SUFFIXES",
    "check_trec_token",
    "iter_qrels",
    "looks_like_trec",
    "read_trec_qrels",
    "read_trec_run",
    "read_trec_scores",
    "trec_eval_order",
    "trec_run_lines",
]

TREC_SUFFIXES = (".trec", ".run")
_WS = re.compile(r"\s")
# Relevance grades a qrels file may hold (trec_eval and ndeval read them as C integers; grades far outside any
# collection's scale made them misbehave: gigabytes of memory, a changed nDCG or an internal error).
MIN_GRADE, MAX_GRADE = -1000, 1000
_GRADE = re.compile(r"[+-]?[0-9]{1,30}")  # ASCII digits only: int() also takes "1_000" and other scripts' digits


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of `path`, decoded as UTF-8 one line at a time, so that a byte that is
    not UTF-8 is a ValueError naming the file, the line and the column."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                                 f"{exc.start + 1})") from None


def parse_grade(value: str, path: Path, lineno: int) -> int:
    """A qrels grade: an integer of ASCII digits from `MIN_GRADE` to `MAX_GRADE`; ValueError naming
    ``file:line: field 'rel'`` otherwise."""
    if not _GRADE.fullmatch(value):
        raise ValueError(f"{path}:{lineno}: field 'rel': {value!r} is not an integer (digits 0-9, an optional sign)")
    grade = int(value)
    if not MIN_GRADE <= grade <= MAX_GRADE:
        raise ValueError(f"{path}:{lineno}: field 'rel': {grade} is outside the grades purecover reads "
                         f"({MIN_GRADE} to {MAX_GRADE})")
    return grade


def check_trec_token(value: str, what: str) -> str | None:
    """Why `value` cannot be a column of a TREC run file (empty, or holds whitespace), else None."""
    if not value:
        return f"{what} is empty; a TREC run file needs a non-empty {what}"
    if _WS.search(value):
        return f"{what} {value!r} contains whitespace, which TREC run files cannot hold"
    return None


def trec_run_lines(qid: str, ranked: Sequence[tuple[str, float]], run_name: str) -> list[str]:
    """The lines of one question: `ranked` is (doc_id, score) best first; ranks start at 1.

    Scores are written with 8 significant digits. Raises ValueError for a qid, doc id or run name
    that is empty or holds whitespace (it would shift the columns).
    """
    for value, what in ((qid, "qid"), (run_name, "run name"), *((d, f"doc id of question {qid}") for d, _ in ranked)):
        problem = check_trec_token(str(value), what)
        if problem:
            raise ValueError(problem)
    return [f"{qid} Q0 {doc_id} {rank} {score:.8g} {run_name}" for rank, (doc_id, score) in enumerate(ranked, 1)]


def looks_like_trec(path: str | Path) -> bool:
    """True for a `.trec`/`.run` file, or one whose first non-blank line has six columns with an integer
    rank and is not JSON."""
    path = Path(path)
    if path.suffix.lower() in TREC_SUFFIXES:
        return True
    for _, line in text_lines(path):
        if line.strip():
            cols = line.split()
            return not line.lstrip().startswith(("{", "[")) and len(cols) == 6 and cols[3].lstrip("-").isdigit()
    return False


def _run_rows(path: Path) -> Iterator[tuple[int, str, str, int, float]]:
    """(line, qid, doc_id, rank, score) of each line of TREC run `path`, checked (see `read_trec_run`)."""
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        cols = line.split()
        if len(cols) != 6:
            raise ValueError(f"{path}:{lineno}: a TREC run line has 6 columns (qid Q0 doc_id rank score "
                             f"run_name), found {len(cols)}")
        qid, _, doc_id, rank, score, _ = cols
        try:
            rank_i = int(rank)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: field 'rank': {rank!r} is not an integer") from None
        try:
            score_f = float(score)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: field 'score': {score!r} is not a number") from None
        if not math.isfinite(score_f):
            raise ValueError(f"{path}:{lineno}: field 'score': {score!r} is not a finite number (the scorers would "
                             "order it arbitrarily)")
        if (qid, doc_id) in seen:
            raise ValueError(f"{path}:{lineno}: field 'doc_id': {doc_id!r} is listed twice for question {qid!r} "
                             f"(first on line {seen[(qid, doc_id)]})")
        seen[(qid, doc_id)] = lineno
        yield lineno, qid, doc_id, rank_i, score_f


def read_trec_run(path: str | Path) -> dict[str, list[tuple[str, int]]]:
    """Per qid, (doc_id, line number) ordered by the rank column (ties: file order).

    Errors name the file and line: a line without six columns, a rank that is not an integer, a
    score that is not a finite number, a doc id listed twice for a question, bytes that are not UTF-8.
    """
    rows: dict[str, list[tuple[int, int, str]]] = {}
    for lineno, qid, doc_id, rank, _ in _run_rows(Path(path)):
        rows.setdefault(qid, []).append((rank, lineno, doc_id))
    return {qid: [(doc_id, lineno) for _, lineno, doc_id in sorted(r)] for qid, r in rows.items()}


def read_trec_scores(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """Per qid, (doc_id, score) in file order: what trec_eval and ndeval read (they ignore the rank column and
    order by score, each breaking ties by its own rule). Checked as `read_trec_run` checks."""
    out: dict[str, list[tuple[str, float]]] = {}
    for _, qid, doc_id, _, score in _run_rows(Path(path)):
        out.setdefault(qid, []).append((doc_id, score))
    return out


def trec_eval_order(scored: Sequence[tuple[str, float]]) -> list[str]:
    """Doc ids in trec_eval's order: by score, highest first; a tie broken by doc id, the later in byte order
    first (trec_eval's comparison of docnos, reversed)."""
    return [d for d, _ in sorted(scored, key=lambda x: (x[1], x[0].encode("utf-8")), reverse=True)]


def iter_qrels(path: str | Path) -> Iterator[tuple[int, str, str, str, int]]:
    """(line, qid, iteration, doc_id, rel) of each line of a qrels file ``qid iteration doc_id rel`` (blank lines
    skipped). Errors name the file and line: a line without four columns, a rel that is not an integer of
    ASCII digits or is outside `MIN_GRADE`..`MAX_GRADE`, text that is not UTF-8."""
    path = Path(path)
    for lineno, line in text_lines(path):
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 4:
            raise ValueError(f"{path}:{lineno}: a qrels line has 4 columns (qid iteration doc_id rel), "
                             f"found {len(cols)}")
        yield lineno, cols[0], cols[1], cols[2], parse_grade(cols[3], path, lineno)


def read_trec_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Document qrels ``qid iteration doc_id rel`` as qid -> doc_id -> rel (the largest over iterations, so
    nugget qrels read as a document's highest grade). Errors name the file and line (`iter_qrels`)."""
    out: dict[str, dict[str, int]] = {}
    for _, qid, _, doc_id, rel in iter_qrels(path):
        docs = out.setdefault(qid, {})
        docs[doc_id] = max(rel, docs.get(doc_id, rel))
    return out
