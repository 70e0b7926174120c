"""Each loader on the real samples in ../shared/data (skipped when absent)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from purecover.data import load_examples
from purecover.data.data_stage import gold_doc_ids

pytestmark = pytest.mark.samples


def test_hotpotqa_sample(sample_file):
    path = sample_file("hotpotqa")
    raw = json.loads(path.read_text())
    exs = load_examples("hotpotqa", path)
    assert len(exs) == len(raw) == 252
    assert [e.qid for e in exs] == [r["_id"] for r in raw]
    assert Counter(e.meta["type"] for e in exs).keys() == {"bridge", "comparison"}
    for ex, r in zip(exs, raw):
        assert ex.answers == [r["answer"]]
        assert set(ex.supporting_titles) == {t for t, _ in r["supporting_facts"]}
        assert len(ex.paragraphs) == len(r["context"])
        assert {p.title for p in ex.supporting_paragraphs} == set(ex.supporting_titles)
        assert len(gold_doc_ids(ex, None)) == len(ex.supporting_paragraphs)
    short = next(e for e in exs if e.qid == "5abd259d55429924427fcf1a")
    assert len(short.paragraphs) == 2
    # Oracle steps are the supporting sentences, in supporting-fact order.
    r0 = raw[0]
    ctx = dict((t, s) for t, s in r0["context"])
    assert exs[0].oracle_steps[0] == ctx[r0["supporting_facts"][0][0]][r0["supporting_facts"][0][1]].strip()


def test_2wiki_sample(sample_file):
    path = sample_file("2wiki")
    raw = json.loads(path.read_text())
    exs = load_examples("2wiki", path)
    assert len(exs) == 164
    assert Counter(e.meta["type"] for e in exs).keys() == {"compositional", "comparison", "bridge_comparison",
                                                            "inference"}
    assert all(len(e.paragraphs) == 10 for e in exs)
    assert Counter(len(e.supporting_titles) for e in exs) == {2: 121, 4: 43}
    for ex, r in zip(exs, raw):
        assert ex.meta.get("answer_id") == (r.get("answer_id") or None) and ex.answers == [r["answer"]]
        assert ex.meta["evidences"] == r["evidences"]


def test_2wiki_sample_with_alias_file(sample_file, tmp_path):
    path = sample_file("2wiki")
    first = json.loads(path.read_text())[0]
    aliases = tmp_path / "id_aliases.json"
    aliases.write_text(json.dumps({"Q_id": first["answer_id"], "aliases": ["Alias One"], "demonyms": []}) + "\n")
    ex = load_examples("2wiki", path, aliases_path=aliases, limit=1)[0]
    assert ex.answers == [first["answer"], "Alias One"]


def test_musique_sample(sample_file):
    path = sample_file("musique")
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    exs = load_examples("musique", path)
    assert len(exs) == 200
    assert sum(len(e.answers) > 1 for e in exs) == 61  # SOURCES.md: 61 with aliases
    assert all(len(e.paragraphs) == 20 for e in exs)
    for ex, r in zip(exs, raw):
        assert ex.answers == [r["answer"], *[a for a in r["answer_aliases"] if a != r["answer"]]]
        support_idx = {d["paragraph_support_idx"] for d in r["question_decomposition"]}
        assert {i for i, p in enumerate(ex.paragraphs) if p.is_supporting} == support_idx
        assert len(ex.oracle_steps) == len(r["question_decomposition"]) == ex.meta["hops"]
        assert "#" not in " ".join(ex.oracle_steps).replace("# ", "")


def test_strategyqa_sample(sample_file):
    path = sample_file("strategyqa")
    raw = json.loads(path.read_text())
    exs = load_examples("strategyqa", path)
    assert len(exs) == 200
    assert {e.answers[0] for e in exs} == {"yes", "no"}
    for ex, r in zip(exs, raw):
        assert ex.answers == ["yes" if r["answer"] else "no"]
        assert [p.text for p in ex.paragraphs] == [f.strip() for f in r["facts"] if f.strip()]
        assert ex.oracle_steps == [s.strip() for s in r["decomposition"]] and ex.meta["facts"] and ex.meta["decomposition"]
        assert all(p.is_supporting for p in ex.paragraphs)
