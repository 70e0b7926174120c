"""benchmarks/real_models.py's own logic, without models: scoring against gold passages, the candidate orders of
the order check, the split a student is scored on (the train stage's, at the student's seed), the ranking AUC and
chance Coverage@2, merging seeds run in different sessions, and the targets its rows carry."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_benchmarks_summary import _load

real = _load("real_models")


def _cand(qid: str, gold: list[int], n: int = 6) -> dict:
    return {"qid": qid, "question": "q", "docs": [{"doc_id": f"{qid}-{k}"} for k in range(n)],
            "gold_doc_ids": [f"{qid}-{k}" for k in gold]}


def test_set_figures_score_against_gold_and_retrieval_of_the_same_size() -> None:
    cands = {"a": _cand("a", [0, 3]), "b": _cand("b", [4])}
    chosen = {"a": ["a-3", "a-0"], "b": ["b-1", "b-4"]}
    fig = real.set_figures(chosen, cands, ["a", "b"])
    assert fig["questions"] == 2 and fig["mean_size"] == 2.0
    assert fig["precision"] == pytest.approx(0.75) and fig["recall"] == pytest.approx(1.0)
    assert fig["f1"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)
    # retrieval top-|S| with |S| = 2 per question: a -> {a-0, a-1} (F1 0.5), b -> {b-0, b-1} (F1 0)
    assert fig["retrieval_top_s_f1"] == pytest.approx(0.25) and fig["retrieval_top2_f1"] == pytest.approx(0.25)
    assert fig["retrieval_top5_f1"] == pytest.approx((2 * (2 / 5) / (2 / 5 + 1) + 2 * (1 / 5) / (1 / 5 + 1)) / 2,
                                                     abs=1e-4)


def test_orders_are_permutations_and_reversed_is_reversed() -> None:
    assert real.shown("retrieval", "q", 5, 0) == [0, 1, 2, 3, 4]
    assert real.shown("reversed", "q", 5, 0) == [4, 3, 2, 1, 0]
    shuffled = real.shown("shuffled", "q", 10, 0)
    assert sorted(shuffled) == list(range(10)) and shuffled != list(range(10))
    assert real.shown("shuffled", "q", 10, 0) == shuffled  # seeded


def test_coverage_and_purity_of_a_ranking() -> None:
    assert real.coverage_purity(["x", "g1", "y", "g2"], {"g1", "g2"}, 2) == (0.5, 0.5)
    assert real.coverage_purity(["g1", "g2"], {"g1", "g2"}, 5) == (1.0, 1.0)


@pytest.mark.parametrize(("n", "g", "missing", "k"), [(1, 1, 0, 2), (2, 1, 1, 2), (4, 2, 0, 2), (5, 2, 1, 2),
                                                      (6, 1, 2, 2), (6, 3, 0, 5), (5, 0, 2, 2), (3, 3, 0, 2)])
def test_chance_coverage_is_the_mean_coverage_over_every_order(n: int, g: int, missing: int, k: int) -> None:
    """`missing` gold passages were not retrieved: Coverage@k still counts them in its denominator."""
    ids = [f"g{i}" for i in range(g)] + [f"x{i}" for i in range(n - g)]
    gold = {f"g{i}" for i in range(g + missing)}
    covs = [real.coverage_purity(list(order), gold, k)[0] for order in itertools.permutations(ids)]
    assert real.chance_coverage(n, g, len(gold), k) == pytest.approx(sum(covs) / len(covs))


def test_split_for_seed_is_the_train_stages_split_on_the_hotpotqa_sample() -> None:
    """Over the real sample's qids at seeds 0, 1, 2: the benchmark's split is `split_examples`' at that seed, and
    the seed-0 split the benchmark once scored every student on would put training questions in its test split."""
    from purecover.data.samples import SAMPLE_FILES, sample_data_dir
    from purecover.train.data import split_examples

    samples = sample_data_dir()
    if samples is None:
        pytest.skip("real sample data not found (../shared/data or PURECOVER_SAMPLE_DATA)")
    qids = [q["_id"] for q in json.loads((samples / SAMPLE_FILES["hotpotqa"]).read_text())]
    items = [SimpleNamespace(qid=q) for q in qids]
    for seed in (0, 1, 2):
        split = real.split_for_seed(qids, seed)
        train, calib, test = split_examples(items, real.EVAL_FRACTION, seed, real.CALIBRATION_SHARE)
        assert list(split) == qids
        for name, part in (("train", train), ("calib", calib), ("test", test)):
            assert {q for q, s in split.items() if s == name} == {e.qid for e in part}
        if seed:
            seed0_test = {q for q, s in real.split_for_seed(qids, 0).items() if s == "test"}
            assert seed0_test & {e.qid for e in train}  # why a student needs the split of its own seed
    assert real.splits_of(qids) == real.split_for_seed(qids, real.LABEL_SPLIT_SEED)


def _label(qid: str, selected: list[int], n: int, status: str = "ok") -> dict:
    from purecover.records import LabelRecord

    if status == "error":
        return LabelRecord.failed(qid, "RuntimeError: x", bias_key=None, teacher={}).to_json_dict()
    return LabelRecord(qid=qid, selected=selected, selected_doc_ids=[f"{qid}-{k}" for k in selected],
                       gains=[0.5] * len(selected), objective=0.5, steps=["s"], answer="a", e=[1.0], W=[[0.5]] * n,
                       bias_key=None, status=status, reason=None, teacher={}).to_json_dict()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_student_part_scores_exactly_the_test_questions_its_train_stage_held_out(tmp_path: Path, monkeypatch,
                                                                                 seed: int) -> None:
    """student_part with the model faked: the train stage (faked as the real one splits: `split_examples` of the
    labelled questions at the recipe's seed) records what it trains on; every order scores exactly that split's
    test questions with gold passages, none of them a training question, through the exported `Selector`. The
    fake selector scores gold passages 1 and the others 0: ranking AUC 1, Coverage@2 1 against chance
    2 · 2 / (6 · 2). The recipe is the paper-form student (`PAPER_FORM_STUDENT`) whatever the real_cpu recipe
    trains, with the caller's settings after it."""
    import purecover.models.selector as selector_mod
    import purecover.train.export_stage as export_mod
    import purecover.train.train_stage as train_run
    from purecover.models.selection import select_from_scores
    from purecover.train.data import read_labelled_questions, split_examples

    samples = tmp_path / "samples"  # recipe_for only names the sample file: the questions are below
    samples.mkdir()
    (samples / "hotpotqa_dev_sample.json").write_text("[]")
    monkeypatch.setenv("PURECOVER_SAMPLE_DATA", str(samples))
    work = tmp_path / "work"
    labelled = work / "hotpotqa" / "teacher-oracle_proxy"
    labelled.mkdir(parents=True)
    n = 6
    cands = [{"qid": f"q{i:03d}", "question": f"q{i:03d}", "answers": ["a"],
              "docs": [{"doc_id": f"q{i:03d}-{k}", "title": "t", "text": "x"} for k in range(n)],
              "gold_doc_ids": [f"q{i:03d}-0", f"q{i:03d}-3"] if i % 17 else []} for i in range(90)]
    labels = [_label(c["qid"], [0, 3], n, "error" if i == 5 else "ok") for i, c in enumerate(cands)]
    for name, lines in (("candidates.jsonl", cands), ("labels.jsonl", labels)):
        (labelled / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    gold = {c["qid"]: set(c["gold_doc_ids"]) for c in cands}
    trained: set[str] = set()
    scored: list[list[str]] = []
    stages: list[str] = []

    def train_stage(recipe, show_progress):
        assert recipe.student.readout == "identifier" and recipe.student.lm_weight == 1.0  # PAPER_FORM_STUDENT
        assert recipe.student.bce_weight == 0.0 and recipe.student.training["max_steps"] == 150
        assert recipe.student.k_max == 4  # the caller's settings come after the pinned ones
        stages.append("train")
        run = recipe.run_path
        questions, _ = read_labelled_questions(run / "candidates.jsonl", run / "labels.jsonl")
        parts = split_examples(questions, recipe.student.eval_fraction, recipe.seed, recipe.student.calibration_share)
        trained.update(q.qid for q in parts[0])
        summary = {"global_step": 1, "train_examples": len(parts[0]), "tau3": 0.5,
                   **{f"{k}_questions": len(p) for k, p in zip(("train", "calib", "test"), parts)}}
        return SimpleNamespace(to_json_dict=lambda: summary)

    class FakeSelector:
        config = SimpleNamespace(readout="identifier")

        @classmethod
        def from_pretrained(cls, path, **kwargs):
            assert Path(path) == work / "hotpotqa" / f"student-oracle_proxy-seed{seed}" / "selector"
            assert stages == ["train", "export"]
            return cls()

        def select_batch(self, questions, docs):
            scored.append(list(questions))
            out = []
            for qid, shown in zip(questions, docs):
                s = [1.0 if d["doc_id"] in gold[qid] else 0.0 for d in shown]
                out.append(SimpleNamespace(logits=s, indices=select_from_scores(s, 0.5, 1, 4)))
            return out

        def close(self):
            pass

    monkeypatch.setattr(train_run, "run_train_stage", train_stage)
    monkeypatch.setattr(export_mod, "run_export_stage", lambda recipe: stages.append("export"))
    monkeypatch.setattr(selector_mod, "Selector", FakeSelector)
    # the bi-encoder is looked up where student_part is defined (benchlib/real_runs.py)
    monkeypatch.setattr(sys.modules[real.student_part.__module__], "biencoder_figures", lambda *a, **k: {})

    out = real.student_part("hotpotqa", "oracle_proxy", seed, work, ["student.k_max=4"])
    questions, _ = read_labelled_questions(labelled / "candidates.jsonl", labelled / "labels.jsonl")
    test = sorted(q.qid for q in split_examples(questions, 0.4, seed, 0.5)[2] if gold[q.qid])
    assert test and trained
    assert scored == [test] * len(real.ORDERS)  # each order: exactly the held-out test questions with gold
    assert not set(test) & trained
    assert out["split_seed"] == seed and out["questions"]["train"] == len(trained)
    assert out["readout"] == "identifier" and out["settings"] == [*real.PAPER_FORM_STUDENT, "student.k_max=4"]
    run = work / "hotpotqa" / f"student-oracle_proxy-seed{seed}"
    assert [r["qid"] for r in real.read_jsonl(run / "student_test_selections.jsonl")] == test
    fig = out["orders"]["retrieval"]
    assert fig["auc"] == 1.0 and fig["auc_chance"] == 0.5 and fig["auc_questions"] == len(test)
    assert fig["coverage@2"] == 1.0 and fig["coverage@2_chance"] == pytest.approx(1 / 3, abs=1e-4)


def test_a_student_needs_a_source_that_labels_every_question(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="labels only some questions"):
        real.student_part("hotpotqa", "smollm2_attention", 1, tmp_path, [])


def _student(f1: float, top_s: float, top2: float, top5: float) -> dict:
    fig = {"f1": f1, "mean_size": 2.0, "retrieval_top_s_f1": top_s, "retrieval_top2_f1": top2,
           "retrieval_top5_f1": top5, "auc": 0.61, "auc_chance": 0.5, "coverage@2": 0.4, "coverage@2_chance": 0.18}
    return {"orders": {o: dict(fig) for o in real.ORDERS}}


def test_merge_keeps_every_seed_and_rows_carry_the_issue_targets(tmp_path: Path) -> None:
    teacher = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"teacher": {"gemma_attention": {
        "test": {"f1": 0.72, "precision": 0.9, "mean_size": 1.5, "fallback_rate": 0.0, "retrieval_top2_f1": 0.6,
                 "questions": 50}, "seconds_per_question": 9.0}}}}}
    s0 = {"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"student": {"oracle_proxy": {
        "0": _student(0.70, 0.62, 0.64, 0.50)}}}}}
    s1 = {"machine": {"cpus": 2}, "command": ["real_models.py", "--seeds", "1"], "datasets": {"hotpotqa": {"student": {"oracle_proxy": {
        "1": _student(0.60, 0.62, 0.64, 0.50)}}}}}
    paths = []
    for i, part in enumerate((teacher, s0, s1)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(part))
    merged = real.merge(paths)
    assert merged["merged_from"] == [str(p) for p in paths]
    assert merged["commands"] == [["real_models.py", "--seeds", "1"]]
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    (tmp_path / "later.json").write_text(json.dumps({**s1, "command": ["real_models.py", "--seeds", "2"]}))
    again = real.merge([tmp_path / "merged.json", tmp_path / "later.json"])  # a merged file merged again
    assert again["merged_from"] == [*map(str, paths), str(tmp_path / "later.json")]
    assert again["commands"] == [["real_models.py", "--seeds", "1"], ["real_models.py", "--seeds", "2"]]
    res = merged["datasets"]["hotpotqa"]
    assert set(res["student"]["oracle_proxy"]) == {"0", "1"} and "gemma_attention" in res["teacher"]
    rows = {(r["figure"], r.get("seed")): r for r in real.rows(merged)}
    assert rows[("real_models.label_f1.gemma_attention", None)]["target"] == ">= 0.7"
    assert rows[("real_models.label_f1.gemma_attention", None)]["met"] is True
    seed0 = rows[("real_models.student_f1.oracle_proxy.retrieval", 0)]
    assert seed0["target"] == "> 0.62" and seed0["met"] is True
    assert "ranking AUC 0.61 (chance 0.5), Coverage@2 0.4 (chance 0.18)" in seed0["note"]
    assert rows[("real_models.student_f1.oracle_proxy.reversed", 1)]["met"] is False
    mean = rows[("real_models.student_f1.oracle_proxy.retrieval_mean", None)]
    assert mean["value"] == pytest.approx(0.65) and mean["target"] == "> 0.64" and mean["met"] is True
    assert rows[("real_models.student_f1.oracle_proxy.shuffled", 0)]["target"] is None  # reported, no claim


