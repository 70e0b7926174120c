"""The serving guide's curl commands, run as written (only the address changes to the test server's) with the
real curl against a real server: each answer has the documented shape, and the documented values that follow
from the demo recipe (k1, max_passage_tokens, k_max, min_select, the model name) are the demo's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.serve.conftest import running

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guides" / "serving.md"
DEMO = yaml.safe_load((REPO / "configs" / "recipes" / "demo_cpu.yaml").read_text(encoding="utf-8"))
KEY = "guide-key-0123"


def curl_examples() -> list[tuple[str, str]]:
    """(command, documented output) of every bash block of the guide that calls curl and shows an output."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S):
        lines = block.rstrip("\n").split("\n")
        start = next((i for i, line in enumerate(lines) if line.startswith("curl ")), None)
        if start is None:
            continue
        shown = [i for i, line in enumerate(lines) if line.startswith("# ")]
        end = shown[0] if shown else len(lines)
        out.append(("\n".join(lines[start:end]), "".join(lines[i][2:].strip() for i in shown)))
    return out


def shape(value):
    """The structure of a JSON value: keys of objects (recursively), element shape of lists, type of scalars."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def test_the_documented_values_are_the_demo_recipe_s():
    examples = dict(curl_examples())
    health = json.loads(next(o for c, o in examples.items() if c.endswith("/health")))
    card = json.loads(next(o for c, o in examples.items() if c.endswith("/v1/models")))["data"][0]
    assert health["model"] == card["id"] == "selector"  # `purecover serve runs/demo/selector`
    assert health["k1"] == card["k1"] == DEMO["data"]["k1"]
    assert card["max_passage_tokens"] == DEMO["student"]["max_passage_tokens"]
    assert card["k_max"] == DEMO["teacher"]["budget"] and card["min_select"] == 1


@pytest.mark.skipif(shutil.which("curl") is None, reason="the curl command is not installed")
def test_every_curl_example_runs_as_written_and_answers_in_the_documented_shape(served_selector, monkeypatch):
    examples = curl_examples()
    assert len(examples) >= 5
    monkeypatch.setenv("PURECOVER_API_KEY", KEY)
    for with_key in (False, True):
        with running(served_selector, model_name="selector", api_key=KEY if with_key else None) as (url, _):
            for command, documented in examples:
                if ("PURECOVER_API_KEY" in command) != with_key:
                    continue
                done = subprocess.run(["bash", "-c", command.replace("localhost:8000", url.split("://")[1])],
                                      capture_output=True, text=True, timeout=120, check=True)
                answer = json.loads(done.stdout)
                if not documented:
                    assert "selected" in answer, command  # the key example: answered, not refused
                    continue
                expected = json.loads(re.sub(r'"([0-9a-f]+)\.\.\."', r'"\1"', documented))
                if "results" in expected:  # top_n and selection sizes differ between selectors: compare one item
                    assert shape(answer["results"][0]) == shape(expected["results"][0]), command
                    answer, expected = ({k: v for k, v in d.items() if k != "results"} for d in (answer, expected))
                assert shape(answer) == shape(expected), command
