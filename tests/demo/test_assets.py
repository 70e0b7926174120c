"""`python -m purecover.demo` builds its assets once: a rerun finds them and imports no torch (a `make demo` rerun
took 18.7 s when the assets were rebuilt and the skip path imported torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys, time
start = time.perf_counter()
from purecover.demo.assets import main
main([sys.argv[1]])
print(json.dumps({"torch": "torch" in sys.modules, "seconds": time.perf_counter() - start}))
"""


def _build(out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_assets_are_built_once_and_a_rerun_imports_no_torch(tmp_path):
    out = tmp_path / "assets"
    first = _build(out)
    weights = sorted(out.glob("tiny-qwen2/*.safetensors"))
    assert first["torch"] and weights
    stamp = [p.stat().st_mtime_ns for p in weights]
    again = _build(out)
    assert again["torch"] is False
    assert [p.stat().st_mtime_ns for p in weights] == stamp  # not rebuilt
