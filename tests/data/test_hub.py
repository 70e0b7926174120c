"""Hub loading on local folders laid out like Hub dataset repositories (real `datasets`, no network).

The folders mirror the real repositories: HotpotQA (`hotpotqa/hotpot_qa`: configs ``distractor`` and
``fullwiki`` declared on the card, splits ``train``/``validation``, the Hub's dict-of-columns layout)
and FlashRAG (`RUC-NLPIR/FlashRAG_datasets`: ``<dataset>/<split>.jsonl`` files, splits ``train``/``dev``,
where a dataset's folder may not be declared on the card, as StrategyQA's).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from purecover.cli import main
from purecover.config import load_recipe
from purecover.data.data_stage import evaluation_recipe, run_data_stage
from purecover.data.errors import HubDatasetError
from purecover.data.loaders import ExampleSource, load_examples
from purecover.data.loaders.hub import resolve_hub_dataset
from purecover.data.readers import iter_records
from tests.conftest import hotpot_record, write_jsonl


def hub_layout(record: dict) -> dict:
    """An official HotpotQA record in the Hub's column layout (`id`, dicts of columns)."""
    return {"id": record["_id"], "question": record["question"], "answer": record["answer"],
            "type": record.get("type", "bridge"), "level": record.get("level", "easy"),
            "supporting_facts": {"title": [t for t, _ in record["supporting_facts"]],
                                 "sent_id": [i for _, i in record["supporting_facts"]]},
            "context": {"title": [t for t, _ in record["context"]],
                        "sentences": [s for _, s in record["context"]]}}


def card(configs: dict[str, dict[str, str]]) -> str:
    """A dataset card whose YAML front matter declares `configs` (name -> split -> file)."""
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        lines += [f"  - split: {split}\n    path: {path}" for split, path in splits.items()]
    return "\n".join([*lines, "---", "", "# test repository", ""])


def hotpot_repo(root: Path, train: list[dict], validation: list[dict]) -> Path:
    for config in ("distractor", "fullwiki"):
        (root / config).mkdir(parents=True)
        write_jsonl(root / config / "train.jsonl", [hub_layout(r) for r in train])
        write_jsonl(root / config / "validation.jsonl", [hub_layout(r) for r in validation])
    (root / "README.md").write_text(card({c: {"train": f"{c}/train.jsonl", "validation": f"{c}/validation.jsonl"}
                                          for c in ("distractor", "fullwiki")}), encoding="utf-8")
    return root


def flashrag_row(qid: str, answer: str = "Mirren", **meta) -> dict:
    return {"id": qid, "question": f"Question {qid}?", "golden_answers": [answer], "metadata": meta}


def flashrag_repo(root: Path, strategy_rows: list[dict]) -> Path:
    """hotpotqa declared on the card (train/dev); strategyqa only as files (train), like FlashRAG's."""
    (root / "hotpotqa").mkdir(parents=True)
    (root / "strategyqa").mkdir()
    hp = hotpot_record()
    meta = {"context": hp["context"], "supporting_facts": hp["supporting_facts"]}
    write_jsonl(root / "hotpotqa" / "train.jsonl", [flashrag_row("h1", **meta), flashrag_row("h2", **meta)])
    write_jsonl(root / "hotpotqa" / "dev.jsonl", [flashrag_row("h3", **meta)])
    write_jsonl(root / "strategyqa" / "train.jsonl", strategy_rows)
    (root / "README.md").write_text(card({"hotpotqa": {"train": "hotpotqa/train.jsonl", "dev": "hotpotqa/dev.jsonl"}}),
                                    encoding="utf-8")
    return root


STRATEGY_ROWS = [flashrag_row("s1", "yes", facts=["Owls hunt at night."]),
                 flashrag_row("s2", "no", facts=["Fish cannot climb trees."])]


@pytest.fixture
def hotpot(tmp_path):
    return hotpot_repo(tmp_path / "hotpot", [hotpot_record("t1")], [hotpot_record("v1"), hotpot_record("v2")])


@pytest.fixture
def flashrag(tmp_path):
    return flashrag_repo(tmp_path / "flashrag", STRATEGY_ROWS)


# --------------------------------------------------------------------------- resolution


def test_dev_resolves_to_validation_and_back(hotpot, flashrag, caplog):
    with caplog.at_level("INFO", logger="purecover.data.loaders.hub"):
        r = resolve_hub_dataset(str(hotpot), "hotpotqa", "distractor", "dev")
    assert (r.config, r.split, r.local, r.checked) == ("distractor", "validation", True, True)
    assert "split 'dev' does not exist: using 'validation'" in caplog.text
    # FlashRAG names it dev: asking for validation (or val) finds dev.
    assert resolve_hub_dataset(str(flashrag), "hotpotqa", "hotpotqa", "validation").split == "dev"
    assert resolve_hub_dataset(str(flashrag), "hotpotqa", "hotpotqa", "val").split == "dev"
    assert resolve_hub_dataset(str(flashrag), "hotpotqa", "hotpotqa", "train").notes == []
    # ...and the rows come from the split that was used.
    source = ExampleSource("hotpotqa", str(hotpot), split="dev", hub_config="distractor")
    assert [e.qid for e in source] == ["v1", "v2"]
    assert source.resolved is not None and source.resolved.split == "validation"


