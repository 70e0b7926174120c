"""Coverage test collections: topics with nuggets (or sub-questions), nugget qrels, graded judgments, runs.

A coverage collection asks whether a set of documents holds the pieces of information (nuggets) a topic
needs, not whether each document is relevant. Three layouts are read, all into the same objects:

* **CoverageBench** (Hugging Face dataset ``hltcoe/coveragebench``, Apache-2.0; configurations
  `COVERAGEBENCH_CONFIGS`): topics with ``topic_id``, ``query`` and ``nuggets`` (a list of strings), and
  nugget qrels in ndeval's layout ``qid nugget_id doc_id rel`` (the second column, trec_eval's "iteration",
  names the nugget). Document text is not shipped: documents come from the user's collection.
* **CRUX** (``DylanJoo/crux``): the same qrels layout, sub-questions in place of nuggets, and a judge file of
  JSON lines ``{"id": qid, "docid": doc_id, "ratings": [r_1, ..., r_n]}``, one 0-5 answerability rating per
  sub-question (``rating`` is read as well, as CRUX's own loader names it).
* **Bring your own**: a topics JSONL (or JSON list) with any of the field names above, the same qrels, and
  optionally judgments.

Runs to score are TREC run files (``qid Q0 doc_id rank score tag``, ordered by the rank column) or JSONL:
purecover's ``selections.jsonl`` (``selected_doc_ids``, a set in the selector's order), its ``candidates.jsonl``
(``docs``, the retrieval ranking of the data stage) or any ``{"qid": ..., "doc_ids": [...]}`` lines. Topics are
read by the data stage's loader (`purecover.data.loaders.coverage`), so ``data.dataset: coverage`` retrieves
candidates for the same topics. Every malformed line is an error naming the file, the line and the field
(`CoverageDataError`, or the loader's `purecover.data.errors.DataFormatError`) before any scoring starts.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..data.loaders.hub import resolve_hub_file
from ..utils.trec import iter_qrels, looks_like_trec, read_trec_scores, trec_eval_order

__all__ = ["COVERAGEBENCH_CONFIGS", "COVERAGEBENCH_REPO", "CoverageCollection", "CoverageDataError", "Topic",
           "load_collection", "read_judgments", "read_nugget_qrels", "read_ranked", "read_run_scores",
           "read_topics"]

COVERAGEBENCH_REPO = "hltcoe/coveragebench"
COVERAGEBENCH_CONFIGS = ("cast2020", "fair_ranking_2022", "neuclir_2024", "rag_2024", "ragtime_2025",
                         "crux_multinews", "crux_duc04")
MAX_RATING = 5  # CRUX rates answerability 0-5


class CoverageDataError(ValueError):
    """A malformed line of a coverage file: names the file, the line and the field."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: " + (f"field {field!r}: " if field else "") + problem)
        self.path, self.line, self.field, self.problem = str(path), line, field, problem


@dataclasses.dataclass(frozen=True)
class Topic:
    """A topic: its id, its query and its nuggets (or sub-questions) as text, in order (may be empty)."""

    topic_id: str
    query: str
    nuggets: tuple[str, ...] = ()


# qid -> doc_id -> nugget id -> grade (rel > 0 only: ndeval counts a document for a nugget when rel >= 1)
NuggetQrels = dict[str, dict[str, dict[str, int]]]
# qid -> doc_id -> one rating per sub-question
Judgments = dict[str, dict[str, tuple[int, ...]]]


@dataclasses.dataclass
class CoverageCollection:
    """Topics, nugget qrels and (optionally) judgments of one collection."""

    topics: dict[str, Topic]
    qrels: NuggetQrels
    judgments: Judgments | None = None
    source: str = ""

    def nuggets_of(self, qid: str) -> set[str]:
        """The nugget ids some judged document of topic `qid` covers."""
        return {n for grades in self.qrels.get(qid, {}).values() for n in grades}


def _first(row: dict[str, Any], fields: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in fields:
        if name in row:
            return name, row[name]
    return None, None


def _json_rows(path: Path) -> Iterator[tuple[int | None, Any]]:
    """(line, value) of a JSONL file, or (None, item) of a JSON list. Bytes that are not UTF-8 name their line."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise CoverageDataError(path, line, None, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                                                  f"{column})") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CoverageDataError(path, exc.lineno, None, f"invalid JSON ({exc.msg})") from None
        yield from ((None, item) for item in items)
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise CoverageDataError(path, lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None


def read_topics(path: str | Path, *, hub_config: str | None = None, split: str = "test") -> dict[str, Topic]:
    """Topics of a JSONL file or JSON list, or of a Hub dataset (or a local copy of one) with `hub_config` and
    `split`, read by the data stage's loader (`purecover.data.loaders.coverage`: the field names it accepts, and
    errors naming file, line and field)."""
    from ..data.loaders import ExampleSource

    source = ExampleSource("coverage", path, split=split, hub_config=hub_config, require_paragraphs=False)
    topics = {ex.qid: Topic(ex.qid, ex.question, tuple(str(n) for n in ex.meta["nuggets"])) for ex in source}
    if not topics:
        raise CoverageDataError(path, None, None, "holds no topic")
    return topics


def read_nugget_qrels(path: str | Path) -> NuggetQrels:
    """Nugget qrels ``qid nugget_id doc_id rel`` (ndeval's layout; rel an integer, rows with rel <= 0 kept out
    of the coverage but checked). A document judged twice for one nugget is an error; a malformed line is a
    ValueError naming the file and line (`purecover.utils.trec.iter_qrels`). `path` may be a Hub dataset's file,
    ``hf://datasets/OWNER/NAME/PATH`` (`purecover.data.loaders.hub.resolve_hub_file`)."""
    path = resolve_hub_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"qrels file {str(path)!r} does not exist")
    qrels: NuggetQrels = {}
    seen: set[tuple[str, str, str]] = set()
    for lineno, qid, nugget, doc_id, grade in iter_qrels(path):
        if (qid, nugget, doc_id) in seen:
            raise CoverageDataError(path, lineno, "doc_id", f"{doc_id!r} is judged twice for nugget {nugget!r} "
                                                            f"of topic {qid!r}")
        seen.add((qid, nugget, doc_id))
        docs = qrels.setdefault(qid, {})
        if grade > 0:
            docs.setdefault(doc_id, {})[nugget] = grade
    if not seen:
        raise CoverageDataError(path, None, None, "holds no judgment")
    return qrels


