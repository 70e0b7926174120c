"""Coverage collections as questions: a topic (id, query, nuggets or sub-questions) per record.

CoverageBench's topics (``topic_id``, ``query``, ``nuggets``; the Hub dataset ``hltcoe/coveragebench`` with its
configuration as ``data.hub_config`` and ``data.split: test``), CRUX's (``id``, ``question``, ``subquestions``)
and topics of one's own, as a JSONL file or a JSON list. A topic has no gold answer and no paragraphs of its
own: its documents come from ``data.corpus`` (the collection's corpus file), and its gold passages from the
nugget qrels (``data.qrels``; `purecover.data.data_stage`). The nuggets are kept in ``meta.nuggets`` and are
the topic's oracle steps (``teacher.steps: oracle``: the information units a selection must cover play the
reasoning steps), and ``meta.answerable`` is false (there is no gold answer to score).
"""

from __future__ import annotations

from typing import Any

from ..example import Example
from ._fields import RecordView

__all__ = ["ID_FIELDS", "NUGGET_FIELDS", "QUERY_FIELDS", "parse_coverage"]

ID_FIELDS = ("topic_id", "qid", "id", "query_id")
QUERY_FIELDS = ("query", "question", "title")
NUGGET_FIELDS = ("nuggets", "subquestions", "sub_questions", "questions")


def parse_coverage(record: Any, source: str, location: str, require_paragraphs: bool = True) -> Example:
    """One topic → an Example without answers, its nuggets (or sub-questions) in ``meta.nuggets``."""
    view = RecordView(record, source, location)
    if require_paragraphs:
        raise view.fail(None, "a coverage topic has no paragraphs of its own: set data.corpus to the collection's "
                              "corpus file")
    qid = view.first(ID_FIELDS, str, nonempty=True, numbers_as_text=True)
    query = view.first(QUERY_FIELDS, str, nonempty=True)
    nuggets: list[str] = []
    for name in NUGGET_FIELDS:
        if view.has(name):
            nuggets = view.get(name, list)
            for i, nugget in enumerate(nuggets):
                view.check(nugget, f"{name}[{i}]", str)
            break
    # answerable: false, as an unanswerable MuSiQue question is marked: a topic has no gold answer to score
    return Example(qid=qid, dataset="coverage", question=query.strip(), answers=[],
                   oracle_steps=[n.strip() for n in nuggets if n.strip()],
                   meta={"nuggets": list(nuggets), "answerable": False})
