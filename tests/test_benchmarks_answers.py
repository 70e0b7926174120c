"""benchmarks/answers.py's own logic, without training or generating: the claim's three figures and their targets
from a seed's result, rows over seeds, merging runs of different sessions, and MuSiQue's split (its files are new
to the shared question lists) never meeting the training questions."""

from __future__ import annotations

import json

import pytest

from tests.test_benchmarks_summary import _load

bench = _load("answers")


def _method(em: float, tokens: float, select_ms: float | None = 0.0, diff: float | None = None) -> dict:
    return {"em": em, "f1": em, "acc": em, "mean_k": 2.0, "prompt_tokens": tokens, "select_ms": select_ms,
            "vs_reference_em": None if diff is None else {"diff": diff, "p": 0.04}}


def _seed(student_em: float, seed: int = 0) -> dict:
    results = {"none@2": _method(0.1, 70), "retrieval@2": _method(0.30, 330), "retrieval@5": _method(0.25, 800),
               "gold_support@5": _method(0.40, 320),
               "teacher@5": _method(0.35, 330), "student@5": _method(student_em, 400, 120.0, student_em - 0.25),
               "icr@2": _method(0.28, 330), "icr@5": _method(0.26, 800),
               "cross_encoder_ft@5": _method(0.29, 500, 30.0)}
    support = {m: {"precision": 0.7, "recall": 0.8, "f1": f1, "mean_size": 2.5} for m, f1 in
               (("retrieval", 0.64), ("student", 0.72), ("cross_encoder_ft", 0.70), ("teacher", 0.9))}
    return {"seed": seed, "results": results, "support": support,
            "auc": {"student": 0.93, "cross_encoder_ft": 0.9},
            "answer_seconds": {"questions": 24, "student@5": 1.2, "retrieval@5": 2.0}}


def test_the_claim_from_one_seed():
    figures = bench.claim(_seed(0.34))
    assert figures["em_minus_best_retrieval"] == pytest.approx(0.04)  # against retrieval@2, the better one
    assert figures["token_share_of_top5"] == pytest.approx(0.5)
    assert figures["gap_closed"] == pytest.approx(0.4)  # 0.04 of the 0.10 from 0.30 to gold's 0.40
    assert figures["support_f1_minus_cross_encoder"] == pytest.approx(0.02)
    assert figures["select_plus_answer_over_top5"] == pytest.approx((0.12 + 1.2) / 2.0)


def test_rows_carry_the_targets_at_each_seed_and_over_seeds():
    result = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"0": _seed(0.34, 0), "1": _seed(0.28, 1)}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    a = rows[("answers.hotpotqa.student_em_minus_best_retrieval", None, 0)]
    assert a["target"] == ">= 0" and a["met"] is True
    assert rows[("answers.hotpotqa.student_em_minus_best_retrieval", None, 1)]["met"] is False  # 0.28 < 0.30
    worst = rows[("answers.hotpotqa.student_em_minus_best_retrieval_worst", None, None)]
    assert worst["value"] == pytest.approx(-0.02) and worst["met"] is False
    assert rows[("answers.hotpotqa.student_token_share_of_top5", None, 0)]["target"] == "<= 0.6"
    assert rows[("answers.hotpotqa.select_plus_answer_over_top5_answer", None, 0)]["target"] == "<= 1"
    assert rows[("answers.hotpotqa.student_minus_cross_encoder_support_f1", None, 0)]["met"] is True
    assert rows[("answers.hotpotqa.em", "student@5", 0)]["value"] == 0.34
    assert rows[("answers.hotpotqa.em_minus_retrieval_top5", "student@5", 1)]["value"] == pytest.approx(0.03)
    assert rows[("answers.hotpotqa.support_size_mean", "student", None)]["value"] == 2.5
    assert ("answers.hotpotqa.support_size_worst", "student", None) not in rows  # a size has no better direction
    assert a["machine"] == "2 cores, processor not recorded"  # the result's machine, not "not recorded"


def test_merging_keeps_every_seed_and_command(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"command": ["answers.py", "--seeds", "0"], "datasets": {"hotpotqa": {"0": _seed(0.3)}}}))
    b.write_text(json.dumps({"command": ["answers.py", "--seeds", "1"], "datasets": {"hotpotqa": {"1": _seed(0.2)},
                                                                                     "2wiki": {"0": _seed(0.5)}}}))
    merged = bench.merge([a, b])
    assert sorted(merged["datasets"]["hotpotqa"]) == ["0", "1"] and list(merged["datasets"]["2wiki"]) == ["0"]
    assert merged["commands"] == [["answers.py", "--seeds", "0"], ["answers.py", "--seeds", "1"]]