def test_hotpotqa_hub_names_default_to_distractor(tmp_path, monkeypatch, caplog):
    # A local copy at the Hub id's relative path resolves exactly like the Hub id itself.
    hotpot_repo(tmp_path / "hotpotqa" / "hotpot_qa", [hotpot_record("t1")], [hotpot_record("v1")])
    monkeypatch.chdir(tmp_path)
    with caplog.at_level("INFO", logger="purecover.data.loaders.hub"):
        examples = load_examples("hotpotqa", "hotpotqa/hotpot_qa", split="dev")
    assert [e.qid for e in examples] == ["v1"]
    assert "data.hub_config is null: using 'distractor'" in caplog.text
    # Without a default, a repository with several configurations is an error naming the key.
    with pytest.raises(HubDatasetError, match=r"several configurations: distractor, fullwiki; set data.hub_config"):
        resolve_hub_dataset(str(tmp_path / "hotpotqa" / "hotpot_qa"), "hotpotqa", None, "dev")
    # Offline, the Hub ids (canonical and legacy) are not checked but keep the default.
    for name in ("hotpotqa/hotpot_qa", "hotpot_qa"):
        monkeypatch.chdir(tmp_path.parent)  # no such local folder here
        r = resolve_hub_dataset(name, "hotpotqa", None, "dev")
        assert (r.config, r.checked, r.local) == ("distractor", False, False)


def test_hub_column_layout_matches_the_official_records(sample_file, tmp_path):
    """Real HotpotQA dev records converted to the Hub's columns parse to the same examples."""
    records = [rec for _, rec in iter_records(sample_file("hotpotqa"))][:4]
    official = load_examples("hotpotqa", write_jsonl(tmp_path / "official.jsonl", records))
    repo = hotpot_repo(tmp_path / "repo", records[:1], records)
    hub = load_examples("hotpotqa", str(repo), split="validation", hub_config="distractor")
    assert [e.qid for e in hub] == [e.qid for e in official]
    for a, b in zip(hub, official):
        assert a.answers == b.answers and a.supporting_titles == b.supporting_titles
        assert [(p.title, p.text) for p in a.paragraphs] == [(p.title, p.text) for p in b.paragraphs]
        assert a.oracle_steps == b.oracle_steps and a.paragraphs


def test_undeclared_config_falls_back_to_its_data_files(flashrag, sample_file, tmp_path, caplog):
    with caplog.at_level("INFO", logger="purecover.data.loaders.hub"):
        examples = load_examples("strategyqa", str(flashrag), split="train", hub_config="strategyqa")
    assert [(e.qid, e.answers[0]) for e in examples] == [("s1", "yes"), ("s2", "no")]
    assert [p.text for p in examples[0].paragraphs] == ["Owls hunt at night."]
    assert "'strategyqa' is not declared on the dataset card: reading the repository's files strategyqa/train.jsonl" \
        in caplog.text
    r = resolve_hub_dataset(str(flashrag), "strategyqa", "strategyqa", "train")
    assert r.data_files == {"train": [f"{flashrag}/strategyqa/train.jsonl"]} and r.builder == "json"
    # The files' splits take the aliases too (a dev file answers a validation request) ...
    write_jsonl(flashrag / "strategyqa" / "dev.jsonl", [flashrag_row("s9", "no", facts=["A fact."])])
    assert resolve_hub_dataset(str(flashrag), "strategyqa", "strategyqa", "validation").split == "dev"
    # ... and a split with no file lists those that exist.
    with pytest.raises(HubDatasetError, match=r"folder 'strategyqa' .* no split 'test'; its splits: dev, train. "
                                              r"Set data.split"):
        resolve_hub_dataset(str(flashrag), "strategyqa", "strategyqa", "test")


def test_undeclared_config_with_real_strategyqa_rows(sample_file, tmp_path):
    """Real StrategyQA records in FlashRAG's row shape, read through the data-files fallback."""
    records = [rec for _, rec in iter_records(sample_file("strategyqa"))][:3]
    rows = [{"id": r["qid"], "question": r["question"], "golden_answers": ["yes" if r["answer"] else "no"],
             "metadata": {"facts": r["facts"], "decomposition": r["decomposition"]}} for r in records]
    repo = flashrag_repo(tmp_path / "flashrag", rows)
    examples = load_examples("strategyqa", str(repo), split="train", hub_config="strategyqa")
    assert [e.qid for e in examples] == [r["qid"] for r in records]
    assert [e.answers[0] for e in examples] == ["yes" if r["answer"] else "no" for r in records]
    assert [p.text for p in examples[0].paragraphs] == records[0]["facts"]


# --------------------------------------------------------------------------- errors


