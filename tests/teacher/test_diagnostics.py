"""Label diagnostics, the fallback warning, the gold comparison and `purecover label-report`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.records import CandidateDoc, CandidateRecord, LabelDiagnostics, LabelRecord
from purecover.teacher.diagnostics import fallback_warning, gold_comparison, label_diagnostics

TEACHER = {"budget": 2, "min_select": 1, "selection": "greedy", "estimator": "attention", "lam": 0.3,
           "tau_stop": 0.0}


def label(qid, selected, e, W, status="ok", stop="threshold", reasons=(), doc_ids=None, **extra) -> LabelRecord:
    """A labels.jsonl record with the new fields (doc ids are "<qid>-d<position>")."""
    return LabelRecord.model_validate(
        {"qid": qid, "selected": selected,
         "selected_doc_ids": doc_ids if doc_ids is not None else [f"{qid}-d{k}" for k in selected],
         "gains": [0.1] * len(selected), "objective": 0.1, "steps": ["s"] * len(e), "answer": "", "e": e, "W": W,
         "bias_key": None, "status": status, "reason": None, "fallback_reasons": list(reasons), "stop": stop,
         "teacher": dict(TEACHER), **extra})


def records() -> list[LabelRecord]:
    """Five questions: two ok, one min_select fallback, one error, one single-step question."""
    return [
        # K1 = 3, N = 2; per-step max over documents 0.6 and 0.5
        label("q1", [0, 2], [0.5, 0.5], [[0.6, 0.2], [0.3, 0.3], [0.1, 0.5]], stop="budget"),
        # CoT weighting off: e all ones = uniform over 3 steps; maxes 0.7, 0.8, 1.0
        label("q2", [1], [1.0, 1.0, 1.0], [[0.2, 0.1, 0.0], [0.7, 0.8, 1.0], [0.1, 0.1, 0.0]],
              status="fallback", stop="first_step", reasons=["min_select"]),
        LabelRecord.failed("q3", "RuntimeError: boom", bias_key=None, teacher=dict(TEACHER)),
        # a non-finite W column (null) is ignored: only step 0 counts, max 1.0
        label("q4", [0], [0.8, 0.2], [[1.0, None], [0.0, None]]),
        # N = 1: normalised entropy counts as 1.0
        label("q5", [0], [2.0], [[0.5], [0.5]]),
    ]


def entropy(p):
    return -sum(x * math.log(x) for x in p if x > 0)


# --------------------------------------------------------------------------- label_diagnostics


def test_label_diagnostics_hand_computed():
    d = label_diagnostics(records())
    assert (d.questions, d.ok, d.fallback, d.error) == (5, 3, 1, 1)
    assert d.budget == 2
    assert d.size_histogram == {"0": 0, "1": 3, "2": 1}  # q1: 2; q2, q4, q5: 1; q3 (error) left out
    assert d.fallback_size_histogram == {"0": 0, "1": 1, "2": 0}
    assert d.mean_size == pytest.approx(5 / 4)
    assert d.fallback_rate == pytest.approx(1 / 5)
    assert d.fallback_reasons == {"min_select": 1}
    assert d.first_step_stop_rate == pytest.approx(1 / 4)
    assert d.stop_counts == {"budget": 1, "first_step": 1, "threshold": 2}
    entropies = [math.log(2), math.log(3), entropy([0.8, 0.2]), 0.0]
    normalised = [1.0, 1.0, entropy([0.8, 0.2]) / math.log(2), 1.0]
    assert d.e_entropy == pytest.approx(sum(entropies) / 4, abs=1e-4)
    assert d.e_entropy_normalised == pytest.approx(sum(normalised) / 4, abs=1e-4)
    assert d.max_e == pytest.approx((0.5 + 1 / 3 + 0.8 + 1.0) / 4, abs=1e-4)
    assert d.max_W == pytest.approx((0.55 + (0.7 + 0.8 + 1.0) / 3 + 1.0 + 0.5) / 4, abs=1e-4)
    json.dumps(d.to_json_dict())  # plain JSON types only
    assert all(isinstance(getattr(d, key), float) for key in ("mean_size", "e_entropy", "max_e", "max_W"))


def test_uniform_e_has_normalised_entropy_one():
    d = label_diagnostics([label("a", [0], [0.5, 0.5], [[1.0, 1.0]])])
    assert d.e_entropy == pytest.approx(math.log(2), abs=1e-4)
    assert d.e_entropy_normalised == 1.0
    assert d.max_e == 0.5
    ones = label_diagnostics([label("b", [0], [1.0] * 4, [[1.0] * 4])])
    assert ones.e_entropy == pytest.approx(math.log(4), abs=1e-4)
    assert ones.e_entropy_normalised == 1.0 and ones.max_e == 0.25


def test_budget_argument_overrides_teacher_meta_and_histogram_grows_for_larger_sets():
    d = label_diagnostics(records(), budget=4)
    assert list(d.size_histogram) == ["0", "1", "2", "3", "4"]
    big = label("z", [0, 1, 2], [1.0], [[0.3], [0.3], [0.4]])
    d = label_diagnostics([*records(), big])
    assert d.size_histogram["3"] == 1 and d.budget == 2


def test_older_records_without_new_fields_count_as_unknown():
    old = []
    for rec in records():
        line = {k: v for k, v in rec.to_json_dict().items() if k not in ("fallback_reasons", "stop")}
        line["teacher"] = {"model": "m", "estimator": "attention"}  # no budget either
        old.append(LabelRecord.model_validate(line))
    d = label_diagnostics(old)
    assert d.fallback_reasons == {"unknown": 1}
    assert d.stop_counts == {"unknown": 4}
    assert d.first_step_stop_rate is None
    assert d.budget == 2  # the largest |S| seen
    assert d.fallback_rate == pytest.approx(0.2)


def test_empty_input_gives_undefined_means():
    d = label_diagnostics([])
    assert d.questions == 0 and d.fallback_rate is None and d.mean_size is None
    assert d.size_histogram == {"0": 0}


# --------------------------------------------------------------------------- fallback_warning


def fallback_records(n: int, n_fallback: int, reason: str) -> list[LabelRecord]:
    recs = [label(f"f{i}", [0], [1.0], [[1.0]], status="fallback", stop="first_step", reasons=[reason])
            for i in range(n_fallback)]
    return recs + [label(f"o{i}", [0], [1.0], [[1.0]]) for i in range(n - n_fallback)]


def test_warning_none_at_or_under_threshold():
    assert fallback_warning(label_diagnostics(fallback_records(10, 1, "min_select")), 0.1) is None
    assert fallback_warning(label_diagnostics(fallback_records(10, 0, "min_select")), 0.0) is None
    assert fallback_warning(label_diagnostics([]), 0.1) is None  # no fallback rate


def test_warning_over_threshold_names_the_knobs():
    line = fallback_warning(label_diagnostics(fallback_records(50, 17, "min_select")), 0.1)
    assert line is not None and "\n" not in line
    assert line.startswith("label: 34% of questions fell back to min_select (threshold 10%)")
    for knob in ("teacher.lam", "teacher.tau_stop", "teacher.tau2", "teacher.embedding_tau",
                 "teacher.normalize=zscore", "purecover tune"):
        assert knob in line


def test_warning_points_at_replies_when_reply_parse_dominates():
    recs = fallback_records(10, 4, "reply_parse")
    recs[0].fallback_reasons = ["min_select"]  # 3 of 4 fallbacks are reply_parse
    line = fallback_warning(label_diagnostics(recs), 0.1)
    assert line is not None and "\n" not in line
    assert "40%" in line and "reply_parse" in line
    assert "teacher.max_new_tokens" in line and "teacher.model" in line
    assert "teacher.lam" not in line


def test_warning_says_steps_were_kept_when_replies_were_only_cut_off():
    """Replies that reached the token limit (reply_issue unclosed) fell back for their answer only: the warning
    says their steps were labelled instead of that the reply did not parse."""
    recs = fallback_records(10, 6, "reply_parse")
    for r in recs[:6]:
        r.reply, r.reply_issue = "[Step 1]: Paris is in France. [Step 2]: It", "unclosed"
    recs[5].reply_issue = "no_steps"  # 5 of 6 fallbacks were only cut off
    line = fallback_warning(label_diagnostics(recs), 0.1)
    assert line is not None and "\n" not in line
    assert "60%" in line and "unclosed, 5 replies" in line and "steps were labelled" in line
    assert "did not parse" not in line and "teacher.max_new_tokens" in line
    for r in recs[:3]:  # 3 of 6: no longer most of them
        r.reply_issue = "no_steps"
    assert "did not parse" in fallback_warning(label_diagnostics(recs), 0.1)


# --------------------------------------------------------------------------- gold_comparison


def candidate(qid: str, doc_ids: list[str], gold: list[str]) -> CandidateRecord:
    return CandidateRecord(qid=qid, question="?", answers=["a"], gold_doc_ids=gold,
                           docs=[CandidateDoc(doc_id=d, title="", text="", score=1.0) for d in doc_ids])


def candidates() -> dict[str, CandidateRecord]:
    return {
        "c1": candidate("c1", [f"d{i}" for i in range(5)], ["d2", "d9"]),  # d9 was not retrieved
        "c2": candidate("c2", [f"e{i}" for i in range(4)], ["e1"]),
        "c3": candidate("c3", ["x0"], []),
        "c4": candidate("c4", ["y0"], ["y0"]),
    }


def gold_labels() -> list[LabelRecord]:
    return [
        label("c1", [0, 2], [1.0], [[1.0]], doc_ids=["d0", "d2"]),
        label("c2", [1], [1.0], [[1.0]], status="fallback", doc_ids=["e1"]),
        label("c3", [0], [1.0], [[1.0]], doc_ids=["x0"]),  # no gold: skipped
        LabelRecord.failed("c4", "RuntimeError: boom", bias_key=None, teacher={}),  # error: skipped
    ]


def figures(row) -> dict:
    return row.to_json_dict()


def test_gold_comparison_hand_computed():
    c = gold_comparison(gold_labels(), candidates(), k=3)
    assert c.questions == 2 and c.k == 3
    # c1 labels {d0, d2}: 1 hit of 2 chosen, 2 gold -> P = R = F1 = 1/2; c2 labels {e1}: 1, 1, 1
    assert figures(c.labels) == pytest.approx({"precision": 0.75, "recall": 0.75, "f1": 0.75, "mean_size": 1.5})
    # top-|S|: c1 {d0, d1} no hit -> 0; c2 {e0} no hit -> 0
    assert figures(c.retrieval_top_size) == pytest.approx(
        {"precision": 0.0, "recall": 0.0, "f1": 0.0, "mean_size": 1.5})
    # top-2: c1 {d0, d1} -> 0; c2 {e0, e1}: P 1/2, R 1, F1 2/3
    assert figures(c.retrieval_top_2) == pytest.approx(
        {"precision": 0.25, "recall": 0.5, "f1": 1 / 3, "mean_size": 2.0}, abs=1e-4)
    # top-3: c1 {d0, d1, d2}: P 1/3, R 1/2, F1 0.4; c2 {e0, e1, e2}: P 1/3, R 1, F1 0.5
    assert figures(c.retrieval_top_k) == pytest.approx(
        {"precision": 1 / 3, "recall": 0.75, "f1": 0.45, "mean_size": 3.0}, abs=1e-4)
    json.dumps(c.to_json_dict())


def test_gold_comparison_rejects_bad_k_and_handles_no_gold():
    with pytest.raises(ValueError, match="k must be a positive integer"):
        gold_comparison(gold_labels(), candidates(), k=0)
    c = gold_comparison(gold_labels()[2:], candidates(), k=2)
    assert c.questions == 0 and c.labels.f1 is None


# --------------------------------------------------------------------------- purecover label-report


def write_run(run: Path, manifest: dict | None = None, gold: bool = True) -> list[LabelRecord]:
    run.mkdir(parents=True, exist_ok=True)
    recs = records()
    gold_of = {"q1": ["q1-d0", "q1-d1"], "q2": ["q2-d1"], "q4": ["q4-d2"], "q5": []}
    cands = [{"qid": r.qid, "question": "?", "answers": ["a"],
              "docs": [{"doc_id": f"{r.qid}-d{i}", "title": "t", "text": "x", "score": 1.0} for i in range(3)],
              "gold_doc_ids": gold_of.get(r.qid, []) if gold else []} for r in recs]
    (run / "labels.jsonl").write_text("".join(json.dumps(r.to_json_dict()) + "\n" for r in recs), encoding="utf-8")
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cands), encoding="utf-8")
    if manifest is not None:
        (run / "label.run.json").write_text(json.dumps(manifest), encoding="utf-8")
    return recs


def test_label_report_cli_end_to_end(tmp_path, capsys):
    run = tmp_path / "run"
    recs = write_run(run, {"stage": "label", "recipe": {"teacher": {"fallback_warn": 0.05}}})
    assert main(["label-report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "| method | P | R | F1 | mean \\|S\\| |" in out
    for row in ("| labels |", "| retrieval top-\\|S\\| |", "| retrieval top-2 |", "| retrieval top-K (K=2) |"):
        assert row in out
    assert "warning: label: 20% of questions fell back to min_select (threshold 5%)" in out
    folder = run / "label_report"
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert LabelDiagnostics.model_validate(report["diagnostics"]) == label_diagnostics(recs)
    assert report["fallback_warn"] == 0.05 and "teacher.lam" in report["warning"]
    assert report["k"] == 2  # the labels' budget
    assert report["comparison"]["questions"] == 3  # q1, q2, q4 (q3 is an error, q5 has no gold)
    # q1 {d0, d2} vs {d0, d1}: 1/2, 1/2, 1/2; q2 {d1} vs {d1}: 1; q4 {d0} vs {d2}: 0
    assert report["comparison"]["labels"]["f1"] == pytest.approx(0.5)
    assert set(report["figures"]) == {"size_histogram", "precision_recall"}
    for name in ("size_histogram.png", "precision_recall.png"):
        png = folder / name
        assert png.is_file() and png.stat().st_size > 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_label_report_json_out_and_k(tmp_path, capsys):
    run = tmp_path / "run"
    write_run(run)  # no label.run.json: threshold 0.1
    out_dir = tmp_path / "elsewhere"
    assert main(["label-report", str(run), "--json", "--out", str(out_dir), "--k", "3"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed["k"] == 3 and printed["comparison"]["retrieval_top_k"]["mean_size"] == 3.0
    assert printed["fallback_warn"] == 0.1
    assert "warning: label: 20%" in captured.err
    assert json.loads((out_dir / "report.json").read_text(encoding="utf-8")) == printed
    assert (out_dir / "size_histogram.png").stat().st_size > 0
    assert not (run / "label_report").exists()


def test_label_report_without_gold_skips_precision_recall(tmp_path, capsys):
    run = tmp_path / "run"
    write_run(run, {"recipe": {"teacher": {"fallback_warn": 0.5}}}, gold=False)
    assert main(["label-report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no gold passages" in out and "warning" not in out
    assert not (run / "label_report" / "precision_recall.png").exists()
    assert (run / "label_report" / "size_histogram.png").stat().st_size > 0


@pytest.mark.parametrize("missing", ["labels.jsonl", "candidates.jsonl"])
def test_label_report_missing_file_is_a_one_line_error(tmp_path, capsys, missing):
    run = tmp_path / "run"
    write_run(run)
    (run / missing).unlink()
    assert main(["label-report", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("purecover label-report: error:") and str(run / missing) in err
    assert "\n" not in err
