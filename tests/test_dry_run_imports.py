"""`purecover pipeline --dry-run` plans every stage without importing what it does not run: no torch, no
transformers, no peft (it took 79 s on busy cores when the plan loaded the training stack)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import json, sys
from purecover.cli import main
rc = main(["pipeline", sys.argv[1], "--dry-run", "--set", "run_dir=" + sys.argv[2]])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in ("torch", "transformers", "peft", "accelerate")
                                          if m in sys.modules)}))
"""


@pytest.mark.parametrize("recipe", ["configs/recipes/demo_cpu.yaml", "configs/recipes/coverage_demo_cpu.yaml",
                                    "configs/recipes/real_cpu/hotpotqa.yaml", "configs/recipes/paper/hotpotqa.yaml"])
def test_the_dry_run_imports_no_torch(recipe, tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, recipe, str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe == {"rc": 0, "heavy": []}, (probe, done.stdout[-1500:])
    assert "plan:" in done.stdout and "train" in done.stdout
