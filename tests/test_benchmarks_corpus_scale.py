"""benchmarks/corpus_scale.py's verify phase, run as documented (``--verify-only``) on a tiny corpus: it opens the
built store and BM25 index the three ways, merges its figures into an existing results file without touching
the other phases' figures, and its rows carry them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import corpus_scale


def test_verify_only_measures_the_three_ways_and_keeps_the_other_figures(tmp_path):
    out = tmp_path / "corpus_scale.json"
    earlier = {"benchmark": "corpus_scale", "sizes": {"5000000": {"corpus": {"kept": True}}}, "rows": []}
    out.write_text(json.dumps(earlier))
    assert corpus_scale.main(["--verify-only", "--verify-sizes", "3000", "--verify-repeats", "1",
                              "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sizes"]["5000000"] == {"corpus": {"kept": True}}
    verify = result["sizes"]["3000"]["verify"]
    assert verify["files"] == 14  # passages.arrow, 6 hash lookups, 7 BM25 arrays
    assert verify["bytes"] > 0 and verify["always_gb_per_second"] > 0
    assert verify["open_seconds_none"] >= 0 and verify["open_seconds_always"] > 0
    assert verify["changed_overhead_seconds"] == round(verify["open_seconds_changed"] - verify["open_seconds_none"], 3)
    figures = {r["figure"]: r for r in result["rows"] if r["variant"] == "0.003M passages"}
    assert figures["corpus_scale.index_open_check_overhead"]["value"] == verify["changed_overhead_seconds"]
    assert figures["corpus_scale.index_open_full_check_speed"]["value"] == verify["always_gb_per_second"]
