"""Loaders on small hand-written files of each format, and on bad input."""

from __future__ import annotations

import time

import pytest

from purecover.data import DataFormatError, ExampleSource, HubUnavailableError, load_examples
from purecover.data.loaders import parse_record
from tests.conftest import hotpot_record, write_json, write_jsonl


def test_hotpotqa_fields_and_gold(tmp_path):
    path = write_json(tmp_path / "h.json", [hotpot_record("q1"), hotpot_record("q2", answer="yes", type="comparison")])
    exs = load_examples("hotpotqa", path)
    assert [e.qid for e in exs] == ["q1", "q2"]
    ex = exs[0]
    assert ex.dataset == "hotpotqa" and ex.answers == ["Mirren"] and ex.meta == {"type": "bridge", "level": "easy"}
    assert [p.title for p in ex.paragraphs] == ["Ada Brill", "Tollbridge", "Corven"]
    assert [p.is_supporting for p in ex.paragraphs] == [True, True, False]
    assert ex.paragraphs[1].text == "Tollbridge is a market town. The river Mirren flows through it."
    assert ex.supporting_titles == ["Ada Brill", "Tollbridge"]
    assert ex.oracle_steps == ["Ada Brill was born in Tollbridge.", "The river Mirren flows through it."]


def test_hub_column_layout_is_accepted():
    rec = hotpot_record()
    rec.pop("_id")
    rec["id"] = "hub1"
    rec["context"] = {"title": [c[0] for c in rec["context"]], "sentences": [c[1] for c in rec["context"]]}
    rec["supporting_facts"] = {"title": ["Ada Brill", "Tollbridge"], "sent_id": [0, 1]}
    ex = parse_record("hotpotqa", rec, "hub:x", "row 0")
    assert ex.qid == "hub1" and ex.supporting_titles == ["Ada Brill", "Tollbridge"] and len(ex.paragraphs) == 3


def test_2wiki_with_aliases(tmp_path):
    rec = hotpot_record("w1", answer_id="Q42", evidences=[["Ada Brill", "place of birth", "Tollbridge"]])
    rec.pop("level")
    path = write_json(tmp_path / "w.json", [rec])
    aliases = write_jsonl(tmp_path / "id_aliases.json",
                          [{"Q_id": "Q42", "aliases": ["River Mirren", "Mirren"], "demonyms": ["Mirrenian"]},
                           {"Q_id": "Q7", "aliases": ["x"], "demonyms": []}])
    ex = load_examples("2wiki", path, aliases_path=aliases)[0]
    assert ex.dataset == "2wiki"
    assert ex.answers == ["Mirren", "River Mirren", "Mirrenian"]
    assert ex.meta["answer_id"] == "Q42" and ex.meta["evidences"][0][1] == "place of birth"
    assert load_examples("2wiki", path)[0].answers == ["Mirren"]


def musique_record(qid="2hop__1_2", **changes):
    rec = {
        "id": qid,
        "question": "What river flows through the birthplace of Ada Brill?",
        "answer": "Mirren",
        "answer_aliases": ["River Mirren"],
        "answerable": True,
        "paragraphs": [
            {"idx": 0, "title": "Corven", "paragraph_text": "Corven is a fishing village.", "is_supporting": False},
            {"idx": 1, "title": "Ada Brill", "paragraph_text": "Ada Brill was born in Tollbridge.", "is_supporting": True},
            {"idx": 2, "title": "Tollbridge", "paragraph_text": "The Mirren flows through Tollbridge.",
             "is_supporting": True},
        ],
        "question_decomposition": [
            {"id": 1, "question": "Ada Brill >> place of birth", "answer": "Tollbridge", "paragraph_support_idx": 1},
            {"id": 2, "question": "What river flows through #1?", "answer": "Mirren", "paragraph_support_idx": 2},
        ],
    }
    rec.update(changes)
    return rec


def test_musique_fields(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [musique_record()])
    ex = load_examples("musique", path)[0]
    assert ex.answers == ["Mirren", "River Mirren"]
    assert ex.supporting_titles == ["Ada Brill", "Tollbridge"]
    assert [p.is_supporting for p in ex.paragraphs] == [False, True, True]
    assert ex.oracle_steps == ["Ada Brill — place of birth: Tollbridge", "What river flows through Tollbridge?: Mirren"]
    assert ex.meta["hops"] == 2


def test_strategyqa_fields(tmp_path):
    rec = {"qid": "s1", "term": "Mirren", "description": "a river", "question": "Is the Mirren longer than 5 km?",
           "answer": True, "facts": ["The Mirren is 40 km long.", "  "], "decomposition": ["How long is the Mirren?",
                                                                                           "Is #1 more than 5 km?"],
           "evidence": [[["x"]]]}
    path = write_json(tmp_path / "s.json", [rec, {**rec, "qid": "s2", "answer": False}])
    a, b = load_examples("strategyqa", path)
    assert a.answers == ["yes"] and b.answers == ["no"]
    assert [p.text for p in a.paragraphs] == ["The Mirren is 40 km long."] and a.paragraphs[0].is_supporting
    assert a.oracle_steps == rec["decomposition"] and a.meta["facts"] == ["The Mirren is 40 km long."]
    assert a.meta["term"] == "Mirren"


