"""Property-based fuzzing of the dataset loaders: bad input raises only `DataFormatError`.

Records shaped like each dataset are generated, written as a JSON array or JSON lines and then
mutated (a field dropped or given a wrong-typed value anywhere in the record, the file truncated
or corrupted with arbitrary bytes). Loading must yield valid examples or raise `DataFormatError`
naming the file; with ``skip_invalid`` record-level problems are counted, never raised.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from purecover.data import DataFormatError, ExampleSource, load_examples, readers
from purecover.data.example import Example, Paragraph
from purecover.data.loaders import DATASETS
from purecover.data.loaders.hotpotqa import load_2wiki_aliases

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

Record = dict[str, Any]

# ---------------------------------------------------------------- strategies for valid records

_CHARS = st.characters(codec="utf-8")
text = st.text(_CHARS, max_size=8)
nonblank = st.text(_CHARS, min_size=1, max_size=8).filter(lambda s: s.strip() != "")
hop_qid = st.builds(lambda a, b: f"{a}hop{b}", st.sampled_from(["2", "3", "²", "", "x", "٣"]), text)


@st.composite
def _context(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    titles = draw(st.lists(text, min_size=1, max_size=3, unique=True))
    context = [[t, draw(st.lists(text, max_size=3))] for t in titles]
    facts = draw(st.lists(st.tuples(st.sampled_from(titles), st.integers(-1, 4)), max_size=3))
    return context, [list(f) for f in facts]


@st.composite
def hotpot_record(draw: st.DrawFn, qid: str, two_wiki: bool = False) -> Record:
    context, facts = draw(_context())
    rec: Record = {"_id": qid, "question": draw(nonblank), "answer": draw(nonblank), "context": context,
                   "supporting_facts": facts, "type": draw(st.sampled_from(["bridge", "comparison"]))}
    if two_wiki:
        rec["evidences"] = draw(st.lists(st.lists(text, min_size=3, max_size=3), max_size=2))
        if draw(st.booleans()):
            rec["answer_id"] = draw(nonblank)
    return rec


@st.composite
def musique_record(draw: st.DrawFn, qid: str) -> Record:
    paragraphs = [{"idx": i, "title": draw(text), "paragraph_text": draw(text), "is_supporting": draw(st.booleans())}
                  for i in range(draw(st.integers(1, 3)))]
    decomposition = [{"id": i, "question": draw(st.sampled_from(["", "#1 of ", "#9 >> ", "#٢ x"])) + draw(text),
                      "answer": draw(text), "paragraph_support_idx": i} for i in range(draw(st.integers(0, 3)))]
    return {"id": qid, "question": draw(nonblank), "answer": draw(nonblank), "answer_aliases": draw(st.lists(text,
            max_size=3)), "paragraphs": paragraphs, "question_decomposition": decomposition, "answerable": True}


@st.composite
def strategyqa_record(draw: st.DrawFn, qid: str) -> Record:
    answer = draw(st.booleans() | st.sampled_from(["yes", " No ", "TRUE", "false"]))
    facts = [*draw(st.lists(text, max_size=3)), draw(nonblank)]
    return {"qid": qid, "term": draw(text), "question": draw(nonblank), "answer": answer, "facts": facts,
            "decomposition": draw(st.lists(text, max_size=3)), "evidence": [[[draw(text)]]]}


@st.composite
def flashrag_record(draw: st.DrawFn, qid: str) -> Record:
    kind = draw(st.sampled_from(["none", "context", "paragraphs", "facts"]))
    metadata: Record = {}
    if kind == "context":
        metadata["context"], metadata["supporting_facts"] = draw(_context())
    elif kind == "paragraphs":
        metadata["paragraphs"] = draw(musique_record(qid))["paragraphs"]
    elif kind == "facts":
        metadata["facts"] = [draw(nonblank)]
    if draw(st.booleans()):
        metadata["type"] = draw(text)
    golden = [*draw(st.lists(text, max_size=2)), draw(nonblank)]
    return {"id": qid, "question": draw(nonblank), "golden_answers": golden, "metadata": metadata}


@st.composite
def coverage_record(draw: st.DrawFn, qid: str) -> Record:
    return {"topic_id": qid, "query": draw(nonblank), "nuggets": draw(st.lists(text, max_size=3))}


RECORDS: dict[str, Callable[[str], st.SearchStrategy[Record]]] = {
    "hotpotqa": hotpot_record,
    "2wiki": lambda qid: hotpot_record(qid, two_wiki=True),
    "musique": musique_record,
    "strategyqa": strategyqa_record,
    "flashrag": flashrag_record,
    "coverage": coverage_record,
}


def expected(dataset: str, rec: Record) -> tuple[str, list[str]]:
    """(question, answers) the loader must produce for a valid generated record."""
    if dataset == "musique":
        answers = [rec["answer"].strip()]
        for alias in rec["answer_aliases"]:
            if alias.strip() and alias.strip() not in answers:
                answers.append(alias.strip())
    elif dataset == "strategyqa":
        yes = rec["answer"] if isinstance(rec["answer"], bool) else rec["answer"].strip().lower() in ("yes", "true")
        answers = ["yes" if yes else "no"]
    elif dataset == "coverage":
        answers = []
    elif dataset == "flashrag":
        answers = []
        for a in rec["golden_answers"]:
            if a.strip() and a.strip() not in answers:
                answers.append(a.strip())
    else:
        answers = [rec["answer"].strip()]
    return rec.get("question", rec.get("query", "")).strip(), answers


def has_paragraphs(dataset: str, rec: Record) -> bool:
    if dataset == "coverage":  # a topic's documents come from the collection's corpus file
        return False
    return dataset != "flashrag" or bool({"context", "paragraphs", "facts"} & set(rec["metadata"]))


def record_qid(rec: Record) -> str:
    return rec.get("_id", rec.get("id", rec.get("qid", rec.get("topic_id"))))


@st.composite
def dataset_records(draw: st.DrawFn, dataset: str, min_size: int = 1) -> list[Record]:
    qids = draw(st.lists(hop_qid | nonblank if dataset == "musique" else nonblank, min_size=min_size, max_size=4,
                         unique=True).filter(lambda qs: all(q.strip() for q in qs)))
    return [draw(RECORDS[dataset](q)) for q in qids]


# ---------------------------------------------------------------- writing and mutating

json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)


def write_records(path: Path, records: list[Any], array: bool, indent: int | None, ascii_only: bool) -> None:
    if array:
        path.write_text(json.dumps(records, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r, ensure_ascii=ascii_only) + "\n" for r in records), encoding="utf-8")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position inside a JSON value (the value itself is ``()``)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, record: Record) -> Any:
    """`record` with one position deleted or replaced by a junk value (possibly the whole record)."""
    record = json.loads(json.dumps(record))
    where = draw(st.sampled_from(_paths(record)))
    new = draw(json_junk | st.sampled_from(["", "   ", [], {}, [[]], 0, -1, True]))
    if not where:
        return new
    parent = record
    for key in where[:-1]:
        parent = parent[key]
    if draw(st.booleans()):
        del parent[where[-1]]
    else:
        parent[where[-1]] = new
    return record


def check_example(ex: Example, require_paragraphs: bool) -> None:
    """Invariants every loaded example keeps, whatever the input."""
    assert isinstance(ex.qid, str) and ex.qid.strip()
    assert isinstance(ex.question, str) and ex.question.strip() == ex.question and ex.question
    assert isinstance(ex.answers, list) and all(isinstance(a, str) and a for a in ex.answers)
    assert ex.answers or ex.meta.get("answerable") is False
    assert all(isinstance(p, Paragraph) and isinstance(p.title, str) and isinstance(p.text, str)
               and isinstance(p.is_supporting, bool) for p in ex.paragraphs)
    assert all(isinstance(s, str) for s in ex.oracle_steps)
    if require_paragraphs:
        assert ex.paragraphs
    if ex.paragraphs:
        assert set(ex.supporting_titles) <= {p.title for p in ex.paragraphs}
    if "hops" in ex.meta:
        assert isinstance(ex.meta["hops"], int)


def load_checked(dataset: str, path: Path, **kwargs: Any) -> tuple[ExampleSource, list[Example]]:
    """Load, allowing only a DataFormatError that names `path`; check the examples."""
    source = ExampleSource(dataset, path, **kwargs)
    try:
        examples = list(source)
    except DataFormatError as err:
        assert str(err).startswith(f"{path}:") and err.source == str(path)
        raise
    for ex in examples:
        check_example(ex, kwargs.get("require_paragraphs", True))
    return source, examples


fmt = st.fixed_dictionaries({"array": st.booleans(), "indent": st.sampled_from([None, 1]),
                             "ascii_only": st.booleans()})
chunk = st.sampled_from([7, 64, 1 << 20])  # small buffers force refills inside records


# ---------------------------------------------------------------- properties


@pytest.mark.parametrize("dataset", DATASETS)
@FUZZ
@given(data=st.data(), form=fmt, chunk_size=chunk, require=st.booleans())
def test_valid_records_load_exactly(tmp_path: Path, dataset: str, data: st.DataObject, form: dict[str, Any],
                                    chunk_size: int, require: bool) -> None:
    records = data.draw(dataset_records(dataset))
    path = tmp_path / f"{dataset}.data"
    write_records(path, records, **form)
    wanted = [r for r in records if not require or has_paragraphs(dataset, r)]
    with mock.patch.object(readers, "_CHUNK", chunk_size):
        source, examples = load_checked(dataset, path, require_paragraphs=require, skip_invalid=True)
    assert source.n_read == len(records) and len(source.invalid) == len(records) - len(wanted)
    assert [ex.qid for ex in examples] == [record_qid(r) for r in wanted]
    for ex, rec in zip(examples, wanted):
        assert (ex.question, ex.answers) == expected(dataset, rec)
        assert ex.dataset == dataset
        if dataset in ("hotpotqa", "2wiki"):
            assert [p.title for p in ex.paragraphs] == [c[0] for c in rec["context"]]
        elif dataset == "musique":
            assert [p.title for p in ex.paragraphs] == [p["title"] for p in rec["paragraphs"]]


@pytest.mark.parametrize("dataset", DATASETS)
@FUZZ
@given(data=st.data(), form=fmt, chunk_size=chunk, require=st.booleans())
def test_mutated_records_raise_only_data_format_error(tmp_path: Path, dataset: str, data: st.DataObject,
                                                      form: dict[str, Any], chunk_size: int, require: bool) -> None:
    records = data.draw(dataset_records(dataset))
    bad = data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1))
    rows = [data.draw(mutated(r)) if i in bad else r for i, r in enumerate(records)]
    assume(form["array"] or not isinstance(rows[0], list))  # a file starting with '[' is read as a JSON array
    path = tmp_path / f"{dataset}.data"
    write_records(path, rows, **form)
    with mock.patch.object(readers, "_CHUNK", chunk_size):
        with contextlib.suppress(DataFormatError):
            load_checked(dataset, path, require_paragraphs=require)
        source, examples = load_checked(dataset, path, require_paragraphs=require, skip_invalid=True)
    assert source.n_read == len(rows) == len(examples) + len(source.invalid)
    assert all(inv.source == str(path) and inv.problem for inv in source.invalid)
    # An untouched record is loaded unless it lacks paragraphs or a mutated one took its qid.
    skipped = {inv.location.split(" (")[0]: inv for inv in source.invalid}
    loaded = {ex.qid for ex in examples}
    for i, rec in enumerate(records):
        if i in bad or (require and not has_paragraphs(dataset, rec)):
            continue
        qid = record_qid(rec)
        where = f"record {i}" if form["array"] else f"line {i + 1}"
        assert qid in loaded or "duplicate" in skipped[where].problem


@pytest.mark.parametrize("dataset", DATASETS)
@FUZZ
@given(data=st.data(), form=fmt, chunk_size=chunk, skip=st.booleans())
def test_corrupt_files_raise_only_data_format_error(tmp_path: Path, dataset: str, data: st.DataObject,
                                                    form: dict[str, Any], chunk_size: int, skip: bool) -> None:
    path = tmp_path / f"{dataset}.data"
    write_records(path, data.draw(dataset_records(dataset)), **form)
    raw = path.read_bytes()
    cut = data.draw(st.integers(0, len(raw)))
    how = data.draw(st.sampled_from(["truncate", "insert", "replace", "bom", "garbage"]))
    junk = data.draw(st.binary(min_size=1, max_size=6) | st.sampled_from([b"\xff", b"\xc3", b"\x00", b"{", b"]"]))
    if how == "truncate":
        raw = raw[:cut]
    elif how == "insert":
        raw = raw[:cut] + junk + raw[cut:]
    elif how == "replace":
        raw = raw[:cut] + junk + raw[cut + len(junk):]
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    else:
        raw = data.draw(st.binary(max_size=40))
    path.write_bytes(raw)
    with mock.patch.object(readers, "_CHUNK", chunk_size), contextlib.suppress(DataFormatError):
        load_checked(dataset, path, skip_invalid=skip)


@FUZZ
@given(rows=st.lists(json_junk | st.fixed_dictionaries({"Q_id": json_junk, "aliases": json_junk}), max_size=4))
def test_2wiki_alias_file_raises_only_data_format_error(tmp_path: Path, rows: list[Any]) -> None:
    path = tmp_path / "id_aliases.json"
    write_records(path, rows, array=False, indent=None, ascii_only=False)
    try:
        table = load_2wiki_aliases(path)
    except DataFormatError as err:
        assert str(err).startswith(f"{path}:")
        return
    assert all(isinstance(k, str) and all(isinstance(n, str) for n in v) for k, v in table.items())


# ---------------------------------------------------------------- regressions found by the fuzzing


@pytest.mark.parametrize(
    ("content", "dataset", "message"),
    [
        # int() refuses > 4300 digits: json.loads raised a bare ValueError without the file name.
        (b'{"id": ' + b"1" * 5000 + b"}\n", "musique", r"line 1: invalid JSON \(Exceeds the limit"),
        # Bytes that are not UTF-8 raised UnicodeDecodeError (JSONL and JSON array).
        (b'{"id": "ok", "question": "\xff"}\n', "musique", "line 1: is not valid UTF-8"),
        (b'[{"_id": "\xc3("}]', "hotpotqa", r"record 0 \(line 1\): is not valid UTF-8"),
        (b"\n\xfe\n", "flashrag", "line 2: is not valid UTF-8"),
        # Deep nesting raised RecursionError.
        (b'\n{"a": ' + b"[" * 100_000 + b"\n", "musique", "line 2: invalid JSON"),
        (b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]", "hotpotqa", r"record 0 \(line 1\): invalid JSON \(nested"),
    ],
)
def test_bad_bytes_raise_data_format_error(tmp_path: Path, content: bytes, dataset: str, message: str) -> None:
    path = tmp_path / "bad.data"
    path.write_bytes(content)
    for skip in (False, True):
        with pytest.raises(DataFormatError, match=message) as err:
            load_examples(dataset, path, skip_invalid=skip)
        assert str(err.value).startswith(f"{path}:")


def test_musique_qid_with_a_non_decimal_digit_before_hop(tmp_path: Path) -> None:
    """``"²hop…"``: ``"²".isdigit()`` is true but ``int("²")`` raised ValueError."""
    rec = {"id": "²hop__1", "question": "Q?", "answer": "a", "paragraphs": [{"title": "T", "paragraph_text": "p"}]}
    path = tmp_path / "m.jsonl"
    write_records(path, [rec, {**rec, "id": "٣hop__2"}], array=False, indent=None, ascii_only=False)
    a, b = load_examples("musique", path)
    assert "hops" not in a.meta and b.meta["hops"] == 3


def test_musique_reference_with_a_huge_number(tmp_path: Path) -> None:
    """``#<5000 digits>`` in a sub-question raised ValueError from int()."""
    ref = "#" + "9" * 5000
    rec = {"id": "x", "question": "Q?", "answer": "a", "paragraphs": [{"title": "T", "paragraph_text": "p"}],
           "question_decomposition": [{"question": "Who?", "answer": "Ada"}, {"question": f"{ref} and #1", "answer": "b"}]}
    path = tmp_path / "m.jsonl"
    write_records(path, [rec], array=False, indent=None, ascii_only=False)
    assert load_examples("musique", path)[0].oracle_steps == ["Who?: Ada", f"{ref} and Ada: b"]


@pytest.mark.parametrize("chunk_size", range(1, 25))
def test_number_cut_at_the_buffer_edge(tmp_path: Path, chunk_size: int) -> None:
    """``2.5989730503873976e+16`` cut before ``e`` (or ``-0`` before ``.0``) decoded short, then failed."""
    values = [2.5989730503873976e16, -0.0, -1.5e-300, 12345.678, {"a": 1e5}, [7, -2e-7]]
    path = tmp_path / "n.json"
    path.write_text(json.dumps(values))
    with mock.patch.object(readers, "_CHUNK", chunk_size):
        assert [v for _, v in readers.iter_json_array(path)] == values