def test_headline_is_the_documented_command_and_its_minutes_come_from_the_manifests(tmp_path: Path) -> None:
    """The headline part runs `purecover pipeline` on the real_cpu recipe as written (only the data path, every
    real sample file of the dataset as one list, and the run directory set) and sums the stages' manifest times;
    the row claims at most 90 minutes."""
    import datetime as dt

    samples = pytest.importorskip("purecover.data.samples")
    if samples.sample_data_dir() is None:
        pytest.skip("real sample data not found (../shared/data or PURECOVER_SAMPLE_DATA)")
    command = real.headline_command("hotpotqa", tmp_path / "run")
    assert command[1:4] == ["-m", "purecover", "pipeline"] and command[4].endswith("real_cpu/hotpotqa.yaml")
    files = ", ".join(str(samples.sample_data_dir() / f) for f in (
        "hotpotqa_dev_sample.json", "hotpotqa_dev_extra.json", "hotpotqa_train_sample.json"))
    assert command[5:] == ["--set", f"data.path=[{files}]", "--set", "data.sample=null",
                           "--set", f"run_dir={tmp_path / 'run'}", "-q"]
    run = tmp_path / "run"
    run.mkdir()
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for i, stage in enumerate(real.HEADLINE_STAGES):
        summary = {"status": "complete", "questions": 252, "layers": {"read": [18, 23]}} if stage == "label" else {
            "status": "complete", "global_step": 150, "test_subset_f1": 0.2}
        (run / f"{stage}.run.json").write_text(json.dumps({
            "started": (t0 + dt.timedelta(minutes=10 * i)).isoformat(timespec="seconds"),
            "finished": (t0 + dt.timedelta(minutes=10 * i + 5)).isoformat(timespec="seconds"), "summary": summary}))
    fig = real.headline_figures(run)
    assert fig["total_seconds"] == 7 * 300 and fig["stage_seconds"]["label"] == 300
    assert fig["questions"] == 252 and fig["label_layers"] == [18, 23] and fig["train_steps"] == 150
    rows = real.rows({"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"headline": fig}}})
    (row,) = [r for r in rows if r["figure"] == "real_models.headline_minutes"]
    assert row["value"] == 35.0 and row["target"] == "<= 90" and row["met"] is True
    (run / "train.run.json").write_text(json.dumps({"started": t0.isoformat(), "finished": t0.isoformat(),
                                                    "summary": {"status": "running"}}))
    with pytest.raises(RuntimeError, match="stage train is not complete"):
        real.headline_figures(run)


def test_the_headline_claims_come_from_the_runs_report(tmp_path: Path) -> None:
    """The student's own set (its largest budget) against retrieval: support F1 from the prediction files against
    top-2's, EM against the better of top-2 and top-5 (the smaller K on a tie), passages against that K."""
    run = tmp_path / "run"
    (run / "eval" / "predictions").mkdir(parents=True)
    cands = [{"qid": "a", "gold_doc_ids": ["d1", "d2"]}, {"qid": "b", "gold_doc_ids": ["d3", "d4"]}]
    (run / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cands))
    sets = {"student@10": {"a": ["d1", "d2"], "b": ["d3"]}, "retrieval@2": {"a": ["d1", "x"], "b": ["y", "z"]}}
    for name, chosen in sets.items():
        (run / "eval" / "predictions" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"qid": q, "doc_ids": ids}) + "\n" for q, ids in chosen.items()))
    results = {"student": {"2": {"em": 0.1}, "10": {"em": 0.4, "mean_k": 1.5, "prompt_tokens": 300, "n": 2}},
               "retrieval": {"2": {"em": 0.4, "prompt_tokens": 320}, "5": {"em": 0.4, "prompt_tokens": 800}}}
    (run / "eval" / "metrics.json").write_text(json.dumps({"results": results}))
    claims = real.headline_claims(run)
    assert claims["own_budget"] == 10 and claims["best_retrieval_k"] == 2  # a tie: the smaller K
    assert claims["student_support_f1"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)  # b: P 1, R 1/2
    assert claims["retrieval_top2_support_f1"] == pytest.approx(0.25, abs=1e-4)  # a: P 1/2, R 1/2; b: 0
    rows = real.rows({"machine": {"cpus": 2}, "datasets": {"hotpotqa": {"headline": {
        "total_seconds": 3600, "stage_seconds": {"label": 3600}, "questions": 635, "claims": claims}}}})
    got = {r["figure"]: r for r in rows}
    assert got["real_models.headline_student_minus_retrieval_top2_support_f1"]["met"] is True
    em = got["real_models.headline_student_em_minus_best_retrieval"]
    assert em["value"] == 0.0 and em["target"] == ">= 0" and em["met"] is True
    passages = got["real_models.headline_student_passages"]
    assert passages["target"] == "< 2" and passages["met"] is True
    results["retrieval"].pop("5")
    (run / "eval" / "metrics.json").write_text(json.dumps({"results": results}))
    assert real.headline_claims(run) is None  # no top-5 to compare with


def test_student_rows_of_results_measured_before_the_ranking_auc_keep_their_note() -> None:
    """benchmarks/results/real_models.json was written before issue 41: its rows still derive from it."""
    assert real.ranking_note({"first_slots_share": 0.0}) == "first-slots share 0.0"
    assert real.ranking_note({"auc": 0.7, "auc_chance": 0.5, "coverage@2": 0.5, "coverage@2_chance": 0.2}) == \
        "ranking AUC 0.7 (chance 0.5), Coverage@2 0.5 (chance 0.2)"
