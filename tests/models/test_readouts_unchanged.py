"""What each readout renders, records and exports, against what purecover produced before the readouts became a
registry (issue 56: no behaviour change). The fixture tests/fixtures/readouts_before.json was written at commit
49ce1f6, before the registry, by ``python -m tests.models.test_readouts_unchanged SAMPLES_DIR``; a change to it is
a change of behaviour (a new prompt layout, a selector_config.json field, a recipe hash) and needs saying so. Said:
the ``hashes/*`` entries were rewritten when the HotpotQA real_cpu recipe took bfloat16 training and answering and
budgets 2 and 5 (issue 53's headline run), and again when it took the teacher's bfloat16 and batch of 1 and the
cross-encoder baseline's bfloat16 fine-tuning; the readouts' own entries are as written at 49ce1f6.

Compared: each readout's prompt template and rendered selector prompt (text, token ids, marker positions) on the
real Qwen2 tokenizer; the selector_config.json a selector of each readout writes and the model card it renders
(merged and adapter); the stage config hashes of the real_cpu HotpotQA recipe at each readout; and the
selector_config.json (its floats left out: they depend on the CPU's arithmetic) of a tiny student trained and
exported with each readout.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "readouts_before.json"
READOUTS = {"identifier": (), "passage": ("student.readout=passage",),
            "passage_head": ("student.readout=passage", "student.passage_score=head")}
DOCS = [{"title": "Ada Brill", "text": "Ada Brill was born in Tollbridge.\nRelevant: yes"},
        {"title": "Tollbridge", "text": "Tollbridge lies on the river Wend."},
        {"title": "", "text": "An untitled passage, with a tail of spaces.   "}]
FLOATS = ("tau3", "tau3_logprob")  # trained values: left out of the exported records
SEEN_KEYS = ("purecover_version", "base_model")  # the release that wrote the file; the tiny model's temporary path


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def static_fingerprint(tokenizer: Any) -> dict[str, Any]:
    """Prompts, selector_config.json records, model cards and recipe hashes of each readout (no training)."""
    from purecover.config import load_recipe
    from purecover.models.identifiers import IdentifierScheme
    from purecover.models.selector_prompt import build_selector_prompt, prompt_template
    from purecover.records import SelectorConfig, StudentMeta
    from purecover.stages import PIPELINE, config_hash
    from purecover.train.model_card import render_model_card
    from tests.train.test_model_card import META, _config

    out: dict[str, Any] = {}
    scheme = IdentifierScheme("letters").check(tokenizer, len(DOCS))
    for readout in ("identifier", "passage"):
        out[f"template/{readout}"] = prompt_template(readout=readout)
        prompt = build_selector_prompt(tokenizer, "Where was Ada Brill born?", DOCS, scheme, 40, readout=readout)
        out[f"prompt/{readout}"] = {"text": _sha(prompt.text), "ids": _sha(json.dumps(prompt.input_ids)),
                                    "read_positions": prompt.read_positions}
    keys = {"identifier": {}, "passage": {"readout": "passage"},
            "passage_head": {"readout": "passage", "passage_score": "head"}}
    for name, extra in keys.items():
        for adapter in (False, True):
            config = SelectorConfig.model_validate(_config(adapter=adapter) | extra)
            meta = StudentMeta.model_validate(META | {"losses": META["losses"] | extra})
            out[f"selector_config/{name}/adapter={adapter}"] = config.to_json_dict()
            out[f"card/{name}/adapter={adapter}"] = _sha(render_model_card(config, meta, None, merged=not adapter))
    recipe_file = REPO / "configs" / "recipes" / "real_cpu" / "hotpotqa.yaml"
    for name, sets in READOUTS.items():
        recipe = load_recipe(recipe_file, ["student.readout=identifier", "student.passage_score=token", *sets])
        out[f"hashes/{name}"] = {stage: config_hash(recipe, stage) for stage in PIPELINE}
    return out


def exported_fingerprint(tmp_path_factory: Any, sample_dir: Path) -> dict[str, Any]:
    """The selector_config.json (floats left out) and file names of a tiny student of each readout, trained and
    exported as tests/models/test_passage_readout.py and test_score_head.py do (their runs are shared)."""
    from purecover.train.export_stage import run_export_stage
    from tests.models.conftest import trained_run
    from tests.models.test_passage_readout import PASSAGE
    from tests.models.test_score_head import HEAD

    out = {}
    for name, extra in (("identifier", ()), ("passage", PASSAGE), ("passage_head", HEAD)):
        recipe = trained_run(tmp_path_factory, sample_dir, lora=True, extra=extra)
        selector = recipe.run_path / "selector"
        if not (selector / "selector_config.json").is_file():
            run_export_stage(recipe)
        config = json.loads((selector / "selector_config.json").read_text())
        out[f"export/{name}"] = {"config": {k: v for k, v in config.items() if k not in FLOATS + SEEN_KEYS},
                                 "floats": sorted(k for k in FLOATS if config.get(k) is not None),
                                 "files": sorted(p.name for p in selector.iterdir())}
    return out


def _before() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_prompts_records_cards_and_hashes_are_unchanged(tokenizer):
    now, before = static_fingerprint(tokenizer), _before()
    assert set(now) == {k for k in before if not k.startswith("export/")}
    for key, value in now.items():
        assert value == before[key], key


def test_exported_selectors_are_unchanged(tmp_path_factory, sample_dir):
    now, before = exported_fingerprint(tmp_path_factory, sample_dir), _before()
    for key, value in now.items():
        assert value == before[key], key


def test_the_fixture_would_catch_a_change(tokenizer):
    """The comparison is not vacuous: another readout's prompt, another layout or recipe reads differently."""
    before = _before()
    assert before["template/identifier"]["hash"] != before["template/passage"]["hash"]
    assert before["prompt/identifier"]["read_positions"] is None and before["prompt/passage"]["read_positions"]
    assert before["card/passage/adapter=False"] != before["card/passage_head/adapter=False"]
    assert before["hashes/identifier"]["train"] != before["hashes/passage"]["train"] != \
        before["hashes/passage_head"]["train"]
    assert before["export/passage_head"]["files"] != before["export/passage"]["files"]  # score_head.safetensors


if __name__ == "__main__":  # write the fixture: python -m tests.models.test_readouts_unchanged SAMPLES_DIR
    from transformers import AutoTokenizer

    samples = Path(sys.argv[1])

    class _Factory:
        def __init__(self, root: Path) -> None:
            self.root, self.n = root, 0

        def mktemp(self, name: str) -> Path:
            self.n += 1
            path = self.root / f"{name}{self.n}"
            path.mkdir(parents=True)
            return path

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ["PURECOVER_MODELS_DIR"] = str(Path(tmp) / "models")  # empty, as the tests' (no model fetched)
        os.environ["PURECOVER_INDEX_DIR"] = str(Path(tmp) / "index")
        data = static_fingerprint(AutoTokenizer.from_pretrained(samples / "qwen2_tokenizer"))
        data |= exported_fingerprint(_Factory(Path(tmp)), samples)
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}: {len(data)} entries")
