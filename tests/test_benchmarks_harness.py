"""benchmarks/benchlib/harness.py: the shared options, --rows-only and --merge, merging, the atomic write, rows over seeds;
and the size of every benchmark script (runs no benchmark)."""

from __future__ import annotations

import argparse
import ast
import json
import statistics
from pathlib import Path

import pytest

from tests.test_benchmarks_summary import BENCH, SCRIPTS, _load, library

harness = library("harness")
rows = library("rows")
MACHINE = {"machine": {"cpus": 2, "processor": "x86_64"}}
MAX_LINES = 500


def test_a_parsed_command_line_shows_the_stages_progress_on_stderr(capsys, monkeypatch) -> None:
    """Nothing configures logging in a benchmark's process, so the stages' progress (`purecover.utils.progress`,
    log lines under nohup) would be dropped; `parse` adds the stderr handler, once however often it runs."""
    import logging

    from purecover.utils.progress import tqdm

    monkeypatch.setenv("PURECOVER_PROGRESS", "log")
    logger = logging.getLogger("purecover.progress")
    before = list(logger.handlers)
    monkeypatch.setattr(logger, "handlers", [h for h in before if not getattr(h, "benchmark_progress", False)])
    harness.parse(harness.parser("doc", out="x.json"), [])
    harness.parse(harness.parser("doc", out="x.json"), [])
    assert sum(getattr(h, "benchmark_progress", False) for h in logger.handlers) == 1
    bar = tqdm(total=4, desc="label [0]", unit="q", every=0.0)
    bar.update(1)
    bar.close()
    err = capsys.readouterr().err
    assert "label [0]: 1/4 q (25%)" in err and "label [0]: 1/4 q (25%) in " in err  # a line while it runs, one at the end
    assert err.startswith("[") and err[3] == ":"  # stamped [HH:MM:SS] like harness.log


def test_shared_options_are_there_only_where_asked() -> None:
    plain = harness.parser("doc", out="benchmarks/results/x.json")
    args = harness.parse(plain, [])
    assert args.out == Path("benchmarks/results/x.json") and args.rows_only is False
    assert not hasattr(args, "seeds") and not hasattr(args, "merge") and not hasattr(args, "quick")
    with pytest.raises(SystemExit):
        harness.parse(plain, ["--seeds", "1"])

    full = harness.parser("doc", out="x.json", merge="combine", seeds=[0], quick="short", quick_aliases=["--tiny"])
    args = harness.parse(full, [])
    assert (args.seeds, args.merge, args.quick) == ([0], None, False)
    args = harness.parse(full, ["--seeds", "3,1", "--merge", "a.json", "b.json", "--tiny", "--out", "o.json"])
    assert (args.seeds, args.merge, args.quick, args.out) == ([3, 1], [Path("a.json"), Path("b.json")], True,
                                                               Path("o.json"))
    assert harness.parse(full, ["--seeds", "1,2", "--seed", "7"]).seeds == [7]  # --seed N is --seeds N
    assert harness.parse(full, ["--quick"]).quick is True
    for bad in ("0,0", "", "a"):
        with pytest.raises((argparse.ArgumentTypeError, ValueError)):
            harness.seed_list(bad)


def test_stored_rewrites_rows_or_merges_or_lets_the_script_measure(tmp_path: Path) -> None:
    def table(result: dict) -> list[dict]:
        t = rows.Rows(result)
        t.add("x.value", result["value"], "s")
        return t.rows

    path = tmp_path / "x.json"
    path.write_text(json.dumps({**MACHINE, "value": 2.0, "versions": {"python": "3"}}))
    p = harness.parser("doc", out=path, merge="combine")
    assert harness.stored(harness.parse(p, []), table, lambda a: 7) is None  # nothing stored asked for: measure
    assert harness.stored(harness.parse(p, ["--merge", "a.json"]), table, lambda a: 7) == 7
    assert harness.stored(harness.parse(p, ["--rows-only"]), table) == 0
    data = json.loads(path.read_text())
    assert list(data)[-2:] == ["rows", "versions"] and data["rows"][0]["value"] == 2.0


def test_merged_later_results_win_per_key_down_to_the_depth() -> None:
    a = {"date": "a", "results": {"colour": {"0": {"variants": {"cl": 1, "lm": 2}, "settings": {"steps": 5}}}}}
    b = {"date": "b", "results": {"colour": {"0": {"variants": {"cl": 9}}, "1": {"variants": {"cl": 3}}}}}
    before = json.dumps([a, b])
    assert harness.merged([a, b]) == {**a, **b}
    assert harness.merged([a["results"], b["results"]], depth=2) == {"colour": {"0": {"variants": {"cl": 9}},
                                                                               "1": {"variants": {"cl": 3}}}}
    deep = harness.merged([a["results"], b["results"]], depth=4)
    assert deep["colour"]["0"] == {"variants": {"cl": 9, "lm": 2}, "settings": {"steps": 5}}
    assert list(deep["colour"]) == ["0", "1"]
    deep["colour"]["0"]["variants"]["new"] = 0
    assert json.dumps([a, b]) == before  # the inputs are not changed by merging, nor by changing the result