def test_flashrag_records_with_and_without_structure(tmp_path):
    hp = hotpot_record()
    rows = [
        {"id": "f1", "question": "Q one?", "golden_answers": ["Mirren", "River Mirren"],
         "metadata": {"context": hp["context"], "supporting_facts": hp["supporting_facts"], "type": "bridge"}},
        {"id": "f2", "question": "Q two?", "golden_answers": ["Tollbridge"],
         "metadata": {"paragraphs": musique_record()["paragraphs"]}},
        {"id": "f3", "question": "Q three?", "golden_answers": ["no"], "metadata": {"facts": ["A fact."]}},
        {"id": "f4", "question": "Q four?", "golden_answers": [42], "metadata": {}},
    ]
    path = write_jsonl(tmp_path / "f.jsonl", rows)
    exs = load_examples("flashrag", path, require_paragraphs=False)
    assert [e.dataset for e in exs] == ["flashrag"] * 4
    assert exs[0].answers == ["Mirren", "River Mirren"] and exs[0].supporting_titles == ["Ada Brill", "Tollbridge"]
    assert exs[0].meta["type"] == "bridge"
    assert exs[1].supporting_titles == ["Ada Brill", "Tollbridge"] and len(exs[1].paragraphs) == 3
    assert [p.text for p in exs[2].paragraphs] == ["A fact."]
    assert exs[3].answers == ["42"] and exs[3].paragraphs == []
    # A FlashRAG file read as a named dataset keeps that dataset's label (and its scoring rules).
    assert load_examples("hotpotqa", path, limit=1)[0].dataset == "hotpotqa"
    with pytest.raises(DataFormatError, match="f4.*|line 4: field 'metadata': has no paragraphs"):
        load_examples("flashrag", path, require_paragraphs=True)


def test_flashrag_gold_without_paragraphs_in_every_shape(tmp_path):
    """Own data next to a separate corpus: supporting facts alone give the gold titles (pairs, the Hub's columns,
    titles alone); evidences or a decomposition give the oracle steps; a bad evidence names its field."""
    facts = [["Ada Brill", 0], ["Tollbridge", 2], ["Ada Brill", 1]]
    shapes = [facts, {"title": [f[0] for f in facts], "sent_id": [f[1] for f in facts]},
              [f[0] for f in facts], {"title": [f[0] for f in facts]}]
    rows = [{"id": f"f{i}", "question": "Q?", "golden_answers": ["a"], "metadata": {"supporting_facts": shape}}
            for i, shape in enumerate(shapes)]
    rows[0]["metadata"]["evidences"] = [["Ada Brill", "place of birth", "Tollbridge"], ["Tollbridge", "river", "Mirren"]]
    rows[1]["metadata"]["decomposition"] = ["Where was Ada Brill born?", "Which river flows there?"]
    rows[2]["metadata"]["question_decomposition"] = [{"question": "Where was Ada Brill born?", "answer": "Tollbridge"}]
    exs = load_examples("flashrag", write_jsonl(tmp_path / "f.jsonl", rows), require_paragraphs=False)
    assert all(e.supporting_titles == ["Ada Brill", "Tollbridge"] and e.paragraphs == [] for e in exs)
    assert exs[0].oracle_steps == ["Ada Brill place of birth Tollbridge", "Tollbridge river Mirren"]
    assert exs[1].oracle_steps == ["Where was Ada Brill born?", "Which river flows there?"]
    assert exs[2].oracle_steps == ["Where was Ada Brill born?"] and exs[3].oracle_steps == []
    rows[0]["metadata"]["evidences"] = [["Ada Brill", "place of birth"]]
    with pytest.raises(DataFormatError, match=r"line 1: field 'metadata.evidences\[0\]': expected \[subject"):
        load_examples("flashrag", write_jsonl(tmp_path / "g.jsonl", rows[:1]), require_paragraphs=False)


def test_flashrag_metadata_errors_are_prefixed(tmp_path):
    path = write_jsonl(tmp_path / "f.jsonl", [{"id": "f1", "question": "Q?", "golden_answers": ["a"],
                                               "metadata": {"context": [["T", "not a list"]]}}])
    with pytest.raises(DataFormatError, match=r"line 1: field 'metadata.context\[0\]\[1\]': expected a list"):
        load_examples("flashrag", path)


