"""Loading a local model prints no "Loading weights" bar (it cluttered the output of the README's Python snippet),
and leaves transformers' progress-bar setting as it found it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from transformers.utils import logging as hf_logging
from purecover.demo.offline_tokenizer import build_offline_tokenizer
from purecover.demo.tiny import build_tiny_model
from purecover.models.loading import load_causal_lm
tok = build_offline_tokenizer(sys.argv[1] + "/tok", ["a few words for a vocabulary"] * 4, vocab_size=300)
model_dir = build_tiny_model(sys.argv[1] + "/model", tok)
hf_logging.enable_progress_bar()  # as in a plain Python session
print("BARS BEFORE", hf_logging.is_progress_bar_enabled(), file=sys.stderr)
load_causal_lm(str(model_dir), dtype="float32", device="cpu")
print("BARS AFTER", hf_logging.is_progress_bar_enabled(), file=sys.stderr)
"""


def test_a_local_model_loads_without_a_loading_bar(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    after_build = done.stderr.split("BARS BEFORE")[1]
    assert "Loading weights" not in after_build
    assert "BARS BEFORE True" in done.stderr and "BARS AFTER True" in done.stderr
