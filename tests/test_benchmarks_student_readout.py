"""benchmarks/student_readout.py's own logic, without training: the split it scores is the train stage's at each
seed and never meets the training questions (on the real sample files, every seed), the orders it scores with a
real selector's output shape, merging runs of different sessions, and the targets its rows carry."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.test_benchmarks_summary import _load

bench = _load("student_readout")


@pytest.mark.samples
@pytest.mark.parametrize("dataset", ["hotpotqa", "2wiki"])
def test_test_questions_are_never_training_questions_at_any_seed(sample_dir, dataset):
    """The union of the dataset's files, split as the train stage splits it at seeds 0-2: no qid in two parts, at
    least 100 test questions, and the test split moves with the seed (each seed's own split)."""
    from purecover.train.data import split_examples

    qids = []
    for name in bench.FILES[dataset]:
        records = json.loads((sample_dir / name).read_text(encoding="utf-8"))
        qids += [r["_id"] for r in records]
    assert len(qids) == len(set(qids)), "a question is in two files"
    tests = []
    for seed in (0, 1, 2):
        split = bench.split_for_seed(qids, seed, 0.4, 0.5)
        items = [SimpleNamespace(qid=q) for q in qids]
        train, calib, test = (sorted(x.qid for x in part) for part in split_examples(items, 0.4, seed, 0.5))
        assert sorted(q for q, s in split.items() if s == "test") == test  # the benchmark's split is the stage's
        assert not set(train) & set(test) and not set(train) & set(calib) and not set(calib) & set(test)
        assert len(test) >= 100 and len(train) + len(calib) + len(test) == len(qids)
        tests.append(set(test))
    assert tests[0] != tests[1] != tests[2]


def test_check_disjoint_compares_with_the_train_summary():
    split = {"a": "train", "b": "calib", "c": "test", "d": "test"}
    bench.check_disjoint(split, {"train_questions": 1, "calib_questions": 1, "test_questions": 2}, "run")
    with pytest.raises(RuntimeError, match="is not the train stage's"):
        bench.check_disjoint(split, {"train_questions": 2, "calib_questions": 1, "test_questions": 1}, "run")


class _Fixed:
    """A selector stand-in whose score of a passage is fixed by its doc id (it reads content, not position)."""

    def __init__(self, score):
        self.score = score

    def select(self, question, docs):
        logits = [self.score[d["doc_id"]] for d in docs]
        order = sorted(range(len(docs)), key=lambda k: (-logits[k], k))
        return SimpleNamespace(indices=[k for k in order if logits[k] > 0], logits=logits)


def test_score_orders_maps_each_order_back_to_the_passages():
    cands = {"q": {"qid": "q", "question": "?", "docs": [{"doc_id": f"d{k}"} for k in range(6)],
                   "gold_doc_ids": ["d4", "d5"]}}
    reader = _Fixed({"d0": -1, "d1": -2, "d2": -3, "d3": -4, "d4": 2, "d5": 1})
    out = bench.score_orders(reader, cands, ["q"], seed=0)
    for order in bench.ORDERS:  # a content reader scores the same in every order
        assert out[order]["f1"] == 1.0 and out[order]["auc"] == 1.0 and out[order]["coverage@2"] == 1.0
        assert out[order]["coverage@2_chance"] == pytest.approx(2 * 2 / (6 * 2), abs=1e-4)
        assert out[order]["retrieval_top_s_f1"] == 0.0  # top-2 of retrieval: d0, d1


def _student(f1, auc=0.8, calib=None):
    orders = {o: {"f1": f1, "auc": auc, "coverage@2": 0.7, "coverage@2_chance": 0.2, "mean_size": 2.1}
              for o in bench.ORDERS}
    return {"orders": orders, "train": {"seconds": 100.0, "peak_rss_mb": 900.0}, "steps": 380,
            **({"calib_subset_f1": calib} if calib is not None else {})}


def _slow(student):
    return {**student, "train": {"seconds": 250.0, "peak_rss_mb": 950.0}}


def _baseline(top2):
    return {"retrieval_top2_f1": top2, "retrieval_top5_f1": 0.5, "biencoder_top2_f1": 0.6,
            "icr": {"top2_f1": 0.55, "layers": [18]}, "icr_fused": {"top2_f1": 0.66, "weight": 1.0}}


def test_rows_carry_the_issue_targets_and_merge_joins_seeds(tmp_path):
    a = {"machine": {"cpus": 2}, "command": ["student_readout.py", "--seeds", "0"], "datasets": {"hotpotqa": {
        "students": {"passage": {"0": _student(0.70, calib=0.74)}, "identifier": {"0": _student(0.3, 0.5)},
                     "passage_head": {"0": _student(0.9, calib=0.71)}},
        "baselines": {"0": _baseline(0.65)}, "timing": {"ratio": 1.05, "passage_seconds_per_question": 0.21,
                                                        "identifier_seconds_per_question": 0.2, "questions": 40},
        "overfit": {"passage": {"train_auc_retrieval": 1.0, "train_auc_reversed": 0.5}},
        "overfit_reshuffled": {"passage": {"train_auc_retrieval": 1.0, "train_auc_reversed": 0.9}}}}}
    b = {"machine": {"cpus": 2}, "command": ["student_readout.py", "--seeds", "1"],
         "datasets": {"hotpotqa": {"students": {"passage": {"1": _slow(_student(0.60))}},
                                   "baselines": {"1": _baseline(0.62)}}}}
    for name, data in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    merged = bench.merge([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert set(merged["datasets"]["hotpotqa"]["students"]["passage"]) == {"0", "1"}
    assert merged["merged_from"] == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert merged["commands"] == [["student_readout.py", "--seeds", "0"], ["student_readout.py", "--seeds", "1"]]
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    again = bench.merge([str(tmp_path / "merged.json"), str(tmp_path / "a.json")])  # merged again: no repeats
    assert again["merged_from"] == merged["merged_from"] and again["commands"] == merged["commands"]
    rows = bench.rows(merged)
    f1 = [r for r in rows if r["figure"] == "student_readout.hotpotqa.passage.support_f1"
          and r.get("variant") == "retrieval order"]
    assert [(r["seed"], r["met"]) for r in f1] == [(0, True), (1, False)]  # above the larger top-2, 0.65
    worst = [r for r in rows if r["figure"] == "student_readout.hotpotqa.passage.support_f1_worst"
             and r.get("variant") == "retrieval order"]
    assert worst[0]["value"] == 0.6 and worst[0]["met"] is False
    by = {r["figure"]: r for r in rows if ".hotpotqa.passage." in r["figure"] and "seed" not in r}
    assert by["student_readout.hotpotqa.passage.train_seconds_worst"]["value"] == 250.0  # a cost: the slower seed
    assert by["student_readout.hotpotqa.passage.train_peak_rss_worst"]["value"] == 950.0
    assert "student_readout.hotpotqa.passage.mean_size_worst" not in by  # a size has no worse direction
    best = next(r for r in rows if r["figure"].endswith("support_f1_mean_over_best_baseline"))
    assert best["value"] == pytest.approx(0.65) and best["target"] == "> 0.635"  # mean of max(0.65,..), max(0.62,..)
    ratio = next(r for r in rows if r["figure"] == "student_readout.hotpotqa.selection_time_ratio")
    assert ratio["met"] is True and ratio["target"] == "<= 1.2"
    rev = next(r for r in rows if r["figure"] == "student_readout.hotpotqa.passage.overfit_reshuffled_train_auc"
               and r["variant"] == "reversed")
    assert rev["met"] is True
    fixed = next(r for r in rows if r["figure"] == "student_readout.hotpotqa.passage.overfit_train_auc"
                 and r["variant"] == "reversed")
    assert fixed["target"] is None and fixed["value"] == 0.5  # in a fixed order any readout may learn the slots
    ident = [r for r in rows if r["figure"] == "student_readout.hotpotqa.identifier.support_f1"]
    assert all(r["target"] is None for r in ident)  # the targets are the passage readout's
    # the head against the token, on calibration questions only (its better test F1 plays no part)
    choice = next(r for r in rows if r["figure"] == "student_readout.hotpotqa.passage_score_head_minus_token")
    assert choice["value"] == pytest.approx(-0.03) and choice["variant"] == "calibration questions"
    assert "{0: -0.03}" in choice["note"]
    assert all(r["target"] is None for r in rows if ".passage_head." in r["figure"])


def test_merged_rows_name_the_machine_each_seed_was_measured_on(tmp_path):
    """Seeds run on different CPUs keep their own machine through a merge (not the last file's)."""
    amd, intel = {"cpus": 2, "cpu_model": "AMD EPYC"}, {"cpus": 2, "cpu_model": "Intel Xeon"}
    a = {"machine": amd, "datasets": {"hotpotqa": {"students": {"passage": {"0": _student(0.70)}},
                                                   "baselines": {"0": _baseline(0.65)},
                                                   "timing": {"ratio": 1.05, "passage_seconds_per_question": 0.21,
                                                              "identifier_seconds_per_question": 0.2,
                                                              "questions": 40}}}}
    b = {"machine": intel, "datasets": {"hotpotqa": {"students": {"passage": {"1": _student(0.60)}},
                                                     "baselines": {"1": _baseline(0.62)}}}}
    for name, data in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    merged = bench.merge([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert merged["machine"] == intel  # the file's own: the last one
    rows = bench.rows(merged)
    at = {(r["figure"], r.get("seed")): r["machine"] for r in rows}
    assert at[("student_readout.hotpotqa.passage.support_f1", 0)] == "2 cores, AMD EPYC"
    assert at[("student_readout.hotpotqa.passage.support_f1", 1)] == "2 cores, Intel Xeon"
    assert at[("student_readout.hotpotqa.passage.train_seconds_worst", None)] == "2 cores, AMD EPYC; 2 cores, Intel Xeon"
    assert at[("student_readout.hotpotqa.baseline.retrieval_top2_f1", 0)] == "2 cores, AMD EPYC"
    assert at[("student_readout.hotpotqa.selection_time_ratio", None)] == "2 cores, AMD EPYC"
    (tmp_path / "merged.json").write_text(json.dumps(merged))  # merged again: each seed keeps its machine
    again = bench.rows(bench.merge([str(tmp_path / "merged.json")]))
    assert {(r["figure"], r.get("seed")): r["machine"] for r in again} == at