def test_demo_path_and_limit():
    exs = load_examples("hotpotqa", "demo", limit=3)
    assert len(exs) == 3 and all(e.qid.startswith("demo-") for e in exs)
    with pytest.raises(ValueError, match="HotpotQA format"):
        ExampleSource("musique", "demo")


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("question"), r"record 1 \(line 1\): field 'question': missing"),
        (lambda r: r.update(answer=["Mirren"]), "field 'answer': expected a string, got list"),
        (lambda r: r.update(context=[]), "field 'context': is empty"),
        (lambda r: r.update(context=[["T", ["s"], "extra"]]), r"field 'context\[0\]': expected \[title, \[sentences\]\]"),
        (lambda r: r.update(context=[["T", ["s", 3]]]), r"field 'context\[0\]\[1\]\[1\]': expected a string, got int"),
        (lambda r: r.update(supporting_facts=[["Nowhere", 0]]), r"supporting_facts\[0\]\[0\]': title 'Nowhere'"),
        (lambda r: r.update(supporting_facts=[["Corven", "0"]]), r"supporting_facts\[0\]\[1\]': expected an integer"),
        (lambda r: r.update(question="   "), "field 'question': is empty"),
    ],
)
def test_bad_hotpot_records_name_file_record_and_field(tmp_path, mutate, message):
    bad = hotpot_record("q2")
    mutate(bad)
    path = write_json(tmp_path / "bad.json", [hotpot_record("q1"), bad])
    with pytest.raises(DataFormatError, match=message) as err:
        load_examples("hotpotqa", path)
    assert str(err.value).startswith(str(path))


def test_record_that_is_not_an_object(tmp_path):
    path = write_json(tmp_path / "bad.json", [hotpot_record(), ["x"]])
    with pytest.raises(DataFormatError, match="record 1.*expected a JSON object, got list"):
        load_examples("hotpotqa", path)


def test_truncated_file(tmp_path):
    path = tmp_path / "t.json"
    import json

    path.write_text(json.dumps([hotpot_record("q1"), hotpot_record("q2")])[:-40])
    with pytest.raises(DataFormatError, match="record 1.*truncated"):
        load_examples("hotpotqa", path)


def test_duplicate_qid(tmp_path):
    path = write_json(tmp_path / "d.json", [hotpot_record("q1"), hotpot_record("q1")])
    with pytest.raises(DataFormatError, match="duplicate question id 'q1' \\(first at record 0"):
        load_examples("hotpotqa", path)


@pytest.mark.parametrize(
    ("dataset", "record", "message"),
    [
        ("musique", musique_record(paragraphs="x"), "field 'paragraphs': expected a list"),
        ("musique", musique_record(answer=""), "field 'answer': missing or empty"),
        ("musique", musique_record(paragraphs=[{"title": "T", "paragraph_text": "x", "is_supporting": "yes"}]),
         r"paragraphs\[0\].is_supporting': expected a boolean"),
        ("strategyqa", {"qid": "s", "question": "Q?", "answer": "maybe", "facts": ["f"]}, "field 'answer'"),
        ("strategyqa", {"qid": "s", "question": "Q?", "answer": True, "facts": []}, "field 'facts': is empty"),
        ("flashrag", {"id": "f", "question": "Q?", "golden_answers": []}, "field 'golden_answers': is empty"),
        ("flashrag", {"question": "Q?", "golden_answers": ["a"]}, "field 'id or _id or qid': missing"),
    ],
)
def test_bad_records_other_formats(tmp_path, dataset, record, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [record])
    with pytest.raises(DataFormatError, match=message):
        load_examples(dataset, path)


def test_skip_invalid_counts_and_reports(tmp_path):
    bad1 = hotpot_record("b1")
    bad1.pop("answer")
    bad2 = hotpot_record("b2", context=[])
    path = write_json(tmp_path / "mixed.json", [hotpot_record("q1"), bad1, hotpot_record("q2"), bad2])
    source = ExampleSource("hotpotqa", path, skip_invalid=True)
    assert [e.qid for e in source] == ["q1", "q2"]
    assert source.n_read == 4
    assert [(r.location, r.field) for r in source.invalid] == [("record 1 (line 1)", "answer"),
                                                             ("record 3 (line 1)", "context")]


def test_missing_file_and_unknown_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_examples("hotpotqa", tmp_path / "nope.json")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_examples("squad", tmp_path / "nope.json")
    with pytest.raises(ValueError, match="data.path is not set"):
        load_examples("hotpotqa", None)


def test_hub_offline_fails_fast_with_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(HubUnavailableError, match="not in the local cache.*data.path"):
        load_examples("hotpotqa", "nobody-here/no-such-dataset-purecover", limit=1)
    assert time.perf_counter() - t0 < 30


def test_hub_unreachable_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused at once
    with pytest.raises(HubUnavailableError, match="cannot reach the Hugging Face Hub at http://127.0.0.1:9"):
        load_examples("musique", "RUC-NLPIR/FlashRAG_datasets", limit=1)
