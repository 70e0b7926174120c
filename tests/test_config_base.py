"""Recipes that compose: the `base` key of a recipe and how bases merge underneath it."""

from __future__ import annotations

from pathlib import Path

import pytest

from purecover.config import ConfigError, dump_recipe_yaml, load_recipe, recipe_to_dict


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, *match: str, overrides: tuple[str, ...] = ()) -> str:
    """The one-line ConfigError loading `path` raises; each of `match` is in it."""
    with pytest.raises(ConfigError) as info:
        load_recipe(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    for part in match:
        assert part in message, message
    return message


def test_sections_merge_key_by_key_at_every_depth(tmp_path):
    write(tmp_path / "base.yaml", "run_dir: runs/base\nseed: 4\nteacher:\n  lam: 0.3\n  budget: 7\n"
          "  lancer: {beta: 0.5, n_subquestions: 3}\nstudent:\n  training: {learning_rate: 1.0e-5, logging_steps: 10}\n")
    top = write(tmp_path / "top.yaml", "base: base.yaml\nrun_dir: runs/top\nteacher:\n  lancer: {beta: 0.1}\n"
                "student:\n  training: {max_steps: 40}\n")
    r = load_recipe(top)
    assert r.run_dir == "runs/top" and r.seed == 4
    assert r.teacher.lam == 0.3 and r.teacher.budget == 7  # siblings of an overridden key stay
    assert r.teacher.lancer.beta == 0.1 and r.teacher.lancer.n_subquestions == 3
    # a free-form mapping merges too, the base's keys first
    assert r.student.training == {"learning_rate": 1e-5, "logging_steps": 10, "max_steps": 40}
    assert list(r.student.training) == ["learning_rate", "logging_steps", "max_steps"]


def test_lists_scalars_and_null_replace_the_base_value(tmp_path):
    write(tmp_path / "base.yaml", "data:\n  limit: 100\n  k1: 30\neval:\n  budgets: [1, 3, 5, 10]\n"
          "  methods: [retrieval, teacher, student]\nteacher:\n  layers: [0, 1, 2]\n")
    top = write(tmp_path / "top.yaml", "base: base.yaml\ndata:\n  limit: null\neval:\n  budgets: [2]\n"
                "  table_budget: 2\nteacher:\n  layers: all\n")
    r = load_recipe(top)
    assert r.eval.budgets == [2]  # replaced, not appended or merged item by item
    assert r.eval.methods == ["retrieval", "teacher", "student"]
    assert r.data.limit is None and r.data.k1 == 30
    assert r.teacher.layers == "all"  # a list replaced by a scalar


def test_later_bases_override_earlier_ones_and_the_recipe_overrides_all(tmp_path):
    write(tmp_path / "a.yaml", "seed: 1\nteacher: {lam: 0.1, budget: 3}\ndata: {k1: 11}\n")
    write(tmp_path / "b.yaml", "seed: 2\nteacher: {lam: 0.2}\n")
    top = write(tmp_path / "top.yaml", "base: [a.yaml, b.yaml]\nteacher: {budget: 9}\n")
    r = load_recipe(top)
    assert r.seed == 2 and r.teacher.lam == 0.2  # b over a
    assert r.teacher.budget == 9  # the recipe over both
    assert r.data.k1 == 11  # what only a sets stays
    flipped = write(tmp_path / "flipped.yaml", "base: [b.yaml, a.yaml]\n")
    assert load_recipe(flipped).seed == 1 and load_recipe(flipped).teacher.lam == 0.1


def test_base_paths_are_relative_to_the_folder_of_the_file_naming_them(tmp_path, monkeypatch):
    write(tmp_path / "shared" / "deeper" / "root.yaml", "seed: 5\ndata: {k1: 12}\n")
    write(tmp_path / "shared" / "common.yaml", "base: deeper/root.yaml\ndata: {k1: 13, limit: 50}\n")
    top = write(tmp_path / "recipes" / "sub" / "top.yaml", "base: ../../shared/common.yaml\nrun_dir: runs/x\n")
    # a decoy next to the working directory: the base must not be looked up from there
    write(tmp_path / "cwd" / "shared" / "common.yaml", "seed: 99\n")
    monkeypatch.chdir(tmp_path / "cwd")
    r = load_recipe(Path("..") / "recipes" / "sub" / "top.yaml")
    assert r.seed == 5 and r.data.k1 == 13 and r.data.limit == 50 and r.run_dir == "runs/x"
    assert load_recipe(top) == r  # the same from an absolute path


def test_a_chain_of_three_bases_resolves_from_the_bottom_up(tmp_path):
    write(tmp_path / "b3.yaml", "seed: 3\nteacher: {lam: 0.3, budget: 3, tau_stop: 0.03}\n")
    write(tmp_path / "b2.yaml", "base: b3.yaml\nseed: 2\nteacher: {lam: 0.2, budget: 2}\n")
    write(tmp_path / "b1.yaml", "base: b2.yaml\nseed: 1\nteacher: {lam: 0.1}\n")
    top = write(tmp_path / "top.yaml", "base: b1.yaml\nrun_dir: runs/chain\n")
    r = load_recipe(top)
    assert r.run_dir == "runs/chain" and r.seed == 1
    assert (r.teacher.lam, r.teacher.budget, r.teacher.tau_stop) == (0.1, 2, 0.03)


def test_a_base_shared_along_two_paths_is_not_a_cycle(tmp_path):
    write(tmp_path / "root.yaml", "seed: 7\n")
    write(tmp_path / "left.yaml", "base: root.yaml\ndata: {k1: 21}\n")
    write(tmp_path / "right.yaml", "base: root.yaml\nteacher: {budget: 4}\n")
    r = load_recipe(write(tmp_path / "top.yaml", "base: [left.yaml, right.yaml]\n"))
    assert (r.seed, r.data.k1, r.teacher.budget) == (7, 21, 4)


def test_overrides_apply_after_the_bases(tmp_path):
    write(tmp_path / "base.yaml", "teacher: {lam: 0.3, budget: 5}\neval: {budgets: [1, 3, 5]}\n")
    top = write(tmp_path / "top.yaml", "base: base.yaml\nteacher: {lam: 0.5}\n")
    r = load_recipe(top, ["teacher.lam=0.9", "eval.budgets=[1, 3]", "teacher.lancer.beta=0.2"])
    assert r.teacher.lam == 0.9 and r.teacher.budget == 5 and r.teacher.lancer.beta == 0.2
    assert r.eval.budgets == [1, 3]
    refused(top, "unknown key 'base'", overrides=("base=other.yaml",))  # bases come from files only


def test_the_resolved_recipe_has_no_base_key(tmp_path, capsys):
    from purecover.cli import main

    write(tmp_path / "base.yaml", "run_dir: runs/from-base\nteacher: {lam: 0.25}\n")
    top = write(tmp_path / "top.yaml", "base: base.yaml\nteacher: {budget: 4}\n")
    r = load_recipe(top)
    assert "base" not in recipe_to_dict(r)
    assert main(["config", str(top)]) == 0
    printed = capsys.readouterr().out
    assert printed == dump_recipe_yaml(r)
    assert not any(line.startswith("base:") for line in printed.splitlines())
    assert "run_dir: runs/from-base" in printed and "lam: 0.25" in printed and "budget: 4" in printed


@pytest.mark.parametrize("self_cycle", [False, True])
def test_a_cycle_of_bases_is_refused_naming_it(tmp_path, monkeypatch, self_cycle):
    monkeypatch.chdir(tmp_path)
    if self_cycle:
        write(tmp_path / "a.yaml", "base: a.yaml\n")
        refused(Path("a.yaml"), "a.yaml: base recipes form a cycle: a.yaml -> a.yaml")
    else:
        write(tmp_path / "a.yaml", "base: b.yaml\nseed: 1\n")
        write(tmp_path / "b.yaml", "base: [c.yaml, a.yaml]\n")
        write(tmp_path / "c.yaml", "seed: 2\n")
        refused(Path("a.yaml"), "a.yaml: base recipes form a cycle: a.yaml -> b.yaml -> a.yaml")


def test_a_missing_base_is_refused_naming_the_recipe_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ok.yaml", "seed: 1\n")
    write(tmp_path / "one.yaml", "base: nope.yaml\n")
    refused(Path("one.yaml"), "one.yaml: base: base recipe 'nope.yaml' does not exist")
    write(tmp_path / "sub" / "many.yaml", "base: [../ok.yaml, missing.yaml]\n")
    refused(Path("sub/many.yaml"), "many.yaml: base[1]: base recipe 'missing.yaml' does not exist",
            "looked for sub/missing.yaml")
    # deeper in a chain, the message names the recipe that names the missing file
    write(tmp_path / "top.yaml", "base: one.yaml\n")
    refused(Path("top.yaml"), "one.yaml: base: base recipe 'nope.yaml'")


@pytest.mark.parametrize(("content", "match"), [
    ("- a\n- b\n", "base.yaml: a base recipe must be a YAML mapping, got list (a base of top.yaml)"),
    ("3\n", "a base recipe must be a YAML mapping, got int"),
    ("# only a comment\n", "base recipe base.yaml (a base of top.yaml) is empty"),
])
def test_a_base_that_is_not_a_mapping_is_refused(tmp_path, monkeypatch, content, match):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", content)
    write(tmp_path / "top.yaml", "base: base.yaml\nseed: 1\n")
    refused(Path("top.yaml"), match)


@pytest.mark.parametrize("value", ["3", "[]", "''", "{a: b.yaml}", "[ok.yaml, 3]"])
def test_a_base_value_that_is_not_paths_is_refused(tmp_path, value):
    write(tmp_path / "ok.yaml", "seed: 1\n")
    top = write(tmp_path / "top.yaml", f"base: {value}\n")
    refused(top, "top.yaml: base: expected a path or a non-empty list of paths")


def test_errors_in_a_base_file_name_that_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "base.yaml", "seed: 1\nseed: 2\n")
    write(tmp_path / "top.yaml", "base: base.yaml\n")
    refused(Path("top.yaml"), "base.yaml: duplicate key 'seed'")
    write(tmp_path / "base.yaml", "teacher: {lam: [oops\n")
    with pytest.raises(ConfigError, match=r"^base\.yaml: invalid YAML"):
        load_recipe(Path("top.yaml"))


