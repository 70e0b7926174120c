"""``purecover select --selector DIR --input FILE --out FILE``: bring-your-own data, end to end on the CLI.

Uses the session's tiny trained and exported selector (k1 = 6, tests/models/conftest.py). The input
has no answers, no titles, some docs without doc_id and one question given as plain strings.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from purecover.cli import main
from purecover.select.byo import read_select_input

pytestmark = pytest.mark.samples


def _byo_input(candidates: list[dict]) -> list[dict]:
    """Seven questions (two batches of 4): no answers/titles; q0 docs are plain strings; odd docs lack doc_id."""
    rows = []
    for n, c in enumerate(candidates[:7]):
        docs: list = []
        for i, d in enumerate(c["docs"]):
            if n == 0:
                docs.append(d["text"])
            else:
                docs.append({"text": d["text"], **({"doc_id": d["doc_id"]} if i % 2 == 0 else {}), "extra": 1})
        rows.append({"qid": c["qid"], "question": c["question"], "docs": docs, "note": "ignored"})
    return rows


def _expected_ids(row: dict) -> list[str]:
    return [d["doc_id"] if isinstance(d, dict) and "doc_id" in d else str(i + 1) for i, d in enumerate(row["docs"])]


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _select(selector_dir: Path, inp: Path, out: Path, *extra: str) -> int:
    return main(["select", "--selector", str(selector_dir), "--input", str(inp), "--out", str(out),
                 "--batch-size", "4", "--device", "cpu", "--dtype", "float32", "-q", "--log-level", "WARNING", *extra])


@pytest.fixture(scope="module")
def byo_run(selector_dir, candidates, tmp_path_factory):
    root = tmp_path_factory.mktemp("byo")
    rows = _byo_input(candidates)
    inp = _write(root / "input.jsonl", rows)
    out, trec = root / "out.jsonl", root / "sel.trec"
    assert _select(selector_dir, inp, out, "--trec", str(trec), "--run-name", "tiny") == 0
    return root, rows, inp, out, trec


def test_records_have_doc_ids_and_match_the_selector(byo_run, selector):
    _, rows, _, out, _ = byo_run
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["qid"] for r in records] == [r["qid"] for r in rows]
    expected = selector.select_batch([r["question"] for r in rows], [r["docs"] for r in rows])
    for rec, row, exp in zip(records, rows, expected):
        assert list(rec) == ["qid", "selected", "selected_doc_ids", "logits", "probabilities", "score_space",
                             "doc_ids"]
        ids = _expected_ids(row)
        assert rec["doc_ids"] == ids and ids[1] == "2"  # position 2 has no doc_id: named by its 1-based position
        assert rec["selected"] == exp.indices and rec["selected"]
        assert rec["selected_doc_ids"] == [ids[k] for k in rec["selected"]]
        np.testing.assert_allclose(rec["logits"], exp.logits, atol=1e-4, rtol=0)
        assert sum(rec["probabilities"]) == pytest.approx(1.0)
    assert json.loads((out.parent / "out.jsonl.run.json").read_text())["status"] == "complete"


def test_trec_file_holds_the_selection(byo_run, selector_dir):
    root, _, inp, out, trec = byo_run
    records = {json.loads(line)["qid"]: json.loads(line) for line in out.read_text().splitlines()}
    lines = trec.read_text().splitlines()
    assert len(lines) == sum(len(r["selected"]) for r in records.values())
    seen: dict[str, list[str]] = {}
    for line in lines:
        qid, q0, doc_id, rank, score, name = line.split(" ")
        rec = records[qid]
        assert (q0, name, int(rank)) == ("Q0", "tiny", len(seen.get(qid, [])) + 1)
        assert float(score) == pytest.approx(rec["logits"][rec["doc_ids"].index(doc_id)], rel=1e-6, abs=1e-6)
        seen.setdefault(qid, []).append(doc_id)
    assert seen == {q: r["selected_doc_ids"] for q, r in records.items()}

    # --trec-all on the finished output: nothing is selected again, every candidate is ranked, the
    # selected first, so the selection is the top len(selected) of each question.
    before = out.read_bytes()
    all_trec = root / "all.trec"
    assert _select(selector_dir, inp, out, "--trec", str(all_trec), "--trec-all") == 0
    assert out.read_bytes() == before
    ranked: dict[str, list[tuple[str, float]]] = {}
    for line in all_trec.read_text().splitlines():
        qid, _, doc_id, _, score, name = line.split()
        assert name == "purecover"  # the default run name
        ranked.setdefault(qid, []).append((doc_id, float(score)))
    for qid, rec in records.items():
        assert sorted(d for d, _ in ranked[qid]) == sorted(rec["doc_ids"])
        n = len(rec["selected"])
        assert [d for d, _ in ranked[qid][:n]] == rec["selected_doc_ids"]
        rest = [s for _, s in ranked[qid][n:]]
        assert rest == sorted(rest, reverse=True)


def test_resume_after_a_partial_output_gives_identical_bytes(byo_run, selector_dir, tmp_path):
    root, _, inp, out, trec = byo_run
    partial = tmp_path / "out.jsonl"
    shutil.copy2(root / "out.jsonl.run.json", tmp_path / "out.jsonl.run.json")
    lines = out.read_bytes().split(b"\n")
    partial.write_bytes(b"\n".join(lines[:5]) + b"\n" + lines[5][:40])  # killed in the second batch, mid-line
    resumed_trec = tmp_path / "sel.trec"
    assert _select(selector_dir, inp, partial, "--trec", str(resumed_trec), "--run-name", "tiny") == 0
    assert partial.read_bytes() == out.read_bytes()
    assert resumed_trec.read_bytes() == trec.read_bytes()
    summary = json.loads((tmp_path / "out.jsonl.run.json").read_text())["summary"]
    assert (summary["already_done"], summary["written"], summary["repaired_lines"]) == (5, 2, 1)


def test_rerun_with_another_input_or_a_foreign_file_is_refused(byo_run, selector_dir, tmp_path, capsys):
    root, rows, _, out, _ = byo_run
    other = _write(tmp_path / "other.jsonl", rows[:2])
    copy = tmp_path / "out.jsonl"
    shutil.copy2(out, copy)
    assert _select(selector_dir, other, copy) == 1
    assert "has no out.jsonl.run.json" in capsys.readouterr().err
    shutil.copy2(root / "out.jsonl.run.json", tmp_path / "out.jsonl.run.json")
    assert _select(selector_dir, other, copy) == 1
    assert "selections of another input file" in capsys.readouterr().err


@pytest.mark.parametrize(("lines", "match"), [
    (['{"qid": "a", "question": "q?", "docs": [{"text": "t"}, {"title": "only a title"}]}'],
     r"input\.jsonl:1: field 'docs\[1\]\.text': missing"),
    (['{"qid": "a", "question": "q?", "docs": []}', '{"qid": "b", "question": "q?", "docs": ["1","2","3","4","5","6","7"]}'],
     r"input\.jsonl:2: field 'docs': 7 candidates, more than the selector's k1=6"),
    (['{"qid": "a", "docs": ["x"]}'], r"input\.jsonl:1: field 'question'"),
    (['{"qid": "a", "question": "q?", "passages": ["x"]}'], r"input\.jsonl:1: field 'docs': missing \(found 'passages'"),
    (['{"qid": "a", "question": "q?", "docs": [{"doc_id": "x", "text": "1"}, {"doc_id": "x", "text": "2"}]}'],
     r"input\.jsonl:1: field 'docs\[1\]\.doc_id': duplicate 'x'"),
    (['{"qid": "a", "question": "q?", "docs": ["x"]}', '{"qid": "a", "question": "q?", "docs": ["x"]}'],
     r"input\.jsonl:2: field 'qid': duplicate 'a'"),
    (['{"qid": "a", "question": "q?", "docs": ["x"]}', "{not json"], r"input\.jsonl:2: invalid JSON"),
])
def test_input_errors_name_file_line_and_field(selector_dir, tmp_path, capsys, lines, match):
    inp = _write(tmp_path / "input.jsonl", lines)
    assert _select(selector_dir, inp, tmp_path / "out.jsonl") == 1
    err = capsys.readouterr().err
    assert err.startswith("purecover select: error: ") and re.search(match, err), err
    assert not (tmp_path / "out.jsonl").exists()  # nothing written before the input checks out


def test_trec_needs_whitespace_free_ids(tmp_path):
    inp = _write(tmp_path / "input.jsonl", [{"qid": "a", "question": "q?", "docs": [{"doc_id": "has space", "text": "t"}]}])
    assert read_select_input(inp, 6)[0].docs[0].doc_id == "has space"  # fine without --trec
    with pytest.raises(ValueError, match=r"input\.jsonl:1: field 'docs\[0\]\.doc_id'.*whitespace.*--trec"):
        read_select_input(inp, 6, trec=True)


@pytest.mark.parametrize(("argv", "match"), [
    (["select", "recipe.yaml", "--selector", "s", "--input", "i", "--out", "o"], "take no RECIPE or --set"),
    (["select", "--selector", "s", "--input", "i", "--set", "data.k1=3"], "take no RECIPE or --set"),
    (["select", "--selector", "s", "--input", "i"], "--out missing"),
    (["select", "--trec", "t.trec"], "--selector and --input and --out missing"),
    (["select", "--selector", "s", "--input", "i", "--out", "o", "--trec-all"], "--trec-all needs --trec"),
])
def test_mixed_or_incomplete_options_are_usage_errors(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage: purecover select RECIPE" in err and match in err


def test_python_m_entry_runs_the_same(byo_run, selector_dir, tmp_path):
    from purecover.select.__main__ import byo_main

    _, _, inp, out, _ = byo_run
    copy = tmp_path / "m.jsonl"
    assert byo_main(["--selector", str(selector_dir), "--input", str(inp), "--out", str(copy), "--batch-size", "4",
                     "--device", "cpu", "--dtype", "float32", "-q"]) == 0
    assert copy.read_bytes() == out.read_bytes()
    with pytest.raises(SystemExit) as exc:
        byo_main(["recipe.yaml", "--selector", str(selector_dir)])
    assert exc.value.code == 2


# --------------------------------------------------------------------------- one writer per --out, odd inputs

_HOLD_LOCK = """
import fcntl, json, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.ftruncate(fd, 0)
os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": "here", "started": "now"}).encode(), 0)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_second_select_into_the_same_out_is_refused_while_the_first_holds_it(byo_run, selector_dir, tmp_path,
                                                                                capsys):
    """Another process holds .OUT.lock (as a running `purecover select --out OUT` does): this one fails at once,
    naming the holder's pid, and writes nothing; once the holder is gone the same command runs."""
    import subprocess
    import sys

    _, _, inp, out, _ = byo_run
    target = tmp_path / "out.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(tmp_path / ".out.jsonl.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert _select(selector_dir, inp, target) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out {target} is being written by another `purecover select` " \
            f"(pid {holder.pid} on here" in err and "choose another --out" in err
        assert not target.exists() and not (tmp_path / "out.jsonl.run.json").exists()
    finally:
        holder.communicate("\n", timeout=30)
    assert _select(selector_dir, inp, target) == 0
    assert target.read_bytes() == out.read_bytes()


def test_the_lock_is_held_while_selecting(byo_run, selector_dir, tmp_path, monkeypatch):
    """While select_into writes OUT, another process cannot take .OUT.lock."""
    import subprocess
    import sys

    import purecover.select.byo as byo

    _, _, inp, _, _ = byo_run
    seen = []
    real = byo.select_into

    def probing(*args, **kwargs):
        probe = subprocess.run([sys.executable, "-c", _HOLD_LOCK, str(tmp_path / ".o.jsonl.lock")], input="\n",
                               capture_output=True, text=True, timeout=60)
        seen.append(probe.returncode)
        return real(*args, **kwargs)

    monkeypatch.setattr(byo, "select_into", probing)
    assert _select(selector_dir, inp, tmp_path / "o.jsonl") == 0
    assert seen == [1]  # BlockingIOError in the probe: the lock was held


def test_duplicate_qids_in_an_existing_out_name_the_line_and_the_remedy(byo_run, selector_dir, tmp_path, capsys):
    root, rows, inp, out, _ = byo_run
    target = tmp_path / "out.jsonl"
    lines = out.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:3] + lines[:2]))  # two commands interleaved their records
    shutil.copy2(root / "out.jsonl.run.json", tmp_path / "out.jsonl.run.json")
    before = target.read_bytes()
    assert _select(selector_dir, inp, target) == 1
    err = capsys.readouterr().err
    qid = rows[0]["qid"]
    assert f"{target}:4: duplicate qid {qid!r} (first on line 1); 2 duplicate line(s) (4, 5)" in err
    assert f"delete {target} and out.jsonl.run.json to redo the selections, or delete the duplicate lines" in err
    assert target.read_bytes() == before