def test_errors_list_configs_and_splits_with_a_suggestion(flashrag, hotpot):
    with pytest.raises(HubDatasetError) as err:
        load_examples("hotpotqa", str(flashrag), split="dev", hub_config="hotpot")
    text = str(err.value)
    assert "has no configuration 'hotpot' (did you mean 'hotpotqa'?)" in text
    assert "its configurations: hotpotqa; folders with data files: strategyqa. Set data.hub_config" in text
    with pytest.raises(HubDatasetError, match=r"\(config 'distractor'\) has no split 'trian' \(did you mean 'train'\?\); "
                                              r"its splits: train, validation. Set eval.split"):
        list(ExampleSource("hotpotqa", str(hotpot), split="trian", hub_config="distractor", split_key="eval.split"))
    (flashrag / "empty").mkdir()
    with pytest.raises(HubDatasetError, match="not a readable dataset repository"):
        resolve_hub_dataset(str(flashrag / "empty"), "hotpotqa", None, "dev")


def test_not_a_hub_name_is_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_examples("hotpotqa", str(tmp_path / "nope.json"))


# --------------------------------------------------------------------------- data stage


def test_data_stage_records_the_resolved_split(hotpot, tmp_path):
    r = load_recipe(None, [f"run_dir={tmp_path / 'run'}", f"data.path={hotpot}", "data.hub_config=distractor",
                           "data.split=dev", "data.corpus=per_question", "data.k1=2"])
    summary = run_data_stage(r, show_progress=False)
    hub = json.loads((r.run_path / "data.run.json").read_text())["summary"]["hub"]
    assert hub == summary.figures()["hub"]
    assert (hub["config"], hub["split"], hub["requested_split"], hub["checked"]) == \
        ("distractor", "validation", "dev", True)
    assert summary.questions == 2 and any("using 'validation'" in n for n in hub["notes"])
    # Building eval.path's test set, a bad split names eval.split (the key the user set).
    bad = load_recipe(None, [f"run_dir={tmp_path / 'run2'}", f"data.path={hotpot}", "data.hub_config=distractor",
                             "data.split=train", f"eval.path={hotpot}", "eval.split=tset"])
    with pytest.raises(HubDatasetError, match=r"no split 'tset'; its splits: train, validation. Set eval.split"):
        run_data_stage(evaluation_recipe(bad), show_progress=False)


def test_test_set_hub_config(tmp_path):
    """eval.hub_config names the test set's configuration; unset, it follows data.hub_config only when
    eval.path is the training repository (FlashRAG's train and dev splits of one dataset)."""
    base = [f"run_dir={tmp_path / 'run'}", "data.path=RUC-NLPIR/FlashRAG_datasets", "data.hub_config=hotpotqa"]
    same = evaluation_recipe(load_recipe(None, [*base, "eval.path=RUC-NLPIR/FlashRAG_datasets"]))
    assert same.data.hub_config == "hotpotqa"
    other = evaluation_recipe(load_recipe(None, [*base, "eval.path=hotpotqa/hotpot_qa"]))
    assert other.data.hub_config is None  # the repository's own default (distractor for HotpotQA)
    named = evaluation_recipe(load_recipe(None, [*base, "eval.path=hotpotqa/hotpot_qa", "eval.hub_config=fullwiki"]))
    assert named.data.hub_config == "fullwiki" and named.data.path == "hotpotqa/hotpot_qa"


# --------------------------------------------------------------------------- dry run


def dry_run(capsys, tmp_path, *sets: str) -> tuple[int, str]:
    args = ["pipeline", "--dry-run", "--set", f"run_dir={tmp_path}/r"]
    for s in sets:
        args += ["--set", s]
    code = main(args)
    out, _ = capsys.readouterr()
    return code, out


def test_dry_run_resolves_local_repositories(capsys, tmp_path, hotpot):
    code, out = dry_run(capsys, tmp_path, f"data.path={hotpot}", "data.hub_config=distractor", "data.split=dev",
                        f"eval.path={hotpot}", "eval.split=tset")
    assert code == 0
    assert re.search(r"data\.path +found +\S+ +\(local dataset repository: config 'distractor', "
                     r"split 'validation' \(split 'dev' does not exist: using 'validation'", out)
    assert re.search(r"eval\.path +missing +\S+ +\(.*has no split 'tset'; its splits: train, validation. "
                     r"Set eval.split", out)


def test_dry_run_says_not_checked_offline(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out = dry_run(capsys, tmp_path, "data.path=hotpotqa/hotpot_qa", "data.split=dev")
    assert code == 0
    assert re.search(r"data\.path +hub +hotpotqa/hotpot_qa +\(Hub dataset, not checked: offline .*"
                     r"config 'distractor', split 'dev'", out)


def test_dry_run_says_not_checked_when_unreachable(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused at once
    t0 = time.perf_counter()
    code, out = dry_run(capsys, tmp_path, "data.path=RUC-NLPIR/FlashRAG_datasets", "data.dataset=musique")
    assert code == 0 and time.perf_counter() - t0 < 30
    assert re.search(r"data\.path +hub +RUC-NLPIR/FlashRAG_datasets +\(Hub dataset, not checked: the Hub is "
                     r"unreachable \(cannot reach the Hugging Face Hub at http://127.0.0.1:9", out)
