"""benchmarks/own_steps.py's own logic and its helpers' (own_steps_parts.py), without a real teacher: the draws of
test questions, the reply and label figures from label records, the chosen reply format and selection settings
(re-solved on real tiny label runs), and the rows with their targets."""

from __future__ import annotations

import pytest

from tests.test_benchmarks_summary import _load

bench = _load("own_steps")
parts = _load("own_steps_parts")  # its helpers


def test_draws_are_seeded_subsets_of_the_test_questions():
    test = [f"q{i}" for i in range(40)]
    a, b = parts.draw_questions(test, 10, 0), parts.draw_questions(list(reversed(test)), 10, 0)
    assert a == b and len(a) == 10 and set(a) <= set(test)  # the order given does not matter
    assert parts.draw_questions(test, 10, 1) != a
    assert parts.draw_questions(test[:5], 10, 0) == sorted(test[:5])  # fewer than asked: all of them


def _cands():
    docs = [{"doc_id": f"d{k}"} for k in range(5)]
    return {"q1": {"docs": docs, "gold_doc_ids": ["d1", "d3"]}, "q2": {"docs": docs, "gold_doc_ids": ["d0", "d1"]}}


def test_label_time_is_reported_only_for_a_stage_that_ran_whole(tmp_path):
    """A label stage timed from its manifest: when it ran in one piece (kept for later reads), not when it resumed
    an earlier process's shards (its manifest times only the last part)."""
    import json

    def manifest(run, status="complete", seconds=240):
        (run / "label.run.json").write_text(json.dumps({"started": "2026-12-07T07:00:00+00:00", "finished":
                                                        f"2026-12-07T07:{seconds // 60:02d}:00+00:00",
                                                        "summary": {"status": status}}))

    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    for run in (fresh, resumed):
        (run / "label_shards").mkdir(parents=True)
        (run / "label_shards" / "replies.0-of-1.jsonl").write_text("")
    assert parts.label_state(fresh) == "fresh"
    manifest(fresh)
    assert parts.label_timing(fresh, "fresh", 24) == (10.0, False)
    assert parts.label_state(fresh) == "done"
    manifest(fresh, seconds=60)  # a later read keeps what was measured when the stage ran
    assert parts.label_timing(fresh, "done", 24) == (10.0, False)
    (resumed / "label_shards" / "replies.0-of-1.jsonl").write_text('{"qid": "q1", "reply": "x"}\n')
    manifest(resumed, status="running")
    assert parts.label_state(resumed) == "resumed"
    manifest(resumed)
    assert parts.label_timing(resumed, "resumed", 24) == (None, True)
    assert parts.label_timing(resumed, "done", 24) == (None, True)


def test_repeating_counts_the_records_whose_steps_repeat_one():
    labels = {"a": {"steps": ["One fact.", "one  FACT", "Two."]}, "b": {"steps": ["One.", "Two."]}, "c": {}}
    assert parts.repeating(labels, ["a", "b", "c"]) == 1 and parts.repeating(labels, ["b"]) == 0


def test_reply_and_label_figures_from_records():
    labels = {"q1": {"selected": [1, 3], "status": "ok"},
              "q2": {"selected": [0], "status": "fallback", "reply_issue": "no_steps"},
              "q3": {"selected": [2], "status": "fallback", "reply_issue": "unclosed"}}
    fig = parts.reply_figures(labels, ["q1", "q2", "q3"])
    assert fig["usable_rate"] == pytest.approx(2 / 3, abs=1e-4)  # unclosed replies keep their own steps
    assert fig["issues"] == {"no_steps": 1, "none": 1, "unclosed": 1}
    lab = parts.label_figures(labels, _cands(), ["q1", "q2"])
    assert lab["f1"] == pytest.approx((1.0 + 2 / 3) / 2, abs=1e-4)  # q1 exact; q2 P 1, R 1/2
    assert lab["retrieval_top2_f1"] == pytest.approx((0.5 + 1.0) / 2)
    assert lab["fallback_rate"] == 0.5