def read_judgments(path: str | Path) -> Judgments:
    """CRUX judge lines ``{"id": qid, "docid": doc_id, "ratings": [...]}`` (or ``rating``): one integer 0-5 per
    sub-question, the same count for every document of a topic; a local path or ``hf://datasets/...``."""
    path = resolve_hub_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"judgments file {str(path)!r} does not exist")
    out: Judgments = {}
    width: dict[str, tuple[int, int | None]] = {}
    for lineno, row in _json_rows(path):
        if not isinstance(row, dict):
            raise CoverageDataError(path, lineno, None, "a judgment is a JSON object")
        for name in ("id", "docid"):
            if not isinstance(row.get(name), (str, int)) or isinstance(row.get(name), bool):
                raise CoverageDataError(path, lineno, name, "missing" if name not in row else "must be a string")
        field, ratings = _first(row, ("ratings", "rating"))
        if field is None:
            raise CoverageDataError(path, lineno, "ratings", "missing")
        if not isinstance(ratings, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= MAX_RATING for r in ratings):
            raise CoverageDataError(path, lineno, field, f"must be a list of integers 0-{MAX_RATING}")
        qid, doc_id = str(row["id"]), str(row["docid"])
        n, first = width.setdefault(qid, (len(ratings), lineno))
        if len(ratings) != n:
            raise CoverageDataError(path, lineno, field, f"{len(ratings)} ratings, but topic {qid!r} has {n} "
                                                         f"sub-questions (line {first})")
        out.setdefault(qid, {})[doc_id] = tuple(ratings)
    return out


def read_run_scores(path: str | Path) -> dict[str, list[tuple[str, float]]] | None:
    """qid -> (doc id, score) in file order for a TREC run (what trec_eval and ndeval read); None for JSONL."""
    path = Path(path)
    return read_trec_scores(path) if path.is_file() and looks_like_trec(path) else None


def read_ranked(path: str | Path) -> dict[str, list[str]]:
    """qid -> doc ids best first, from a TREC run (by score, as trec_eval orders it: the rank column is ignored,
    a tie goes to the later doc id) or JSONL (purecover's selections, ``selected_doc_ids``; its candidates,
    ``docs``; or ``doc_ids``: the order as written)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"run file {str(path)!r} does not exist")
    if looks_like_trec(path):
        return {qid: trec_eval_order(docs) for qid, docs in read_trec_scores(path).items()}
    ranked: dict[str, list[str]] = {}
    for lineno, row in _json_rows(path):
        if not isinstance(row, dict) or "qid" not in row:
            raise CoverageDataError(path, lineno, "qid", "missing (a selection line is {qid, doc_ids})")
        field, docs = _first(row, ("selected_doc_ids", "doc_ids", "docs"))
        if field is None:
            raise CoverageDataError(path, lineno, "doc_ids", "missing (or selected_doc_ids, or docs)")
        if field == "docs":  # candidates.jsonl: the retrieval ranking, candidate order
            if not isinstance(docs, list) or not all(isinstance(d, dict) and isinstance(d.get("doc_id"), str)
                                                     for d in docs):
                raise CoverageDataError(path, lineno, "docs", "must be a list of candidates with a doc_id")
            docs = [d["doc_id"] for d in docs]
        if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
            raise CoverageDataError(path, lineno, field, "must be a list of strings")
        if len(set(docs)) != len(docs):
            raise CoverageDataError(path, lineno, field, "lists a document twice")
        qid = str(row["qid"])
        if qid in ranked:
            raise CoverageDataError(path, lineno, "qid", f"question {qid!r} appears twice")
        ranked[qid] = list(docs)
    return ranked


def load_collection(topics: str | Path, qrels: str | Path, judgments: str | Path | None = None, *,
                    repo: str = COVERAGEBENCH_REPO) -> CoverageCollection:
    """A collection from local files. `topics` is a topics file, or ``coveragebench:<config>`` for CoverageBench's
    topics from the Hub dataset `repo` (or a local copy of it) through the data stage's Hub loader
    (`COVERAGEBENCH_CONFIGS`, split ``test``; its qrels file is given as `qrels`)."""
    if str(topics).startswith("coveragebench:"):
        config = str(topics).split(":", 1)[1]
        if config not in COVERAGEBENCH_CONFIGS:
            raise ValueError(f"unknown CoverageBench configuration {config!r}; one of {', '.join(COVERAGEBENCH_CONFIGS)}")
        loaded = read_topics(repo, hub_config=config, split="test")
    else:
        loaded = read_topics(topics)
    return CoverageCollection(loaded, read_nugget_qrels(qrels), read_judgments(judgments) if judgments else None,
                              source=str(topics))