@pytest.mark.samples
def test_musique_test_questions_are_never_training_questions(sample_dir):
    from types import SimpleNamespace

    from purecover.train.data import split_examples

    qids = [json.loads(line)["id"] for name in bench.FILES["musique"]
            for line in (sample_dir / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(qids) == len(set(qids)) == 300
    train, calib, test = (set(x.qid for x in part) for part in
                          split_examples([SimpleNamespace(qid=q) for q in qids], 0.4, 0, 0.5))
    assert not train & test and not train & calib and len(test) >= 40


def test_em_is_grouped_by_how_much_gold_the_students_set_holds(tmp_path):
    preds = tmp_path / "eval" / "predictions"
    preds.mkdir(parents=True)
    cands = {q: {"gold_doc_ids": ["a", "b"]} for q in ("q1", "q2", "q3", "q4")} | {"q5": {"gold_doc_ids": []}}
    student = {"q1": ["a", "b"], "q2": ["a", "b", "x"], "q3": ["b"], "q4": ["x"], "q5": ["x"]}
    top2 = {"q1": ["a", "x"], "q2": ["x", "y"], "q3": ["a", "b"], "q4": ["a", "b"], "q5": ["x", "y"]}
    ems = {f"student@{bench.OWN_SET_K}": {"q1": 1, "q2": 0, "q3": 0, "q4": 0, "q5": 1},
           "retrieval@2": {"q1": 0, "q2": 0, "q3": 1, "q4": 1, "q5": 0}}
    for shown, sets in ((f"student@{bench.OWN_SET_K}", student), ("retrieval@2", top2)):
        (preds / f"{shown}.jsonl").write_text("".join(json.dumps({"qid": q, "doc_ids": sets[q], "em": ems[shown][q]})
                                                      + "\n" for q in sets))
    groups = bench._em_by_student_support(tmp_path, cands)
    assert {g: v["questions"] for g, v in groups.items()} == {"complete": 2, "partial": 1, "none": 1}  # q5: no gold
    assert groups["complete"]["em"] == {f"student@{bench.OWN_SET_K}": 0.5, "retrieval@2": 0.0}
    assert groups["partial"]["em"]["retrieval@2"] == 1.0 and groups["none"]["em"][f"student@{bench.OWN_SET_K}"] == 0.0
    assert groups["complete"]["retrieval@2_gold_recall"] == pytest.approx(0.25)  # q1 holds a, q2 neither
    assert "gold_support@5" not in groups["complete"]["em"]  # a method not evaluated is left out, not zero
    result = {"datasets": {"hotpotqa": {"0": _seed(0.3) | {"em_by_student_support": groups}}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    assert rows[("answers.hotpotqa.em_where_student_complete", "retrieval@2", 0)]["value"] == 0.0
    assert rows[("answers.hotpotqa.em_where_student_partial", "retrieval@2", 0)]["value"] == 1.0


def test_benchmark_runs_train_and_answer_in_float32_whatever_the_recipe_says(sample_dir, tmp_path):
    """The HotpotQA recipe labels, trains, fine-tunes the cross-encoder and answers in bfloat16 (its headline run's
    time); the benchmarks' runs pin float32, as their stored seeds were measured."""
    recipe = bench.load("hotpotqa", tmp_path / "run", [])
    assert recipe.student.training.get("bf16") is False and recipe.eval.dtype == "float32"
    assert recipe.teacher.dtype == "float32" and recipe.eval.cross_encoder_ft_bf16 is False
    assert recipe.teacher.batch_size == 2  # as the stored label runs were made: their hash holds it
    from purecover.config import load_recipe

    as_written = load_recipe(bench.ROOT / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml", [f"run_dir={tmp_path}"])
    assert as_written.student.training.get("bf16") is True and as_written.eval.dtype == "bfloat16"
    assert as_written.teacher.dtype == "bfloat16" and as_written.eval.cross_encoder_ft_bf16 is True


def test_the_claim_timed_in_one_loop_at_each_load():
    """Target (c) with the selection timed beside the answers, a row per number of busy processes; seeds timed
    before the selection was have no such figure (None), and the stored (c) row keeps its select-stage form."""
    timed = _seed(0.34, 0)
    timed["answer_seconds"] |= {"select": 0.3, "busy": {"2": {"questions": 24, "select": 0.9, "student@5": 2.4,
                                                              "retrieval@5": 3.0}}}
    result = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"0": timed, "1": _seed(0.28, 1)}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    idle = rows[("answers.hotpotqa.select_plus_answer_over_top5_answer_timed", "0 busy", 0)]
    assert idle["value"] == pytest.approx((0.3 + 1.2) / 2.0) and idle["target"] == "<= 1" and idle["met"] is True
    loaded = rows[("answers.hotpotqa.select_plus_answer_over_top5_answer_timed", "2 busy", 0)]
    assert loaded["value"] == pytest.approx((0.9 + 2.4) / 3.0) and loaded["met"] is False
    assert rows[("answers.hotpotqa.select_plus_answer_over_top5_answer_timed", "0 busy", 1)]["value"] is None
    assert rows[("answers.hotpotqa.select_plus_answer_over_top5_answer", None, 0)]["value"] == pytest.approx(
        (0.12 + 1.2) / 2.0)  # the select stage's 120 ms, as before


def test_answers_are_timed_with_the_selection_that_was_scored(tmp_path_factory, sample_dir):
    """`time_answers` with a real exported selector and a real (tiny) generator: every method's seconds, the
    selection's, and the share of questions where the timed selection is the evaluated set."""
    from purecover.models.generation import make_generator
    from purecover.models.loading import load_causal_lm, load_tokenizer
    from purecover.models.selector import Selector
    from purecover.utils.io import read_jsonl
    from tests.models.conftest import exported_run, tiny_model_dir

    recipe = exported_run(tmp_path_factory, sample_dir)
    selector = Selector.from_pretrained(recipe.run_path / "selector", device="cpu", dtype="float32", batch_size=1)
    tiny = tiny_model_dir(tmp_path_factory, sample_dir)
    tok = load_tokenizer(str(tiny))
    gen = make_generator("hf", model=load_causal_lm(str(tiny), dtype="float32", device="cpu"), tokenizer=tok,
                         batch_size=1)
    cands = {rec["qid"]: rec for _, rec in read_jsonl(recipe.run_path / "candidates.jsonl")}
    q1, q2 = sorted(cands)[:2]
    own = {q: selector.select(cands[q]["question"], cands[q]["docs"]).indices[:int(bench.OWN_SET_K)] for q in (q1, q2)}
    other = [i for i in range(len(cands[q2]["docs"])) if i not in own[q2]][:1]
    chosen = {f"student@{bench.OWN_SET_K}": {q1: own[q1], q2: other},  # q2's evaluated set is not the selector's
              "retrieval@5": {q: list(range(min(5, len(cands[q]["docs"])))) for q in (q1, q2)}}
    out = bench.time_answers(gen, tok, cands, chosen, [q1, q2], "hotpotqa", 4, selector)
    assert out["questions"] == 2 and out["same_sets"] == 0.5
    assert all(out[k] > 0 for k in ("select", f"student@{bench.OWN_SET_K}", "retrieval@5"))
    without = bench.time_answers(gen, tok, cands, chosen, [q1], "hotpotqa", 4)
    assert "select" not in without and "same_sets" not in without and without["retrieval@5"] > 0


def test_a_stage_that_skipped_itself_reports_the_time_of_the_run_that_made_it(tmp_path):
    """A rerun (to time again, say) finds its stages complete; their seconds are the spans their run records hold,
    not the skip's, and a stage that ran in this call (or resumed in it) is timed by the call."""
    from datetime import datetime, timezone

    from benchlib.readout_runs import reused_span

    record = tmp_path / "train.run.json"
    record.write_text(json.dumps({"stage": "train", "started": "2026-12-07T01:05:13+00:00",
                                  "finished": "2026-12-07T01:17:11+00:00"}))
    later = datetime(2026, 12, 7, 2, 0, tzinfo=timezone.utc).timestamp()
    assert reused_span(record, later) == 718.0  # 11 min 58 s, as recorded
    earlier = datetime(2026, 12, 7, 1, 5, 13, 500000, tzinfo=timezone.utc).timestamp()
    assert reused_span(record, earlier) is None  # it began in this call: the call's own time stands
    assert reused_span(tmp_path / "export.run.json", later) is None  # no record
    record.write_text(json.dumps({"stage": "train", "started": "2026-12-07T01:05:13+00:00"}))  # never finished
    assert reused_span(record, later) is None


def test_each_seed_keeps_the_machine_it_was_measured_on_when_runs_are_merged(tmp_path):
    """Seeds run in different sessions may run on different CPUs: the merged file's rows say which, per seed, not
    the last file's machine for every row."""
    amd = {"processor": "x86_64", "cpus": 2, "cpu_model": "AMD EPYC"}
    intel = {"processor": "x86_64", "cpus": 2, "cpu_model": "Intel(R) Xeon(R) Processor"}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"machine": amd, "date": "2026-12-06", "datasets": {"hotpotqa": {"0": _seed(0.3, 0)}}}))
    b.write_text(json.dumps({"machine": intel, "date": "2026-12-07", "datasets": {"hotpotqa": {"1": _seed(0.2, 1)},
                                                                                  "musique": {"0": _seed(0.1, 0)}}}))
    merged = bench.merge([a, b])
    assert merged["datasets"]["hotpotqa"]["0"]["machine"] == amd and merged["datasets"]["hotpotqa"]["1"]["date"] == \
        "2026-12-07"
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(merged)}
    figure = "answers.hotpotqa.student_em_minus_best_retrieval"
    assert rows[(figure, None, 0)]["machine"] == "2 cores, AMD EPYC"
    assert rows[(figure, None, 1)]["machine"] == "2 cores, Intel(R) Xeon(R) Processor"
    assert rows[(figure + "_worst", None, None)]["machine"] == "2 cores, AMD EPYC; 2 cores, Intel(R) Xeon(R) Processor"
    assert rows[("answers.musique.student_em_minus_best_retrieval", None, 0)]["machine"] == \
        "2 cores, Intel(R) Xeon(R) Processor"  # musique's seed 0, not hotpotqa's
    again = tmp_path / "merged.json"
    again.write_text(json.dumps(merged | {"machine": intel}))
    assert bench.merge([again])["datasets"]["hotpotqa"]["0"]["machine"] == amd  # a seed's own record wins
