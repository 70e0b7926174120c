"""``data.path`` as a list of files (purecover.data.paths): the union in list order, duplicate qids across files,
the data stage's inputs, the dry run, the recipe checks and the command line's ``--set 'data.path=[a,b]'``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import ConfigError, load_recipe
from purecover.contract import StageBlockedError, execute_stage
from purecover.data.data_stage import CANDIDATES_FILE, dataset_inputs, run_data_stage
from purecover.data.errors import DuplicateQuestionError
from purecover.data.loaders import ExampleSource
from purecover.data.paths import check_data_files, data_path_entries, show_data_path
from purecover.stages import config_hash
from purecover.validate import load_validated_recipe
from tests.conftest import hotpot_record, write_json

# Only the data stage: no teacher, student or generator is needed to plan or run it.
BASE = ["data.k1=2", "eval.methods=[retrieval]", "teacher.calibrate=false"]


def two_files(tmp_path: Path) -> tuple[Path, Path]:
    """a.json (q1, q2) and b.json (q3) in the official HotpotQA layout."""
    a = write_json(tmp_path / "a.json", [hotpot_record("q1"), hotpot_record("q2", question="Where was Ada Brill born?")])
    b = write_json(tmp_path / "b.json", [hotpot_record("q3", question="What does Corven have?", answer="a lighthouse")])
    return a, b


def recipe(tmp_path: Path, *overrides: str):
    return load_recipe(None, [f"run_dir={tmp_path / 'run'}", *BASE, *overrides])


def listed(*files: Path | str) -> str:
    return "data.path=[" + ",".join(str(f) for f in files) + "]"


def dry_run(tmp_path: Path, *overrides: str) -> list[str]:
    """``purecover pipeline --dry-run`` with `BASE` and `overrides`."""
    return ["pipeline", "--dry-run"] + [arg for s in (f"run_dir={tmp_path / 'run'}", *BASE, *overrides)
                                        for arg in ("--set", s)]


def qids(run_dir: Path) -> list[str]:
    return [json.loads(line)["qid"] for line in (run_dir / CANDIDATES_FILE).read_text().splitlines()]


# --------------------------------------------------------------------------- the recipe key


def test_set_parses_a_list_and_a_one_file_list_is_that_file(tmp_path):
    a, b = two_files(tmp_path)
    r = recipe(tmp_path, listed(a, b))
    assert r.data.path == [str(a), str(b)]
    one = recipe(tmp_path, listed(a))
    assert one.data.path == str(a)  # the plain path: the same configuration, the same hash
    assert config_hash(one, "data") == config_hash(recipe(tmp_path, f"data.path={a}"), "data")
    assert config_hash(r, "data") != config_hash(recipe(tmp_path, listed(b, a)), "data")  # the order is the data


@pytest.mark.parametrize(("value", "message"), [
    ("[]", "data.path: is an empty list"),
    ("[a.json, a.json]", "data.path: lists 'a.json' twice"),
    ("[a.json, ' ']", "data.path: entry 1 is blank"),
    ("[a.json, 3]", "data.path: expected str | list of str | null"),
])
def test_malformed_lists_are_refused_naming_the_key(tmp_path, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        recipe(tmp_path, f"data.path={value}")


def test_purecover_config_prints_the_list(tmp_path, capsys):
    a, b = two_files(tmp_path)
    assert main(["config", "--set", f"run_dir={tmp_path / 'run'}", "--set", listed(a, b)]) == 0
    out, err = capsys.readouterr()
    assert f"  path:\n  - {a}\n  - {b}\n" in out
    assert "warning" not in err  # both files carry gold passages (probed over the union)


# --------------------------------------------------------------------------- reading the files


def test_a_list_of_two_files_yields_the_union_in_list_order(tmp_path):
    a, b = two_files(tmp_path)
    source = ExampleSource("hotpotqa", [a, b])
    assert [e.qid for e in source] == ["q1", "q2", "q3"] and source.n_read == 3
    assert source.path == f"{a} + {b}" and source.resolved is None
    assert [e.qid for e in ExampleSource("hotpotqa", [b, a])] == ["q3", "q1", "q2"]
    assert [e.qid for e in ExampleSource("hotpotqa", [a, b], limit=2)] == ["q1", "q2"]  # limit counts the union


def test_the_data_stage_reads_the_union_and_samples_from_it(tmp_path):
    a, b = two_files(tmp_path)
    r = recipe(tmp_path / "all", listed(a, b))
    summary = run_data_stage(r, show_progress=False)
    assert qids(r.run_path) == ["q1", "q2", "q3"] and summary.questions == 3 and summary.with_gold == 3
    sampled = recipe(tmp_path / "sample", listed(a, b), "data.sample=2", "data.sample_seed=3")
    summary = run_data_stage(sampled, show_progress=False)
    assert summary.sampled_from == 3 and summary.questions == 2  # drawn from the union of both files
    limited = recipe(tmp_path / "limit", listed(a, b), "data.limit=2")
    run_data_stage(limited, show_progress=False)
    assert qids(limited.run_path) == ["q1", "q2"]
    per_question = recipe(tmp_path / "own", listed(a, b), "data.corpus=per_question", "data.k1=10")
    run_data_stage(per_question, show_progress=False)
    records = [json.loads(line) for line in (per_question.run_path / CANDIDATES_FILE).read_text().splitlines()]
    assert [len(rec["docs"]) for rec in records] == [3, 3, 3]  # each question's own three paragraphs


@pytest.mark.parametrize("skip_invalid", [False, True])
def test_a_qid_in_two_files_is_an_error_naming_both(tmp_path, skip_invalid):
    a, b = two_files(tmp_path)
    c = write_json(tmp_path / "c.json", [hotpot_record("q4"), hotpot_record("q2")])
    with pytest.raises(DuplicateQuestionError) as err:
        list(ExampleSource("hotpotqa", [a, b, c], skip_invalid=skip_invalid))
    message = str(err.value)
    assert "'q2'" in message and str(a) in message and str(c) in message and str(b) not in message
    assert "record 1" in message  # where it is in each file
    assert err.value.files == (str(a), str(c)) and err.value.qid == "q2"
    r = recipe(tmp_path, listed(a, b, c), f"data.skip_invalid={str(skip_invalid).lower()}")
    with pytest.raises(DuplicateQuestionError, match=re.escape(str(c))):
        run_data_stage(r, show_progress=False)
    assert not (r.run_path / CANDIDATES_FILE).exists()  # refused while loading: nothing retrieved


def test_a_duplicate_within_one_file_is_still_a_malformed_record(tmp_path):
    a, _ = two_files(tmp_path)
    twice = write_json(tmp_path / "twice.json", [hotpot_record("q9"), hotpot_record("q9")])
    source = ExampleSource("hotpotqa", [a, twice], skip_invalid=True)
    assert [e.qid for e in source] == ["q1", "q2", "q9"]
    assert len(source.invalid) == 1 and "duplicate question id 'q9'" in source.invalid[0].problem


# --------------------------------------------------------------------------- inputs and staleness


def test_every_file_is_a_recorded_input_of_the_data_stage(tmp_path):
    a, b = two_files(tmp_path)
    assert dataset_inputs(recipe(tmp_path, listed(a, b))) == {f"data.path[0] {a}": a, f"data.path[1] {b}": b}
    assert dataset_inputs(recipe(tmp_path, f"data.path={a}")) == {"data.path": a}  # one file: as before


def test_the_data_stage_goes_stale_when_the_second_file_changes(tmp_path):
    a, b = two_files(tmp_path)
    r = recipe(tmp_path, listed(a, b))
    assert execute_stage("data", r, show_progress=False).action == "ran"
    assert execute_stage("data", r, show_progress=False).action == "skip"
    b.write_text(b.read_text().replace("What does Corven", "What does Corvan"))  # same size, other content
    with pytest.raises(StageBlockedError, match=r"stage data: its input changed since it ran \(data\.path\[1\] "
                                                + re.escape(str(b)) + r" was changed since it was recorded"):
        execute_stage("data", r, show_progress=False)
    from purecover.pipeline import plan_pipeline

    assert {p.stage: p.action for p in plan_pipeline(r)}["data"] == "blocked"


# --------------------------------------------------------------------------- checks and the dry run


def test_the_dry_run_lists_both_files(tmp_path, capsys):
    a, b = two_files(tmp_path)
    code = main(dry_run(tmp_path, listed(a, b)))
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert re.search(rf"data\.path\[0\] +found +{re.escape(str(a))} +\(local file 1 of 2, read in list order\)", out)
    assert re.search(rf"data\.path\[1\] +found +{re.escape(str(b))} +\(local file 2 of 2, read in list order\)", out)
    assert not (tmp_path / "run").exists()


def test_the_recipe_check_rejects_a_missing_file_naming_it(tmp_path, capsys):
    a, _ = two_files(tmp_path)
    gone = tmp_path / "gone.json"
    r = load_validated_recipe(None, [f"run_dir={tmp_path / 'run'}", *BASE, listed(a, gone)], build_training=False)
    expected = f"data.path[1]: '{gone}' does not exist"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check_data_files(r)  # the data stage's recipe check (Stage.check)
    code = main(dry_run(tmp_path, listed(a, gone)))
    assert code == 2 and expected in capsys.readouterr().err  # before any stage, naming the file
    with pytest.raises(FileNotFoundError, match=re.escape(f"data.path[1] '{gone}' does not exist")):
        run_data_stage(r, show_progress=False)  # `purecover data`: before reading any file
    assert not (r.run_path / CANDIDATES_FILE).exists()


@pytest.mark.parametrize("entry", ["hotpotqa/hotpot_qa", "demo", "folder"])
def test_a_list_of_hub_ids_demo_or_folders_is_refused(tmp_path, entry):
    a, _ = two_files(tmp_path)
    if entry == "folder":
        (tmp_path / "folder").mkdir()
        entry = str(tmp_path / "folder")
    why = {"hotpotqa/hotpot_qa": "is a Hugging Face Hub dataset id", "demo": "is the bundled demo set"}.get(
        entry, "is a folder")
    with pytest.raises(ConfigError, match=re.escape(f"data.path[1]: {entry!r} {why}")):
        load_validated_recipe(None, [f"run_dir={tmp_path / 'run'}", *BASE, listed(a, entry)], build_training=False)
    with pytest.raises(ValueError, match=re.escape(f"data.path[1] {entry!r} {why}")):
        ExampleSource("hotpotqa", [a, entry])


def test_entries_and_how_they_are_shown():
    assert data_path_entries(None) == [] and show_data_path(None) == "null"
    assert data_path_entries("x.json") == [("data.path", "x.json")] and show_data_path("x.json") == "x.json"
    assert data_path_entries(["a", "b"]) == [("data.path[0]", "a"), ("data.path[1]", "b")]
    assert show_data_path(["a", "b"]) == "a + b"


@pytest.mark.parametrize("kind", ["fifo", "dev_null", "loop", "dangling"])
def test_an_entry_that_is_no_file_says_what_it_is(tmp_path, kind):
    """Issue 55 (8): a named pipe, /dev/null, a link loop or a dangling link in a list is named for what it is
    (not "does not exist"), by the recipe check and by `purecover data`, before any file is read."""
    import os

    a, _ = two_files(tmp_path)
    entry = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "loop":
        (tmp_path / "other").symlink_to(entry)
        entry.symlink_to(tmp_path / "other")
    elif kind == "dangling":
        entry.symlink_to(tmp_path / "nothing")
    else:
        entry = Path("/dev/null")
    why = {"fifo": "is a named pipe (FIFO), not a file", "dev_null": "is a character device (such as /dev/null)",
           "loop": "is a loop of symbolic links",
           "dangling": f"is a symbolic link to {str(tmp_path / 'nothing')!r}, which does not exist"}[kind]
    r = load_validated_recipe(None, [f"run_dir={tmp_path / 'run'}", *BASE, listed(a, entry)], build_training=False)
    with pytest.raises(ConfigError, match=re.escape(f"data.path[1]: '{entry}' {why}")):
        check_data_files(r)
    with pytest.raises(FileNotFoundError, match=re.escape(f"data.path[1] '{entry}' {why}")):
        run_data_stage(r, show_progress=False)  # never opens the pipe (which would block)
    assert not (r.run_path / CANDIDATES_FILE).exists()


@pytest.mark.parametrize("content", ["", "[]"])
def test_an_empty_file_in_a_list_is_refused_as_it_is_alone(tmp_path, content):
    """Issue 55 (8): alone, an empty file is refused ("no valid questions"); in a list it was read as zero
    questions. Now it is refused naming its key, and nothing is written."""
    a, _ = two_files(tmp_path)
    empty = tmp_path / "empty.json"
    empty.write_text(content)
    r = recipe(tmp_path, listed(a, empty))
    with pytest.raises(ValueError, match=re.escape(f"data.path[1] '{empty}' holds no valid question (0 invalid)")):
        run_data_stage(r, show_progress=False)
    assert not (r.run_path / CANDIDATES_FILE).exists()
    with pytest.raises(ValueError, match="no valid questions"):
        run_data_stage(recipe(tmp_path / "alone", f"data.path={empty}"), show_progress=False)


def test_the_duplicate_entry_checks_are_linear(tmp_path):
    """Issue 55 (8): 20,000 entries took 4.9 s in the quadratic config check (the loader's was quadratic too);
    both now look each entry up once in a dict, well under a second for both. The bound is loose on purpose: it
    only tells linear from quadratic."""
    import time

    many = [str(tmp_path / f"f{i}.json") for i in range(20_000)]
    t0 = time.perf_counter()
    from purecover.config.data_teacher import DataConfig

    with pytest.raises(ValueError, match=re.escape(f"lists {many[3]!r} twice (entries 3 and 20000)")):
        DataConfig(path=[*many, many[3]])  # the recipe key's check (YAML parsing aside)
    with pytest.raises(ValueError, match=re.escape(f"data.path[20000] {many[3]!r} is listed twice")):
        ExampleSource("hotpotqa", [*many, many[3]])
    assert time.perf_counter() - t0 < 2.5
