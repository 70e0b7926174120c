"""TREC qrels and runs from a third party: grades are bounded integers of ASCII digits, bytes that are not UTF-8 name
their line, and the issue's 40-byte qrels file is refused at once instead of taking gigabytes."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from purecover.utils.trec import MAX_GRADE, MIN_GRADE, iter_qrels, read_trec_qrels, read_trec_run

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("rel", "why"), [
    ("2147483648", "2147483648 is outside the grades"),
    ("1001", f"outside the grades purecover reads ({MIN_GRADE} to {MAX_GRADE})"),
    ("-1001", "outside the grades"),
    ("1_000", "'1_000' is not an integer"),  # int() takes it
    ("\u0661", "is not an integer"),  # ARABIC-INDIC DIGIT ONE: int() takes it too
    ("1.0", "is not an integer"),
    ("9223372036854775808", "outside the grades"),
    ("1" * 31, "is not an integer"),
])
def test_grades_outside_the_range_or_not_plain_digits_name_file_line_and_field(tmp_path, rel, why):
    path = tmp_path / "q.txt"
    path.write_text(f"t1 n1 d1 1\nt2 n1 d4 {rel}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"q.txt:2: field 'rel': .*{re.escape(why)}"):
        list(iter_qrels(path))


def test_the_documented_range_is_read(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(f"t1 0 a {MAX_GRADE}\nt1 0 b {MIN_GRADE}\nt1 0 c +3\nt1 0 d 0\n")
    assert read_trec_qrels(path) == {"t1": {"a": MAX_GRADE, "b": MIN_GRADE, "c": 3, "d": 0}}


def test_bytes_that_are_not_utf8_name_the_line(tmp_path):
    qrels = tmp_path / "q.txt"
    qrels.write_bytes(b"t1 0 a 1\nt1 0 \xffb 1\n")
    with pytest.raises(ValueError, match=r"q.txt:2: not UTF-8 text \(byte 0xff at column 6\)"):
        list(iter_qrels(qrels))
    run = tmp_path / "r.trec"
    run.write_bytes(b"t1 Q0 a 1 2.0 x\nt1 Q0 b 2 1.0 \xfe\n")
    with pytest.raises(ValueError, match=r"r.trec:2: not UTF-8 text"):
        read_trec_run(run)


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def test_score_run_refuses_the_issues_qrels_at_once(tmp_path):
    """``printf 't1 n1 d1 1\\nt2 n1 d4 2147483648\\n'``: 88 s and 16.8 GB before; one line now."""
    (tmp_path / "q").write_text("t1 n1 d1 1\nt2 n1 d4 2147483648\n")
    (tmp_path / "run.trec").write_text("t1 Q0 d1 1 2.0 r\nt2 Q0 d4 1 1.0 r\n")
    done = subprocess.run([sys.executable, "-m", "purecover", "score-run", "run.trec", "--qrels", "q", "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, preexec_fn=_cap,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 1, done.stderr
    assert "q:2: field 'rel': 2147483648 is outside the grades purecover reads" in done.stderr
    assert done.stdout == ""  # nothing scored


def test_a_judgments_file_that_is_not_utf8_names_the_line(tmp_path):
    from purecover.eval.coverage_collections import CoverageDataError, read_judgments

    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"id": "1", "docid": "a", "ratings": [1]}\n{"id": "1", "docid": "\xffb", "ratings": [2]}\n')
    with pytest.raises(CoverageDataError, match=r"j.jsonl:2: not UTF-8 text \(byte 0xff at column 23\)"):
        read_judgments(path)