def _draw(own: float, top2: float, usable: float, seconds: float = 9.0, variant: str = "example") -> dict:
    fig = {"f1": own, "retrieval_top2_f1": top2}
    return {"variant": variant, "own_steps": fig, "oracle_steps": {"f1": own + 0.1, "retrieval_top2_f1": top2},
            "own_steps_replies": {"usable_rate": usable, "issues": {}},
            "sources": {"own_steps": {"seconds_per_question": seconds, "questions": 24}}}


def test_each_draw_and_variant_labels_in_its_own_run_directories(tmp_path):
    """Draws are labelled apart (a finished label stage refuses other questions in its directory) and own-step
    sources apart per reply format; oracle steps do not depend on the format."""
    a = bench.label_dirs(tmp_path, "hotpotqa", "qwen", "prefix", 0)
    b = bench.label_dirs(tmp_path, "hotpotqa", "qwen", "prefix_bf16", 1)
    assert set(a) == {"own_steps", "oracle_steps", "own_steps_lancer"}
    assert len(set(a.values()) | set(b.values())) == 6
    assert a["oracle_steps"].parent == b["oracle_steps"].parent
    assert a["own_steps"].parent != b["own_steps"].parent and a["own_steps"].name == "draw0"


def test_results_from_one_run_over_the_draws_union_read_per_draw():
    """Results written before the directories were per draw kept the variant and the sources' times once; rows
    and merges read them per draw, each draw keeping only the sources that labelled it."""
    old = {"variant": "prefix", "questions_per_draw": 24, "layers": "full_attention",
           "sources": {"own_steps": {"seconds_per_question": 22.0}, "own_steps_lancer": {"seconds_per_question": 90}},
           "draws": {"0": {k: v for k, v in _draw(0.5, 0.7, 1.0).items() if k not in ("variant", "sources")}}}
    got = bench.per_draw(old)
    assert "sources" not in got and "variant" not in got and got["layers"] == "full_attention"
    assert got["draws"]["0"]["variant"] == "prefix"
    assert got["draws"]["0"]["sources"] == {"own_steps": {"seconds_per_question": 22.0}}  # no LANCER figures
    assert bench.per_draw(got) == got
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r
            for r in bench.rows({"machine": {"cpus": 2}, "labels": {"hotpotqa.qwen": old}})}
    assert rows[("own_steps.hotpotqa.qwen.seconds_per_question", "own_steps", 0)]["value"] == 22.0
    assert rows[("own_steps.hotpotqa.qwen.usable_rate", "prefix", 0)]["value"] == 1.0