def test_hostile_recipe_files_are_recipe_errors_that_name_the_file(tmp_path, monkeypatch):
    """A 1,500-deep base chain, a base that is /proc/self/environ (control characters), an alias bomb, a huge file
    and a non-UTF-8 file: each a ConfigError naming the file, at once (no recursion error, no hang)."""
    import time

    monkeypatch.chdir(tmp_path)
    for i in range(1500):
        (tmp_path / f"r{i}.yaml").write_text(f"base: r{i + 1}.yaml\nseed: {i}\n" if i < 1499 else "seed: 1\n")
    with pytest.raises(ConfigError, match=r"r0.yaml: base recipes nest deeper than 32 \(r0.yaml -> r1.yaml -> "):
        load_recipe("r0.yaml")
    for i in range(31, 1500):  # a chain within the limit still resolves
        (tmp_path / f"r{i}.yaml").unlink()
    (tmp_path / "r30.yaml").write_text("seed: 7\n")
    assert load_recipe("r0.yaml").seed == 0 and load_recipe("r29.yaml").seed == 29
    if Path("/proc/self/environ").is_file():
        (tmp_path / "proc.yaml").write_text("base: /proc/self/environ\n")
        with pytest.raises(ConfigError, match=r"/proc/self/environ: invalid YAML: unacceptable character #x0000"):
            load_recipe("proc.yaml")
    names = "abcdefghij"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{names[i + 1]}: &{names[i + 1]} [{', '.join([f'*{names[i]}'] * 10)}]\n" for i in range(9))
    (tmp_path / "bomb.yaml").write_text(bomb)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml: the YAML expands to more than 100,000 values"):
        load_recipe("bomb.yaml")
    assert time.perf_counter() - start < 10
    with pytest.raises(ConfigError, match=r"override seed: the YAML expands"):
        load_recipe(None, ["seed=" + "{" + bomb.replace("\n", ", ") + "}"])
    (tmp_path / "big.yaml").write_text("# " + "x" * 1_100_000 + "\nseed: 1\n")
    with pytest.raises(ConfigError, match=r"big.yaml: a recipe is larger than 1,000,000 bytes"):
        load_recipe("big.yaml")
    (tmp_path / "latin1.yaml").write_bytes("seed: 1 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml: a recipe is not UTF-8 text"):
        load_recipe("latin1.yaml")
    (tmp_path / "bom.yaml").write_bytes(b"\xef\xbb\xbfseed: 3\n")
    assert load_recipe("bom.yaml").seed == 3