def test_write_is_atomic_with_rows_last_before_versions(tmp_path: Path) -> None:
    out = tmp_path / "deeper" / "x.json"
    written = harness.write(out, {**MACHINE, "versions": {"v": 1}, "value": 3}, lambda r: [{"figure": "x"}])
    assert json.loads(out.read_text()) == written and list(written)[-2:] == ["rows", "versions"]
    assert not [p for p in out.parent.iterdir() if p != out]  # no temporary file left beside it


def _student_readout_seed_rows(table, figure: str, values: dict, unit: str, target, variant: str,
                               note: str | None = None) -> None:
    """student_readout.py's own seed rows before it used `harness.seed_rows` (its targets are lower bounds)."""
    for seed, v in sorted(values.items()):
        table.add(figure, v, unit, target, variant=variant, seed=seed, note=note)
    have = [v for v in values.values() if v is not None]
    if len(values) > 1 and have:
        table.add(f"{figure}_mean", statistics.mean(have), unit, None, variant=variant, note=note)
        table.add(f"{figure}_worst", min(have), unit, target, variant=variant, note=note)


def test_seed_rows_are_student_readouts_and_keep_the_worst_against_the_target() -> None:
    values = {2: 0.5, 0: 0.7, 1: None}
    for target in ("> 0.6", None):
        mine, theirs = rows.Rows(MACHINE), rows.Rows(MACHINE)
        harness.seed_rows(mine, "b.f1", values, "F1", target, variant="v", note="n")
        _student_readout_seed_rows(theirs, "b.f1", values, "F1", target, "v", note="n")
        assert mine.rows == theirs.rows
    table = rows.Rows(MACHINE)
    harness.seed_rows(table, "b.seconds", {0: 500.0, 1: 650.0}, "s", "<= 600")
    by = {r["figure"]: r for r in table.rows if "seed" not in r}
    assert (by["b.seconds_worst"]["value"], by["b.seconds_worst"]["met"]) == (650.0, False)  # an upper bound
    assert by["b.seconds_mean"]["value"] == 575.0 and by["b.seconds_mean"]["target"] is None
    one = rows.Rows(MACHINE)
    harness.seed_rows(one, "b.f1", {0: 0.5}, "F1", "> 0.6")
    assert len(one.rows) == 1  # one seed: no mean or worst


def test_seed_rows_without_a_target_take_the_worst_cost_as_the_highest_and_can_leave_the_worst_out() -> None:
    table = rows.Rows(MACHINE)
    harness.seed_rows(table, "b.train_seconds", {0: 2444.8, 1: 3540.8}, "s", lower_is_better=True)
    harness.seed_rows(table, "b.f1", {0: 0.7, 1: 0.5}, "F1")
    harness.seed_rows(table, "b.mean_size", {0: 2.0, 1: 2.3}, "passages", with_worst=False)
    by = {r["figure"]: r for r in table.rows if "seed" not in r}
    assert by["b.train_seconds_worst"]["value"] == 3540.8  # the slowest seed, not the fastest
    assert by["b.f1_worst"]["value"] == 0.5
    assert "b.mean_size_worst" not in by and by["b.mean_size_mean"]["value"] == 2.15
    assert harness.worst([1.0, 3.0], ">= 2", lower_is_better=True) == 1.0  # a target decides the direction


def test_over_seeds_adds_mean_and_worst_of_rows_already_in_the_table() -> None:
    table = rows.Rows(MACHINE)
    for seed, f1, s in ((1, 0.9, 500.0), (2, 0.8, 650.0)):
        table.add("b.f1", f1, "F1", ">= 0.85", variant="t", seed=seed)
        table.add("b.seconds", s, "s", "<= 600", variant="t", seed=seed)
    harness.over_seeds(table, list(table.rows))
    by = {r["figure"]: r for r in table.rows if "seed" not in r}
    assert (by["b.f1_worst"]["value"], by["b.f1_worst"]["note"]) == (0.8, "seed 2 of 1, 2")
    assert (by["b.seconds_worst"]["value"], by["b.seconds_worst"]["met"]) == (650.0, False)
    assert (by["b.f1_mean"]["value"], by["b.f1_mean"]["note"]) == (0.85, "seeds 1, 2")


