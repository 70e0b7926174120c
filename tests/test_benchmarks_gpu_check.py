"""`benchmarks/gpu_check.py --tiny` runs every part on CPU with tiny shapes through the same code paths the GPU run
takes, so the prepared check cannot rot before a GPU is lent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_tiny_check_measures_every_part(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": os.environ.get(
        "TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "purecover" / "torch_extensions"))}
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--tiny", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["shape"] == "tiny" and set(result["parts"]) == {"student", "capture", "selector", "serve",
                                                                   "generation", "launch", "tests"}
    launch = result["parts"]["launch"]["ok"][0]
    assert launch["launched"] is True  # accelerate launch with DeepSpeed ZeRO-2 ran
    assert launch["tokens_per_second"] > 0 and launch["peak_gb"] is None  # the stage's own log line; no GPU here
    assert all("error" not in part for part in result["parts"].values()), result["parts"]
    figures = {r["figure"] for r in result["rows"]}
    assert {"gpu_check.student_steps_per_second", "gpu_check.student_peak_gb", "gpu_check.exact_over_one_ordering",
            "gpu_check.capture_over_sdpa_time", "gpu_check.capture_max_abs_diff_vs_eager", "gpu_check.selector_p50_ms",
            "gpu_check.generation_tokens_per_second", "gpu_check.launch_seconds_per_step",
            "gpu_check.serve_requests_per_second", "gpu_check.gpu_tests_failed"} <= figures
    assert all(r["value"] is not None and r["value"] >= 0 for r in result["rows"])
    assert all(r["value"] > 0 for r in result["rows"] if r["unit"] in ("steps/s", "ms", "tokens/s", "s"))
    diff = next(r for r in result["rows"] if r["figure"] == "gpu_check.capture_max_abs_diff_vs_eager")
    assert diff["met"] is True  # the capture equals eager attention
    variants = {r["variant"] for r in result["rows"] if r["figure"] == "gpu_check.student_steps_per_second"}
    assert len(variants) == 4 and any("scoring head" in v for v in variants)
    checked = ("gpu_check.capture_max_abs_diff_vs_eager", "gpu_check.gpu_tests_failed")  # targets on any device
    assert not any(r.get("target") for r in result["rows"] if r["figure"] not in checked)
    # the gpu-marked tests ran (on the CPU, behind PURECOVER_GPU_TEST_DEVICE) and passed, none skipped
    tests = result["parts"]["tests"]["ok"][0]
    assert tests["failed"] == 0 and tests["passed"] >= 7 and tests["skipped"] == 0, tests
    serve = result["parts"]["serve"]["ok"][0]
    assert serve["requests"] == 12 and serve["mean_batch"] >= 1 and serve["p95_ms"] >= serve["p50_ms"] > 0
    printed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert printed == result["rows"]  # printed as measured, the same rows as the file


def test_a_failing_part_is_a_row_and_the_others_go_on(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "-c", (
        "import sys; sys.argv = ['gpu_check.py', '--tiny', '--parts', 'generation,selector', '--out', sys.argv[1]]; "
        "sys.path.insert(0, 'benchmarks'); import gpu_check; "
        "gpu_check.SHAPES['tiny']['new_tokens'] = -1; sys.exit(gpu_check.main())"), str(out)], cwd=REPO,
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    failed = [r for r in result["rows"] if r["figure"] == "gpu_check.generation"]
    assert len(failed) == 1 and failed[0]["value"] is None and failed[0]["note"].startswith("failed: ")
    assert any(r["figure"] == "gpu_check.selector_p50_ms" for r in result["rows"])


def test_the_budget_bounds_the_whole_check_and_the_file_keeps_each_part(tmp_path):
    """--budget 51: the first part runs within what is left (46 s), the next finds too little left and is a row
    'not run'; the results file is written after each part, so a run cut short keeps what it measured."""
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--tiny", "--parts", "selector,generation",
                           "--budget", "51", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "ok" in result["parts"]["selector"] and result["parts"]["selector"]["seconds"] <= 51
    assert result["parts"]["generation"]["error"].startswith("not run: ")
    skipped = next(r for r in result["rows"] if r["figure"] == "gpu_check.generation")
    assert skipped["value"] is None and "budget" in skipped["note"]
