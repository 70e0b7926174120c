"""CoverageBench-style topics and nugget qrels (inputs of α-nDCG, StRecall; DESIGN §5).

Topics (JSONL, one per line): ``{topic_id, query, nuggets}`` where ``nuggets`` is a list of
strings (ids are then the 0-based positions as strings: "0", "1", ...) or of ``{id, text}``
objects. Ids (topic, nugget, doc) are strings; JSON integers are accepted and turned to text.

Nugget qrels, either
* TREC-style text: whitespace-separated ``topic_id nugget_id doc_id relevance`` per line
  (blank lines and lines starting with ``#`` are ignored), or
* JSONL: ``{topic_id, doc_id, nugget_id, relevance}`` per line;
the form is chosen from the first non-blank line (``{`` → JSONL). The result maps
``(topic_id, doc_id)`` to the set of nugget ids with relevance > 0; a judged document whose
nuggets all have relevance ≤ 0 maps to an empty set (judged, no nugget).

Malformed input raises :class:`~purecover.data.DataFormatError` (a ``ValueError``) naming
the file, the line and the field.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from purecover.data.errors import DataFormatError

__all__ = [
    "CoverageData",
    "CoverageTopic",
    "load_coverage_data",
    "load_nugget_qrels",
    "load_topics",
    "run_nuggets",
    "topic_pool",
]

NuggetQrels = dict[tuple[str, str], set[str]]


@dataclass
class CoverageTopic:
    """One topic: its query and its nuggets (id → text, in file order)."""

    topic_id: str
    query: str
    nuggets: dict[str, str] = field(default_factory=dict)

    @property
    def nugget_ids(self) -> list[str]:
        return list(self.nuggets)


@dataclass
class CoverageData:
    topics: dict[str, CoverageTopic]
    qrels: NuggetQrels

    def run_nuggets(self, topic_id: str, doc_ids: Sequence[str]) -> list[set[str]]:
        return run_nuggets(self.qrels, topic_id, doc_ids)

    def pool(self, topic_id: str) -> list[set[str]]:
        return topic_pool(self.qrels, topic_id)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"file {str(path)!r} does not exist")
    with path.open(encoding="utf-8") as f:
        yield from enumerate(f, start=1)


def _json_line(src: str, number: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataFormatError(src, f"line {number}", None, f"not valid JSON ({err.msg})") from None
    if not isinstance(obj, dict):
        raise DataFormatError(src, f"line {number}", None, "expected a JSON object")
    return obj


def _id(obj: Mapping[str, Any], name: str, src: str, where: str, label: str | None = None) -> str:
    label = label or name
    if name not in obj:
        raise DataFormatError(src, where, label, "is missing")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataFormatError(src, where, label, f"expected a string id, got {type(value).__name__}")
    text = str(value).strip()
    if not text:
        raise DataFormatError(src, where, label, "is empty")
    return text


def load_topics(path: str | Path) -> dict[str, CoverageTopic]:
    """Read a topics JSONL file into ``topic_id → CoverageTopic`` (file order kept)."""
    path = Path(path)
    src = str(path)
    topics: dict[str, CoverageTopic] = {}
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"line {number}"
        obj = _json_line(src, number, line)
        topic_id = _id(obj, "topic_id", src, where)
        if topic_id in topics:
            raise DataFormatError(src, where, "topic_id", f"duplicate topic {topic_id!r}")
        query = obj.get("query")
        if not isinstance(query, str):
            raise DataFormatError(src, where, "query", "is missing or not a string")
        raw = obj.get("nuggets")
        if not isinstance(raw, list):
            raise DataFormatError(src, where, "nuggets", "is missing or not a list")
        nuggets: dict[str, str] = {}
        for i, item in enumerate(raw):
            fname = f"nuggets[{i}]"
            if isinstance(item, str):
                nid, text = str(i), item
            elif isinstance(item, dict):
                nid = _id(item, "id", src, where, f"{fname}.id")
                text = item.get("text")
                if not isinstance(text, str):
                    raise DataFormatError(src, where, f"{fname}.text", "is missing or not a string")
            else:
                raise DataFormatError(src, where, fname, "expected a string or an {id, text} object")
            if nid in nuggets:
                raise DataFormatError(src, where, fname, f"duplicate nugget id {nid!r}")
            nuggets[nid] = text
        topics[topic_id] = CoverageTopic(topic_id, query, nuggets)
    return topics


def _relevance(value: Any, src: str, where: str) -> float:
    if isinstance(value, bool):
        raise DataFormatError(src, where, "relevance", "expected a number, got a boolean")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise DataFormatError(src, where, "relevance", f"expected a number, got {value!r}") from None
    if not isinstance(value, (int, float)) or value != value:
        raise DataFormatError(src, where, "relevance", f"expected a number, got {value!r}")
    return float(value)


def load_nugget_qrels(path: str | Path, topics: Mapping[str, CoverageTopic] | None = None) -> NuggetQrels:
    """Read nugget qrels (TREC text or JSONL) into ``(topic_id, doc_id) → {nugget ids with relevance > 0}``.

    With `topics`, unknown topic or nugget ids are errors too.
    """
    path = Path(path)
    src = str(path)
    qrels: NuggetQrels = {}
    jsonl: bool | None = None
    for number, line in _lines(path):
        stripped = line.strip()
        if not stripped or (jsonl is not True and stripped.startswith("#")):
            continue
        if jsonl is None:
            jsonl = stripped.startswith("{")
        where = f"line {number}"
        if jsonl:
            obj = _json_line(src, number, line)
            topic_id = _id(obj, "topic_id", src, where)
            doc_id = _id(obj, "doc_id", src, where)
            nugget_id = _id(obj, "nugget_id", src, where)
            if "relevance" not in obj:
                raise DataFormatError(src, where, "relevance", "is missing")
            rel = _relevance(obj["relevance"], src, where)
        else:
            parts = stripped.split()
            if len(parts) != 4:
                names = ("topic_id", "nugget_id", "doc_id", "relevance")
                missing = names[len(parts)] if len(parts) < 4 else None
                problem = f"expected 4 columns 'topic_id nugget_id doc_id relevance', got {len(parts)}"
                raise DataFormatError(src, where, missing, problem)
            topic_id, nugget_id, doc_id = parts[0], parts[1], parts[2]
            rel = _relevance(parts[3], src, where)
        if topics is not None:
            if topic_id not in topics:
                raise DataFormatError(src, where, "topic_id", f"unknown topic {topic_id!r}")
            if nugget_id not in topics[topic_id].nuggets:
                raise DataFormatError(src, where, "nugget_id",
                                      f"topic {topic_id!r} has no nugget {nugget_id!r}")
        found = qrels.setdefault((topic_id, doc_id), set())
        if rel > 0:
            found.add(nugget_id)
    return qrels


def load_coverage_data(topics_path: str | Path, qrels_path: str | Path) -> CoverageData:
    """Topics and their nugget qrels, checked against each other."""
    topics = load_topics(topics_path)
    return CoverageData(topics, load_nugget_qrels(qrels_path, topics))


def run_nuggets(qrels: NuggetQrels, topic_id: str, doc_ids: Sequence[str]) -> list[set[str]]:
    """The nugget sets of a ranking (unjudged documents have none), ready for ``alpha_ndcg``."""
    return [set(qrels.get((topic_id, d), ())) for d in doc_ids]


def topic_pool(qrels: NuggetQrels, topic_id: str) -> list[set[str]]:
    """Nugget sets of all judged documents of a topic (sorted by doc id), for the ideal ranking."""
    docs: Collection[str] = sorted(d for t, d in qrels if t == topic_id)
    return [set(qrels[(topic_id, d)]) for d in docs]