def test_non_utf8_input_names_the_file_and_line(selector_dir, tmp_path, capsys):
    inp = tmp_path / "input.jsonl"
    inp.write_bytes(b'{"qid": "a", "question": "q?", "docs": ["x"]}\n'
                    b'{"qid": "b", "question": "caf\xe9?", "docs": ["x"]}\n')
    assert _select(selector_dir, inp, tmp_path / "out.jsonl") == 1
    err = capsys.readouterr().err
    assert f"{inp}:2: not UTF-8 text (byte 0xe9 at column 30): save the file as UTF-8" in err, err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_very_long_question_is_cut_and_counted(selector_dir, candidates, tmp_path, capsys):
    docs = [d["text"] for d in candidates[0]["docs"]]
    rows = [{"qid": "long", "question": "Which river? " * 8000, "docs": docs},  # ~100k characters
            {"qid": "short", "question": candidates[0]["question"], "docs": docs}]
    inp = _write(tmp_path / "input.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert _select(selector_dir, inp, out) == 0
    summary = json.loads((tmp_path / "out.jsonl.run.json").read_text())["summary"]
    assert (summary["questions_truncated"], summary["max_question_tokens"]) == (1, 256)
    assert re.search(r"questions_truncated\s+1\n", capsys.readouterr().out)
    assert [json.loads(line)["qid"] for line in out.read_text().splitlines()] == ["long", "short"]


def test_a_bad_selector_config_is_a_one_line_error(byo_run, selector_dir, tmp_path, capsys):
    config = json.loads((selector_dir / "selector_config.json").read_text())
    bad = tmp_path / "selector"
    bad.mkdir()
    (bad / "selector_config.json").write_text(json.dumps({**config, "identifiers": 7}))
    _, _, inp, _, _ = byo_run
    assert _select(bad, inp, tmp_path / "out.jsonl") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"purecover select: error: {bad / 'selector_config.json'}: field identifiers: must be a "
                          "JSON object (got an integer)"), err


def test_input_questions_are_records_with_every_doc_named(tmp_path):
    from purecover.records import CandidateDoc, SelectInputRecord

    inp = _write(tmp_path / "input.jsonl", [{"qid": 7, "question": "q?", "note": "ignored",
                                             "docs": ["plain", {"text": "t", "title": "T", "doc_id": 12}]}])
    assert read_select_input(inp, 6) == [SelectInputRecord(qid="7", question="q?", docs=[
        CandidateDoc(doc_id="1", title="", text="plain"), CandidateDoc(doc_id="12", title="T", text="t")])]