@pytest.mark.parametrize("name", [*SCRIPTS, *(p.stem for p in sorted(BENCH.glob("*_parts.py"))),
                                  *(f"benchlib/{p.stem}" for p in sorted((BENCH / "benchlib").glob("*.py")))])
def test_every_benchmark_script_fits_in_500_lines(name: str) -> None:
    lines = len((BENCH / f"{name}.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name}.py: {lines} lines; split its helpers into {name}_parts.py"


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in `path`, lazy ones inside functions included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, []) for a in node.names)
    return out


def test_experiments_import_only_the_library_and_public_purecover_names() -> None:
    """An experiment imports benchlib, its own <name>_parts.py and purecover's public names: never another
    experiment's module (or its parts), nor a purecover module or name that starts with an underscore. The library
    imports no experiment."""
    experiments = {p.stem for p in BENCH.glob("*.py")}
    found = []
    for path in sorted([*BENCH.glob("*.py"), *(BENCH / "benchlib").glob("*.py")]):
        in_library = path.parent.name == "benchlib"
        own = set() if in_library else {path.stem, f"{path.stem}_parts", path.stem.removesuffix("_parts")}
        for line, module, names in _imports(path):
            top = module.split(".")[0]
            where = f"{path.relative_to(BENCH)}:{line}"
            if top in experiments and top not in own:
                found.append(f"{where} imports the experiment module {module}")
            elif top == "purecover" and (any(part.startswith("_") for part in module.split(".")[1:])
                                         or any(n.startswith("_") for n in names)):
                found.append(f"{where} imports a private purecover name: {module} {names}")
    assert not found, "; ".join(found)


# ------------------------------------------------------------------------------------------ hostile inputs (issue 55)


@pytest.mark.parametrize(("content", "said"), [
    ("[1, 2]", "holds a JSON object, this one a list"),
    ('{"rows": [], "x": 1e400}', "the number 1e400 is out of range"),
    ('{"x": NaN}', "NaN is no number"),
    ("{not json", "not JSON (Expecting property name"),
    (b"\xff\xfe", "not UTF-8 text"),
])
def test_a_bad_results_file_is_one_line_naming_it(tmp_path: Path, content, said) -> None:
    """Issue 55 (7): unreadable stored results end in one line naming the file, never a traceback, and a
    stored 1e400 is refused rather than written back as Infinity."""
    path = tmp_path / "r.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    import re

    with pytest.raises(SystemExit, match=f"{re.escape(str(path))}: .*{re.escape(said)}"):
        harness.load(path)
    with pytest.raises(SystemExit, match=re.escape(said)):
        rows.rewrite(path, lambda r: [])
    assert path.read_bytes() == (content if isinstance(content, bytes) else content.encode())  # untouched


def test_merge_reads_within_bounds_and_names_malformed_files(tmp_path: Path) -> None:
    """Issue 55 (7): --merge /dev/zero read without limit; now it is refused at once, a file over the size
    limit is refused before it is parsed, and a file missing what a script reads is named."""
    answers = _load("answers")
    with pytest.raises(SystemExit, match="/dev/zero: not a regular file"):
        answers.main(["--merge", "/dev/zero", "--out", str(tmp_path / "o.json")])
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(rows.MAX_RESULTS_BYTES + 1)
    with pytest.raises(SystemExit, match="larger than 64 MiB"):
        answers.main(["--merge", str(big), "--out", str(tmp_path / "o.json")])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"datasets": {"hotpotqa": {"0": {"results": "a string, not an object"}}}}))
    with pytest.raises(SystemExit, match=f"{bad}: malformed results"):
        answers.main(["--merge", str(bad), "--out", str(tmp_path / "o.json")])
    assert not (tmp_path / "o.json").exists()


def test_out_must_be_a_file_and_numbers_and_names_are_checked(tmp_path: Path, capsys) -> None:
    """Issue 55 (7): --out naming a folder, --budget nan and --parts ,, are usage errors (exit 2, one line)."""
    gpu = _load("gpu_check")
    for argv, said in ((["--out", str(tmp_path)], "is a folder"), (["--budget", "nan"], "finite number of seconds"),
                       (["--budget", "-3"], "finite number of seconds"), (["--parts", ",,"], "no part given"),
                       (["--parts", "train,bogus"], "unknown part bogus")):
        with pytest.raises(SystemExit) as info:
            gpu.main([*argv, "--out", str(tmp_path / "g.json")] if argv[0] != "--out" else argv)
        assert info.value.code == 2 and said in capsys.readouterr().err
    assert harness.name_list("train, tests", ("train", "tests"), "part") == ["train", "tests"]
