"""The stage contract, for every registry entry: one runner (`purecover.contract.execute_stage`) gives each stage

* a rerun that does nothing (outputs and manifest untouched),
* a changed configuration refused (``refuse`` stages) or recomputed (``rerun`` stages),
* a kill between its outputs and its complete manifest resumed to the same outputs,
* a deleted or edited output redone (the edited one set aside), never recorded as fine.

The real stages run on the demo set with the demo's offline-built tiny model; the attention estimator's
run covers calibrate, the embedding estimator's run with a student covers the other six. SIGKILLs at
random points inside the stages are the kill drill's (tests/test_kill_drill.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from purecover.config import load_recipe
from purecover.contract import StageBlockedError, execute_stage, stage_directory
from purecover.pipeline import run_pipeline
from purecover.rundir import RunDir
from purecover.stages import STAGES

DEMO = Path(__file__).resolve().parents[1] / "configs" / "recipes" / "demo_cpu.yaml"

# A key of each stage's hashed sections whose change must refuse or recompute that stage.
CHANGE = {
    "data": "data.bm25_stopwords=null",
    "calibrate": "teacher.calibration_lengths=24",
    "label": "teacher.lam=0.3",
    "train": "student.lm_weight=0.5",
    "export": "export.merge=false",
    "select": "data.k1=6",
    "evaluate": "eval.budgets=[1,2]",
}
# The file a test deletes or edits inside a directory output (weights are checked by size, configs by content).
DELETE = {"final": "adapter_model.safetensors", "selector": "model.safetensors"}
EDIT = {"final": "adapter_config.json", "selector": "selector_config.json"}


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory) -> Path:
    from purecover.demo.assets import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("assets"))


def _sets(run_dir: Path, model: Path, *extra: str) -> list[str]:
    return [f"run_dir={run_dir}", f"teacher.model={model}", f"student.model={model}", f"eval.generator={model}",
            "data.limit=8", "student.training.max_steps=3", "student.training.save_steps=2", "eval.budgets=[1,3]",
            "eval.max_new_tokens=2", "student.eval_fraction=0.4", *extra]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory, demo_model) -> dict[str, tuple[Path, list[str]]]:
    """Two complete runs: embedding estimator with a student, attention estimator (calibrated) without."""
    runs = {}
    for kind, extra in (("student", ()), ("attention", ("teacher.estimator=attention",
                                                         "eval.methods=[retrieval,teacher]"))):
        run_dir = tmp_path_factory.mktemp(kind) / "run"
        sets = _sets(run_dir, demo_model, *extra)
        run_pipeline(load_recipe(DEMO, sets), show_progress=False, echo=lambda _: None)
        runs[kind] = (run_dir, sets)
    return runs


@pytest.fixture
def run_copy(finished_runs, tmp_path, request):
    """A private copy of the complete run that has stage `request.param` (the copy's recipe)."""
    name = request.param
    run_dir, sets = finished_runs["attention" if name == "calibrate" else "student"]
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    sets = [s if not s.startswith("run_dir=") else f"run_dir={copy}" for s in sets]
    return name, sets


def _recipe(sets: list[str], *extra: str):
    return load_recipe(DEMO, [*sets, *extra])


# Files whose bytes carry the run directory's path, times or versions: compared by what they hold.
_SKIPPED = {"README.md", "report.md", "training_args.bin"}


def _normalised(f: Path, data: bytes) -> bytes:
    if f.name == "metrics.json":  # the resolved recipe inside names the run directory
        return json.dumps(json.loads(data)["results"], sort_keys=True).encode()
    if f.name == "bias.json":  # keys name the model path; provenance carries versions
        return json.dumps(json.loads(data)["bias"]).encode()
    if f.name == "purecover_student.json":  # its summary names the run directory; the log has timings
        meta = json.loads(data)
        return json.dumps({k: v for k, v in meta.items() if k not in ("summary", "log_history")},
                          sort_keys=True).encode()
    return data


def _snapshot(rd: RunDir, name: str) -> dict[str, bytes]:
    out = {}
    for path in rd.outputs(name):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if f.name in _SKIPPED or f.suffix == ".png":
                continue
            out[str(f.relative_to(rd.path))] = _normalised(f, f.read_bytes())
    return out


STAGE_NAMES = list(STAGES)


def _stage_and_victim(run_copy, files: dict[str, str]):
    """(name, recipe, run directory, outputs snapshot, first output, the file of it a test damages)."""
    name, sets = run_copy
    recipe = _recipe(sets)
    rd = stage_directory(recipe, name)
    output = rd.outputs(name)[0]
    victim = output / files[output.name] if output.is_dir() else output
    return name, recipe, rd, _snapshot(rd, name), output, victim


@pytest.mark.parametrize("run_copy", STAGE_NAMES, indirect=True)
def test_rerun_is_a_no_op(run_copy):
    name, sets = run_copy
    recipe = _recipe(sets)
    rd = stage_directory(recipe, name)
    before, manifest = _snapshot(rd, name), rd.manifest_path(name).read_bytes()
    outcome = execute_stage(name, recipe, show_progress=False, with_before=False)
    assert outcome.action == "skip"
    assert _snapshot(rd, name) == before and rd.manifest_path(name).read_bytes() == manifest


@pytest.mark.parametrize("run_copy", STAGE_NAMES, indirect=True)
def test_a_changed_configuration_is_refused_or_recomputed(run_copy):
    name, sets = run_copy
    changed = _recipe(sets, CHANGE[name])
    rd = stage_directory(changed, name)
    manifest = rd.manifest_path(name).read_bytes()
    if STAGES[name].on_change == "refuse":
        with pytest.raises(StageBlockedError, match=f"stage {name}: .* was made with a different"):
            execute_stage(name, changed, show_progress=False, with_before=False)
        assert rd.manifest_path(name).read_bytes() == manifest  # nothing was touched
    else:
        outcome = execute_stage(name, changed, show_progress=False, with_before=False)
        assert outcome.action == "ran" and rd.manifest(name).config_hash != json.loads(manifest)["config_hash"]


@pytest.mark.parametrize("run_copy", STAGE_NAMES, indirect=True)
def test_killed_before_its_manifest_completes_it_resumes_to_the_same_outputs(run_copy, monkeypatch):
    name, sets = run_copy
    recipe = _recipe(sets)
    rd = stage_directory(recipe, name)
    before = _snapshot(rd, name)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a kill after the outputs were written, before the manifest said so

    with monkeypatch.context() as m:
        m.setattr(RunDir, "complete", killed)
        with pytest.raises(KeyboardInterrupt):
            execute_stage(name, recipe, show_progress=False, with_before=False, force=True)
    assert rd.manifest(name).summary.status == "running"
    outcome = execute_stage(name, recipe, show_progress=False, with_before=False)
    assert outcome.action == "resumed"
    assert _snapshot(rd, name) == before and rd.manifest(name).summary.status == "complete"


@pytest.mark.parametrize("run_copy", STAGE_NAMES, indirect=True)
def test_a_deleted_output_is_redone_not_recorded_as_fine(run_copy):
    name, recipe, rd, before, _, victim = _stage_and_victim(run_copy, DELETE)
    victim.unlink()
    status = rd.status(name, rd.manifest(name).config_hash)
    assert status.action == "redo" and "is missing" in status.reason
    outcome = execute_stage(name, recipe, show_progress=False, with_before=False)
    assert outcome.action == "redone" and victim.is_file()
    assert _snapshot(rd, name) == before
    assert execute_stage(name, recipe, show_progress=False, with_before=False).action == "skip"


@pytest.mark.parametrize("run_copy", [n for n in STAGE_NAMES if n != "evaluate"], indirect=True)
def test_an_edited_output_is_set_aside_and_redone(run_copy):
    name, recipe, rd, before, output, victim = _stage_and_victim(run_copy, EDIT)
    edited = victim.read_bytes()[::-1]  # same size, other bytes
    victim.write_bytes(edited)
    outcome = execute_stage(name, recipe, show_progress=False, with_before=False)
    assert outcome.action == "redone"
    assert _snapshot(rd, name) == before
    aside = list(output.parent.glob(f"{output.name}.damaged-*"))
    assert len(aside) == 1  # never deleted: the edited copy is kept beside
    kept = aside[0] / victim.relative_to(output) if aside[0].is_dir() else aside[0]
    assert kept.read_bytes() == edited


# --- tampering the cheap checks used to miss ------------------------------------------------------------

@pytest.mark.parametrize("run_copy", ["label"], indirect=True)
def test_candidates_reordered_after_label_block_the_stages_that_read_them(run_copy):
    from purecover.pipeline import plan_pipeline

    _, sets = run_copy
    recipe = _recipe(sets)
    path = recipe.run_path / "candidates.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["docs"] = first["docs"][::-1]  # the same lines count and keys, another document order
    path.write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    plan = {p.stage: p for p in plan_pipeline(recipe)}
    assert plan["data"].action == "redo"  # its own output was changed
    with pytest.raises(StageBlockedError, match="stage label: its input changed since it ran .*candidates.jsonl"):
        execute_stage("label", recipe, show_progress=False, with_before=False)


def test_a_dataset_file_edited_in_place_blocks_the_data_stage(tmp_path):
    from purecover.data.loaders import demo_path  # the bundled demo questions, copied to a local file

    dataset = tmp_path / "questions.json"
    dataset.write_bytes(demo_path().read_bytes())
    recipe = load_recipe(DEMO, [f"run_dir={tmp_path / 'run'}", f"data.path={dataset}", "data.limit=4"])
    assert execute_stage("data", recipe, show_progress=False).action == "ran"
    assert execute_stage("data", recipe, show_progress=False).action == "skip"
    data = json.loads(dataset.read_text())
    data[0]["question"] = data[0]["question"] + " (edited)"
    dataset.write_text(json.dumps(data))
    with pytest.raises(StageBlockedError, match=r"stage data: its input changed since it ran \(data.path "):
        execute_stage("data", recipe, show_progress=False)


@pytest.mark.parametrize("run_copy", ["label"], indirect=True)
def test_a_partly_done_label_stage_never_resumes_onto_other_candidates(run_copy, monkeypatch):
    """Killed part-way, then the candidates change (the data stage rerun on fixed data): resuming would mix labels
    of the old candidates with labels of the new ones, so the label stage is refused, naming what to delete."""
    from purecover.pipeline import plan_pipeline

    name, sets = run_copy
    recipe = _recipe(sets)
    rd = stage_directory(recipe, name)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(RunDir, "complete", killed)
        with pytest.raises(KeyboardInterrupt):
            execute_stage(name, recipe, show_progress=False, with_before=False, force=True)
    assert rd.manifest(name).summary.status == "running" and rd.manifest(name).inputs
    path = recipe.run_path / "candidates.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["docs"] = first["docs"][::-1]
    path.write_bytes(json.dumps(first).encode() + b"\n" + b"".join(lines[1:]))
    stage_directory(recipe, "data").record_outputs("data")  # as if the data stage had made these candidates
    labels = (recipe.run_path / "labels.jsonl").read_bytes()
    plan = {p.stage: p for p in plan_pipeline(recipe)}
    assert plan["data"].action == "skip" and plan["label"].action == "blocked"
    with pytest.raises(StageBlockedError, match=r"stage label: partly done from other inputs \(.*candidates.jsonl.*"
                                                r"delete .*labels.jsonl"):
        execute_stage(name, recipe, show_progress=False, with_before=False)
    assert (recipe.run_path / "labels.jsonl").read_bytes() == labels  # nothing touched


def test_deleting_the_outputs_of_a_stage_whose_input_changed_lets_it_run(tmp_path):
    """A changed input blocks a stage while its old outputs are there; once the user deletes them (what the
    message says), the stage runs: it is never left blocked with nothing to delete."""
    from purecover.data.loaders import demo_path

    dataset = tmp_path / "questions.json"
    dataset.write_bytes(demo_path().read_bytes())
    recipe = load_recipe(DEMO, [f"run_dir={tmp_path / 'run'}", f"data.path={dataset}", "data.limit=4"])
    assert execute_stage("data", recipe, show_progress=False).action == "ran"
    data = json.loads(dataset.read_text())
    data[0]["question"] += " (edited)"
    dataset.write_text(json.dumps(data))
    with pytest.raises(StageBlockedError, match=r"delete \S*candidates.jsonl") as blocked:
        execute_stage("data", recipe, show_progress=False)
    assert not str(blocked.value).rstrip().endswith("delete")
    for out in stage_directory(recipe, "data").outputs("data"):
        if out.is_dir():
            shutil.rmtree(out)
        else:
            out.unlink(missing_ok=True)
    assert execute_stage("data", recipe, show_progress=False).action == "ran"
    assert "(edited)" in (recipe.run_path / "candidates.jsonl").read_text()


@pytest.mark.parametrize("run_copy", ["export"], indirect=True)
def test_reexport_after_deleting_the_selector_and_selections_is_planned_and_runs(run_copy):
    """Deleting run_dir/selector (and the selections) reruns export, select and evaluate; nothing is blocked."""
    from purecover.pipeline import plan_pipeline

    _, sets = run_copy
    recipe = _recipe(sets)
    before = (recipe.run_path / "selections.jsonl").read_bytes()
    shutil.rmtree(recipe.run_path / "selector")
    (recipe.run_path / "selections.jsonl").unlink()
    plan = {p.stage: p.action for p in plan_pipeline(recipe)}
    assert plan["export"] == "redo" and plan["select"] == "run" and plan["evaluate"] == "run", plan  # after export
    rows = {r.stage: r for r in run_pipeline(recipe, show_progress=False, echo=lambda _: None)}
    assert rows["export"].action == rows["select"].action == "redone"  # complete, its output missing
    assert (recipe.run_path / "selections.jsonl").read_bytes() == before
    assert rows["data"].seconds is None and rows["data"].action == "skip"  # skipped stages do not say "ran 0.0"


@pytest.mark.parametrize("run_copy", ["export"], indirect=True)
def test_only_selector_deleted_is_not_blocked_before_export_recreates_it(run_copy):
    from purecover.pipeline import plan_pipeline

    _, sets = run_copy
    recipe = _recipe(sets)
    shutil.rmtree(recipe.run_path / "selector")
    plan = {p.stage: p.action for p in plan_pipeline(recipe)}
    assert plan["export"] == "redo" and plan["select"] == "run"
    rows = {r.stage: r for r in run_pipeline(recipe, show_progress=False, echo=lambda _: None)}
    assert rows["select"].action == "skip"  # the same selector again: its selections stand


@pytest.mark.parametrize("run_copy", ["export"], indirect=True)
def test_from_reruns_complete_stages(run_copy):
    _, sets = run_copy
    recipe = _recipe(sets)
    rows = {r.stage: r for r in run_pipeline(recipe, start="export", show_progress=False, echo=lambda _: None)}
    assert rows["train"].action == "skip"
    assert rows["export"].action == rows["select"].action == rows["evaluate"].action == "rerun"
    assert rows["export"].seconds is not None


@pytest.mark.parametrize("run_copy", ["export"], indirect=True)
def test_a_kill_inside_the_export_swap_leaves_nothing_a_rerun_does_not_clean(run_copy):
    _, sets = run_copy
    recipe = _recipe(sets)
    selector = recipe.run_path / "selector"
    leftover = recipe.run_path / ".selector.old-deadbeef"  # what a kill between the two renames leaves
    shutil.copytree(selector, leftover)
    execute_stage("export", recipe, show_progress=False, force=True)
    assert not leftover.exists() and (selector / "selector_config.json").is_file()


def test_every_output_of_a_run_honours_the_umask(finished_runs):
    """Outputs are as readable as the umask says (the test process's, 022 unless the caller set another): a
    selector, its labels and reports can be shared with another user or a non-root container. Libraries and
    temporary-file helpers create 0600 files; what ends in the run directory must not stay so."""
    from purecover.utils.io import current_umask

    mask = current_umask()
    for run_dir, _ in finished_runs.values():
        wrong = [f"{p.relative_to(run_dir)} {oct(p.stat().st_mode & 0o777)}" for p in sorted(run_dir.rglob("*"))
                 if not p.is_symlink() and p.stat().st_mode & 0o777 & ~mask != (0o777 if p.is_dir() else 0o666) & ~mask
                 and p.name != ".purecover.lock"]
        assert not wrong, f"not {oct(0o666 & ~mask)} / {oct(0o777 & ~mask)} under umask {oct(mask)}: {wrong[:12]}"
