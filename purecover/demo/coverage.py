"""A small fictional coverage collection for the coverage demo (``configs/recipes/coverage_demo_cpu.yaml``).

`write_demo_collection(out_dir)` writes, deterministically and offline, ``topics.jsonl`` (24 topics, each with
2-3 nuggets), ``corpus.jsonl`` (one passage per nugget, a second one for every other nugget, and unrelated
passages), ``qrels.txt`` (nugget qrels: each passage relevant to the nugget it states) and ``judge.jsonl`` (CRUX
judge lines: a passage rates 4 on the nugget it states and 0 on the others). The towns, crafts and facts are
invented here; they describe nothing real.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["COLLECTION_FILES", "write_demo_collection"]

COLLECTION_FILES = ("topics.jsonl", "corpus.jsonl", "qrels.txt", "judge.jsonl")
_TOWNS = ["Ardley", "Brisk", "Calloway", "Dunmere", "Elsford", "Fenwick", "Garrow", "Hollis", "Ivel", "Jessop",
          "Kelby", "Lorne", "Marrow", "Nettle", "Orrin", "Pellow", "Quarry", "Rusk", "Selby", "Tamber", "Ulver",
          "Varne", "Wexley", "Yarrow"]
_CRAFTS = ["clockmaking", "glassblowing", "ropemaking", "bookbinding", "weaving", "pottery", "bell casting",
           "cheesemaking"]
_ASPECTS = [("founded", "when and by whom the guild was founded",
             "The {craft} guild of {town} was founded in {year} by {person}."),
            ("export", "where the goods were sold", "{town} {craft} was shipped to {place}, where merchants paid in "
             "{coin}."),
            ("decline", "why the trade declined", "The {craft} trade of {town} declined after the {event} of "
             "{later}."),
            ]
_PEOPLE = ["Ada Brill", "Tomas Vey", "Orla Penn", "Milo Crane", "Ines Hart", "Cato Reed"]
_PLACES = ["the river ports", "the northern fairs", "the island markets", "the mountain towns"]
_COINS = ["silver marks", "copper rings", "salt", "wool bales"]
_EVENTS = ["great flood", "long winter", "toll war", "harbour fire"]


def write_demo_collection(out_dir: str | Path) -> Path:
    """Write the collection's four files into `out_dir` (created); returns it. Idempotent: same bytes each time."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    topics, corpus, qrels, judge = [], [], [], []
    for t, town in enumerate(_TOWNS):
        craft = _CRAFTS[t % len(_CRAFTS)]
        aspects = _ASPECTS[: 2 + t % 2]  # 2 or 3 nuggets
        values = {"town": town, "craft": craft, "year": 1700 + 7 * t, "person": _PEOPLE[t % len(_PEOPLE)],
                  "place": _PLACES[t % len(_PLACES)], "coin": _COINS[t % len(_COINS)],
                  "event": _EVENTS[t % len(_EVENTS)], "later": 1800 + 5 * t}
        qid = f"cov-{t + 1:02d}"
        topics.append({"topic_id": qid, "query": f"the history of {craft} in {town}",
                       "nuggets": [nugget for _, nugget, _ in aspects]})
        ratings: dict[str, list[int]] = {}
        for n, (name, _, template) in enumerate(aspects):
            for copy in range(1 if n % 2 else 2):  # a nugget stated by one or two passages
                doc_id = f"{town.lower()}-{name}-{copy}"
                text = template.format(**values) + ("" if copy == 0 else f" Records of {town} say so as well.")
                corpus.append({"id": doc_id, "title": f"{town} {craft}", "text": text})
                qrels.append(f"{qid} n{n + 1} {doc_id} 1")
                ratings[doc_id] = [4 if m == n else 0 for m in range(len(aspects))]
        corpus.append({"id": f"{town.lower()}-market", "title": f"{town} market",
                       "text": f"The market of {town} opens on the second day of each week and sells bread."})
        judge += [{"id": qid, "docid": d, "ratings": r} for d, r in ratings.items()]
    files = {"topics.jsonl": topics, "corpus.jsonl": corpus, "judge.jsonl": judge}
    for name, rows in files.items():
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (out / "qrels.txt").write_text("".join(line + "\n" for line in qrels), encoding="utf-8")
    return out