def test_rows_carry_the_targets_per_draw_and_over_draws():
    result = {"machine": {"cpus": 2},
              "parse": {"hotpotqa.qwen": {"chosen": "example", "variants": {
                  "plain": {"usable_rate": 0.5, "replies": 16, "issues": {"no_steps": 8}, "seconds_per_question": 9},
                  "example": {"usable_rate": 1.0, "replies": 16, "issues": {}, "seconds_per_question": 8}}}},
              "labels": {"hotpotqa.qwen": {"draws": {"0": _draw(0.7, 0.6, 0.95, 9.5),
                                                     "1": _draw(0.55, 0.6, 0.85, 10.5)}}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    assert rows[("own_steps.hotpotqa.qwen.dev_usable_rate", "example (chosen)", None)]["value"] == 1.0
    usable = rows[("own_steps.hotpotqa.qwen.usable_rate", "example", 0)]
    assert usable["target"] == ">= 0.9" and usable["met"] is True
    assert rows[("own_steps.hotpotqa.qwen.usable_rate_worst", "example", None)]["met"] is False  # 0.85
    gap = rows[("own_steps.hotpotqa.qwen.own_minus_retrieval_top2_f1", "the recipe's", 0)]
    assert gap["value"] == pytest.approx(0.1) and gap["met"] is True
    assert rows[("own_steps.hotpotqa.qwen.own_minus_retrieval_top2_f1_worst", "the recipe's", None)]["met"] is False
    assert rows[("own_steps.hotpotqa.qwen.label_f1", "oracle_steps", 1)]["value"] == pytest.approx(0.65)
    assert rows[("own_steps.hotpotqa.qwen.label_f1", "retrieval_top2", 0)]["value"] == 0.6
    assert rows[("own_steps.hotpotqa.qwen.seconds_per_question", "own_steps", 0)]["value"] == 9.5
    assert rows[("own_steps.hotpotqa.qwen.seconds_per_question_mean", "own_steps", None)]["value"] == 10.0
    assert rows[("own_steps.hotpotqa.qwen.seconds_per_question_worst", "own_steps", None)]["value"] == 10.5  # slowest


def test_every_variant_is_a_valid_recipe_override():
    """Each reply format loads as --set overrides of the real_cpu recipe (no sample data needed to check keys)."""
    from purecover.config import load_recipe

    for name, overrides in bench.VARIANTS.items():
        recipe = load_recipe(bench.ROOT / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml",
                             ["teacher.steps=model", *overrides])
        assert recipe.teacher.max_new_tokens in (160, 256), name
        assert recipe.teacher.format_example == ("example" in name), name
        assert recipe.teacher.reply_prefix == ("[Step 1]:" if "prefix" in name else ""), name


def test_every_selection_setting_is_a_valid_recipe_override():
    """The student part labels the pool at the chosen selection setting: its overrides load and take effect."""
    from purecover.config import load_recipe

    for point in parts.selection_points(False):
        overrides = parts.selection_overrides(point)
        recipe = load_recipe(bench.ROOT / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml", overrides)
        assert recipe.teacher.cot_weighting is point["cot_weighting"] and recipe.teacher.min_select == point["min_select"]
        assert recipe.teacher.repeated_steps == point["repeated_steps"]
    assert parts.selection_overrides(None) == []
    # names: repeated_steps only when drop, so the points that came before the key keep their names and run dirs
    assert parts.setting_name({"cot_weighting": False, "min_select": 2, "beta": 0.0, "repeated_steps": "keep"}) \
        == parts.setting_name({"cot_weighting": False, "min_select": 2, "beta": 0.0}) \
        == "cot_weighting=False,min_select=2,beta=0.0"
    assert parts.setting_name({"min_select": 2, "repeated_steps": "drop"}) == "min_select=2,repeated_steps=drop"
    with pytest.raises(ValueError, match="beta must be 0"):
        parts.selection_overrides({"cot_weighting": False, "beta": 0.5})


def test_stored_replies_are_parsed_again_with_the_runs_settings(tmp_path):
    """`reparsed` reads the label run's reply shards and judges them by that run's recipe: a reply that copies the
    worked example is `copied` only in a run that showed the example; an unfinished reply is `unclosed`."""
    import json

    from purecover.config import load_recipe

    copy = ("[Step 1]: The Silent Harbour was written by Mara Olen.\n"
            "[Step 2]: Mara Olen was born in Valdis, a city in Norland.\n[Answer]: Norland")
    cut = "[Step 1]: Paris is in France.\n[Step 2]: The river there"
    cands = {"q1": {"question": "Where was the author born?"}, "q2": {"question": "Which river flows there?"}}
    for example, expected in ((True, "copied"), (False, None)):
        run = load_recipe(bench.ROOT / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml",
                          [f"run_dir={tmp_path / str(example)}", "teacher.steps=model",
                           f"teacher.format_example={str(example).lower()}"])
        shards = run.run_path / "label_shards"
        shards.mkdir(parents=True)
        (shards / "replies.00000.jsonl").write_text(
            json.dumps({"qid": "q1", "reply": copy, "finished": True}) + "\n"
            + json.dumps({"qid": "q2", "reply": cut, "finished": False}) + "\n")
        got = parts.reparsed(run, cands)
        assert got == {"q1": {"reply_issue": expected}, "q2": {"reply_issue": "unclosed"}}, example


def test_student_rows_compare_with_retrieval_per_seed_and_quote_the_oracle_step_student():
    orders = {o: {"f1": f, "auc": 0.8, "mean_size": 2.0} for o, f in (("retrieval", 0.7), ("reversed", 0.66),
                                                                      ("shuffled", 0.68))}
    seeds = {"0": {"f1": 0.70, "retrieval_top2_f1": 0.65, "oracle_steps_f1": 0.75, "mean_size": 2.1,
                   "orders": orders, "train_seconds": 2400.0},
             "1": {"f1": 0.60, "retrieval_top2_f1": 0.64, "oracle_steps_f1": None, "mean_size": 2.3,
                   "train_seconds": 3000.0}}
    result = {"machine": {"cpus": 2}, "student": {"hotpotqa.qwen": {
        "variant": "prefix", "seeds": seeds, "selection": {"cot_weighting": False, "min_select": 1, "beta": 0.0},
        "labels": {"questions": 635, "label_f1": 0.5, "seconds_per_question": 20.0,
                   "replies": {"usable_rate": 0.97}}}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    gap = rows[("own_steps.hotpotqa.qwen.student_minus_retrieval_top2_f1", None, 0)]
    assert gap["value"] == pytest.approx(0.05) and gap["met"] is True and gap["target"] == "> 0"
    assert rows[("own_steps.hotpotqa.qwen.student_minus_retrieval_top2_f1_worst", None, None)]["met"] is False
    assert rows[("own_steps.hotpotqa.qwen.student_f1", "oracle_steps", 0)]["value"] == 0.75
    assert ("own_steps.hotpotqa.qwen.student_f1", "oracle_steps", 1) not in rows  # another test split: not quoted
    pool = rows[("own_steps.hotpotqa.qwen.pool_label_f1", "prefix, cot_weighting=False,min_select=1,beta=0.0", None)]
    assert "20.0 s/question" in pool["note"]
    assert rows[("own_steps.hotpotqa.qwen.student_f1", "own_steps, reversed order", 0)]["value"] == 0.66
    assert ("own_steps.hotpotqa.qwen.student_f1", "own_steps, reversed order", 1) not in rows  # not measured
    assert rows[("own_steps.hotpotqa.qwen.student_train_seconds_worst", "2 cores", None)]["value"] == 3000.0


def test_student_part_scores_each_seed_on_its_held_out_questions_and_quotes_only_the_same_split(tmp_path,
                                                                                              monkeypatch):
    """The student part's own logic, the label run and the training faked (the real ones: student_readout's
    `student` and the label stage, tested elsewhere): the pool labelled at the chosen setting in a directory named
    after it; per seed the test questions of the train stage's split, retrieval top-2 on exactly those, every
    order's figures, and the oracle-step student quoted only when its test questions are the same."""
    import importlib

    students = importlib.import_module("benchlib.students")  # on the path once the benchmark is loaded
    docs = [{"doc_id": f"d{k}"} for k in range(4)]
    cands = {f"q{i}": {"qid": f"q{i}", "docs": docs, "gold_doc_ids": ["d0", "d1"] if i % 2 else ["d2", "d3"]}
             for i in range(8)}
    labels = {q: {"qid": q, "selected": [2, 3] if q == "q0" else [0, 1], "steps": ["A.", "a", "B."] if q == "q0"
                  else ["A."]} for q in cands}  # q0's label is right where retrieval's top 2 are wrong
    seen = {}

    def label_run(dataset, run, extra, qids):
        seen["run"], seen["extra"], seen["qids"] = run, list(extra), list(qids)
        return {"labels": labels, "seconds_per_question": None, "resumed": True, "layers": None, "recipe": None}

    splits = {0: {q: "test" if q in ("q1", "q2") else "train" for q in cands},
              1: {q: "test" if q in ("q3", "q4") else "train" for q in cands}}
    orders = {o: {"f1": f, "auc": 0.8, "mean_size": 2.0, "coverage@2": 0.7, "precision": 0.6}
              for o, f in (("retrieval", 0.9), ("reversed", 0.85), ("shuffled", 0.88))}

    def student(dataset, readout, seed, work, source, settings, tag=""):
        assert source == seen["run"] and tag == "_own_steps" and readout == "passage"
        test = sorted(q for q, s in splits[seed].items() if s == "test")
        return {"orders": orders, "questions": {"train": 6, "calib": 0, "test": 2}, "train": {"seconds": 100.0},
                "calib_subset_f1": 0.55,
                "test_qids_sha": students.qids_digest(test)}

    monkeypatch.setattr(bench, "question_pool", lambda dataset, work: (cands, {}))
    monkeypatch.setattr(bench, "label_run", label_run)
    monkeypatch.setattr(bench, "reparsed", lambda recipe, c: {q: {} for q in c})
    monkeypatch.setattr(bench, "load", lambda dataset, run, extra: int(extra[0].split("=")[1]))
    monkeypatch.setattr(bench, "split_of", lambda run, seed, recipe: splits[recipe])
    monkeypatch.setattr(students, "student", student)
    reference = {"datasets": {"hotpotqa": {"students": {"passage": {
        "0": {"test_qids_sha": students.qids_digest(["q1", "q2"]), "orders": {"retrieval": {"f1": 0.95}}},
        "1": {"test_qids_sha": students.qids_digest(["q5", "q6"]), "orders": {"retrieval": {"f1": 0.7}}}}}}}}
    setting = {"cot_weighting": False, "min_select": 2, "beta": 0.0, "repeated_steps": "keep"}
    written = []
    out = bench.student_part("hotpotqa", "qwen", "full_attention", "prefix_batch8", tmp_path, [0, 1], reference,
                             setting, so_far=lambda part: written.append(sorted(part["seeds"])))
    assert written == [[], ["0"], ["0", "1"]]  # the labelled pool, then each finished seed, at once
    assert seen["run"].name == "all_own_steps-cot_weighting=False,min_select=2,beta=0.0"
    assert "teacher.cot_weighting=false" in seen["extra"] and "teacher.min_select=2" in seen["extra"]
    assert seen["qids"] == sorted(cands)
    assert out["labels"]["replies"]["repeating"] == 1 and out["labels"]["resumed"] is True
    s0, s1 = out["seeds"]["0"], out["seeds"]["1"]
    # q1 has gold d0, d1 (retrieval's top 2: F1 1), q2 gold d2, d3 (F1 0): the mean over the seed's test questions
    assert s0["retrieval_top2_f1"] == 0.5 and s0["oracle_steps_f1"] == 0.95
    assert s1["oracle_steps_f1"] is None  # another split: not quoted
    assert s0["orders"]["reversed"]["f1"] == 0.85 and s0["f1"] == 0.9
    # why a student misses: how it ranks at 2, its precision, and how well it reproduces its labels
    assert (s0["coverage@2"], s0["precision"], s0["calib_subset_f1"]) == (0.7, 0.6, 0.55)
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(
        {"machine": {"cpus": 2}, "student": {"hotpotqa.qwen": out}})}
    pool = rows[("own_steps.hotpotqa.qwen.pool_label_f1", "prefix_batch8, cot_weighting=False,min_select=2,beta=0.0",
                 None)]
    assert "time not measured" in pool["note"] and "1 repeating a step" in pool["note"]
    assert pool["value"] == 0.625 and out["labels"]["retrieval_top2_f1"] == 0.5  # 5 of 8 right against 4 of 8
    assert (out["labels"]["mean_size"], out["labels"]["retrieval_top_s_f1"]) == (2.0, 0.5)
    gap = rows[("own_steps.hotpotqa.qwen.pool_label_minus_retrieval_top2_f1",
                "prefix_batch8, cot_weighting=False,min_select=2,beta=0.0", None)]
    assert gap["value"] == 0.125 and gap["met"] is True and "(0.5)" in gap["note"]
    # what is written once the pool is labelled, before any student: the pool's rows alone
    labelled = bench.rows({"machine": {"cpus": 2}, "student": {"hotpotqa.qwen": {**out, "seeds": {}}}})
    assert [r["figure"] for r in labelled] == ["own_steps.hotpotqa.qwen.pool_label_f1",
                                               "own_steps.hotpotqa.qwen.pool_label_minus_retrieval_top2_f1"]


def test_merge_keeps_each_run_and_combines_the_students_seeds(tmp_path):
    """`--merge`: a later file replaces a part's dataset key whole (parse), the labels part's draws and the student
    part's seeds of different sessions are combined, other datasets and every run's command are kept; the rows
    are rewritten."""
    import json

    key, other = "hotpotqa.qwen", "2wiki.qwen"

    def parse(chosen: str) -> dict:
        return {"chosen": chosen, "variants": {chosen: {"usable_rate": 1.0, "replies": 12, "issues": {},
                                                         "seconds_per_question": 9}}}

    def student(seed: str, f1: float) -> dict:
        return {"variant": "prefix", "labels": {"label_f1": 0.5, "questions": 40, "seconds_per_question": 20,
                                                "replies": {"usable_rate": 1.0}},
                "seeds": {seed: {"f1": f1, "retrieval_top2_f1": 0.6}}}

    first = {"date": "d1", "commands": ["run 1"], "parse": {key: parse("prefix"), other: parse("plain")},
             "labels": {key: {"questions_per_draw": 24, "draws": {"0": _draw(0.5, 0.6, 1.0),
                                                                  "1": _draw(0.4, 0.6, 1.0)}}},
             "student": {key: student("0", 0.5)}}
    second = {"date": "d2", "commands": ["run 2"], "parse": {key: parse("prefix_bf16")},
              "labels": {key: {"questions_per_draw": 24, "draws": {"1": _draw(0.45, 0.6, 1.0, 11.0),
                                                                   "2": _draw(0.6, 0.6, 1.0)}}},
              "student": {key: student("1", 0.7)}}
    paths = []
    for i, data in enumerate((first, second)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(data))
    out = tmp_path / "merged.json"
    assert bench.main(["--merge", *map(str, paths), "--out", str(out)]) == 0
    got = json.loads(out.read_text())

    def bare(entry: dict) -> dict:  # an entry without the machine and date the merge marks it with
        return {k: v for k, v in entry.items() if k not in ("machine", "date")}

    assert bare(got["parse"][key]) == second["parse"][key] and bare(got["parse"][other]) == first["parse"][other]
    assert {d: bare(r) for d, r in got["labels"][key]["draws"].items()} == {
        "0": first["labels"][key]["draws"]["0"], **second["labels"][key]["draws"]}
    assert {d: bare(r) for d, r in got["student"][key]["seeds"].items()} == {
        "0": first["student"][key]["seeds"]["0"], "1": second["student"][key]["seeds"]["1"]}
    assert got["labels"][key]["draws"]["0"]["date"] == "d1" and got["labels"][key]["draws"]["2"]["date"] == "d2"
    assert got["commands"] == ["run 1", "run 2"] and got["date"] == "d2" and "datasets" not in got
    assert {r["seed"] for r in got["rows"] if r["figure"].endswith("student_minus_retrieval_top2_f1")} == {0, 1}


def test_merged_rows_say_the_machine_each_draw_and_seed_ran_on(tmp_path):
    """Sessions may run on different CPUs: after a merge, each draw's rows name its own machine (not the last
    file's), a row over draws names every machine it spans, and a parse entry keeps its run's."""
    import json

    amd = {"processor": "x86_64", "cpus": 2, "cpu_model": "AMD EPYC"}
    intel = {"processor": "x86_64", "cpus": 2, "cpu_model": "Intel(R) Xeon(R) Processor"}
    parse = {"chosen": "prefix", "variants": {"prefix": {"usable_rate": 1.0, "replies": 12, "issues": {},
                                                         "seconds_per_question": 9}}}
    first = {"machine": amd, "date": "d1", "parse": {"hotpotqa.big": parse},
             "labels": {"hotpotqa.small": {"draws": {"0": _draw(0.5, 0.6, 1.0)}}}}
    second = {"machine": intel, "date": "d2",
              "labels": {"hotpotqa.small": {"draws": {"1": _draw(0.4, 0.6, 1.0)}},
                         "hotpotqa.big": {"draws": {"0": _draw(0.7, 0.6, 1.0)}}}}
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, data in zip(paths, (first, second)):
        path.write_text(json.dumps(data))
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(bench.merge(paths))}
    said = {"amd": "2 cores, AMD EPYC", "intel": "2 cores, Intel(R) Xeon(R) Processor"}
    assert rows[("own_steps.hotpotqa.small.label_f1", "own_steps", 0)]["machine"] == said["amd"]
    assert rows[("own_steps.hotpotqa.small.label_f1", "own_steps", 1)]["machine"] == said["intel"]
    assert rows[("own_steps.hotpotqa.small.label_f1_mean", "own_steps", None)]["machine"] == \
        f"{said['amd']}; {said['intel']}"
    assert rows[("own_steps.hotpotqa.big.dev_usable_rate", "prefix (chosen)", None)]["machine"] == said["amd"]
    assert rows[("own_steps.hotpotqa.big.label_f1", "own_steps", 0)]["machine"] == said["intel"]


def test_settings_are_chosen_with_and_without_ratings_on_development_questions():
    own_points, points = parts.selection_points(False), parts.selection_points(True)
    assert len(own_points) == 8 and {p["beta"] for p in own_points} == {0.0}
    assert len(points) == 40 and points[0] == {"cot_weighting": True, "min_select": 1, "beta": 0.0,
                                               "repeated_steps": "keep"}

    def point(cot: bool, least: int, beta: float, repeated: str = "keep") -> dict:
        return {"cot_weighting": cot, "min_select": least, "beta": beta, "repeated_steps": repeated}

    f1 = {parts.setting_name(p): 0.5 for p in points}
    f1["cot_weighting=False,min_select=1,beta=0.0"] = 0.7
    f1["cot_weighting=True,min_select=2,beta=0.5"] = 0.6
    f1["cot_weighting=False,min_select=1,beta=0.25"] = 0.6
    f1["cot_weighting=True,min_select=1,beta=1.0"] = 0.9  # never chosen for own steps alone
    assert parts.choose_setting(f1, own_points, fused=False) == point(False, 1, 0.0)
    assert parts.choose_setting(f1, points, fused=True) == point(True, 1, 1.0)
    f1["cot_weighting=False,min_select=1,beta=0.0,repeated_steps=drop"] = 0.75
    assert parts.choose_setting(f1, own_points, fused=False) == point(False, 1, 0.0, "drop")
    del f1["cot_weighting=True,min_select=1,beta=1.0"]
    fused = [p for p in points if p != point(True, 1, 1.0)]
    # a tie goes to the earlier point of the grid (keep comes before drop)
    assert parts.choose_setting(f1, fused, fused=True) == point(True, 2, 0.5)
    with pytest.raises(ValueError, match="no grid point with LANCER"):
        parts.choose_setting(f1, own_points, fused=True)


def test_labels_re_solved_at_each_setting_reproduce_the_label_stage(tmp_path, sample_dir):
    """Real label runs (a tiny Qwen2 with the real tokenizer, the demo questions): a LANCER run made at beta 0.5,
    re-solved at 0.5, gives its stored selections back, and at 0 those of a run without ratings; a run made
    without the answer's weighting comes back from the weighted run re-solved with cot_weighting false."""
    from purecover.config import load_recipe
    from purecover.data.data_stage import run_data_stage
    from purecover.demo.tiny import build_tiny_model
    from purecover.teacher.label_stage import run_label_stage

    tokenizer = sample_dir / "qwen2_tokenizer"
    if not tokenizer.is_dir():
        pytest.skip(f"Qwen2 tokenizer not found at {tokenizer}")
    teacher = build_tiny_model(tmp_path / "teacher", tokenizer, "qwen2", seed=0)

    def run(name, *extra):
        r = load_recipe(None, [f"run_dir={tmp_path / name}", "data.path=demo", "data.k1=5", "data.limit=4",
                               f"teacher.model={teacher}", "teacher.max_new_tokens=12", "teacher.batch_size=4",
                               "teacher.dtype=float32", "teacher.device=cpu", "teacher.steps=oracle",
                               "teacher.calibrate=false", *extra])
        run_data_stage(r, show_progress=False)
        run_label_stage(r, show_progress=False)
        return r, {x["qid"]: x for x in parts.read_jsonl(r.run_path / "labels.jsonl")}

    def stored(labels):  # the label stage's own selections, less the fallback rate resolved_figures does not give
        return {k: v for k, v in parts.label_figures(labels, cands, qids).items() if k != "fallback_rate"}

    fused, fused_labels = run("fused", *parts.LANCER, "teacher.lancer.beta=0.5")
    plain, plain_labels = run("plain")
    _, flat_labels = run("flat", "teacher.cot_weighting=false")
    cands = {c["qid"]: c for c in parts.read_jsonl(fused.run_path / "candidates.jsonl")}
    qids = sorted(cands)
    assert all(fused_labels[q]["ratings"] for q in qids)
    figs = parts.resolved_figures(fused, cands, qids, [{"beta": 0.0}, {"beta": 0.5}])
    assert figs["beta=0.5"] == stored(fused_labels)
    assert figs["beta=0.0"] == stored(plain_labels)
    assert figs["beta=0.0"] != figs["beta=0.5"]  # the ratings change these selections
    flat = parts.resolved_figures(plain, cands, qids, [{"cot_weighting": False}])["cot_weighting=False"]
    assert flat == stored(flat_labels)
    with pytest.raises(ValueError, match="not a LANCER run"):
        parts.resolved_figures(plain, cands, qids, [{"beta": 0.5}])


def test_rows_read_the_chosen_settings_and_compare_lancer_with_own_steps_per_draw():
    tuned = {"f1": 0.75, "retrieval_top2_f1": 0.7, "setting": {"cot_weighting": False, "min_select": 1, "beta": 0.0}}
    lancer = {"f1": 0.8, "retrieval_top2_f1": 0.7, "setting": {"cot_weighting": True, "min_select": 2, "beta": 0.25}}
    result = {"machine": {"cpus": 2},
              "labels": {"hotpotqa.qwen": {
                  "dev": {"questions": ["c1", "c2"], "seconds_per_question": 40.0, "lancer": True,
                          "f1": {"cot_weighting=True,min_select=1,beta=0.0": 0.5,
                                 "cot_weighting=False,min_select=1,beta=0.0": 0.7,
                                 "cot_weighting=True,min_select=2,beta=0.25": 0.72},
                          "own": tuned["setting"], "fused": lancer["setting"], "machine": {"cpus": 2, "cpu_model": "X"}},
                  "draws": {"0": _draw(0.6, 0.7, 1.0),  # an earlier draw: the recipe's setting only
                            "1": {**_draw(0.6, 0.7, 1.0), "own_steps_tuned": tuned, "own_steps_lancer": lancer,
                                  "own_steps_replies": {"usable_rate": 1.0, "issues": {}, "repeating": 5},
                                  "own_steps_f1_by_setting": {"cot_weighting=False,min_select=1,beta=0.0": 0.75,
                                      "cot_weighting=False,min_select=1,beta=0.0,repeated_steps=drop": 0.78}}}}}}
    rows = {(r["figure"], r.get("variant"), r.get("seed")): r for r in bench.rows(result)}
    # the chosen setting with repeated steps switched: a row of its own, marked as not chosen
    drop = rows[("own_steps.hotpotqa.qwen.label_f1",
                 "own_steps at cot_weighting=False,min_select=1,beta=0.0,repeated_steps=drop (not chosen)", 1)]
    assert drop["value"] == 0.78 and drop["target"] is None
    assert rows[("own_steps.hotpotqa.qwen.repeating_replies", "example", 1)]["value"] == 5
    assert ("own_steps.hotpotqa.qwen.repeating_replies", "example", 0) not in rows  # not counted then
    gap = "own_steps.hotpotqa.qwen.own_minus_retrieval_top2_f1"
    both = "cot_weighting=False,min_select=1,beta=0.0, the recipe's"
    assert rows[(gap, both, 1)]["value"] == pytest.approx(0.05) and rows[(gap, both, 1)]["met"] is True
    assert rows[(gap, both, 0)]["value"] == pytest.approx(-0.1)  # the stored labels where no setting was chosen
    assert rows[("own_steps.hotpotqa.qwen.label_f1", "own_steps", 1)]["value"] == 0.6
    assert rows[("own_steps.hotpotqa.qwen.label_f1", "own_steps_tuned", 1)]["value"] == 0.75
    assert rows[("own_steps.hotpotqa.qwen.lancer_minus_own_steps_f1", None, 1)]["value"] == pytest.approx(0.05)
    assert ("own_steps.hotpotqa.qwen.lancer_minus_own_steps_f1", None, 0) not in rows  # draw 0 had no ratings
    dev = rows[("own_steps.hotpotqa.qwen.dev_label_f1", "cot_weighting=True,min_select=2,beta=0.25 (chosen: LANCER)",
                None)]
    assert dev["value"] == 0.72 and "2 development" in dev["note"] and "X" in dev["machine"]
    assert rows[("own_steps.hotpotqa.qwen.dev_label_f1", "cot_weighting=False,min_select=1,beta=0.0 (chosen: own "
                 "steps)", None)]["value"] == 0.7
