"""Build the demo's models offline: a byte-level BPE tokenizer trained on the demo set and a tiny
random Qwen2 that serves as teacher, student base and generator (``make demo``).

    python -m purecover.demo [OUT_DIR]      # default runs/demo-assets

Writes ``OUT_DIR/tokenizer`` and ``OUT_DIR/tiny-qwen2`` (safetensors + tokenizer), and the coverage demo's
fictional collection in ``OUT_DIR/coverage`` (`purecover.demo.coverage`). Idempotent: an existing, complete
model directory is kept. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["DEMO_ASSETS", "build_demo_assets"]

DEMO_ASSETS = Path("runs/demo-assets")


def build_demo_assets(out_dir: str | Path = DEMO_ASSETS, *, hidden_size: int = 64, num_layers: int = 2,
                      seed: int = 0) -> Path:
    """Tokenizer + tiny Qwen2 under `out_dir`; returns the model directory."""
    from .coverage import write_demo_collection

    out = Path(out_dir)
    write_demo_collection(out / "coverage")  # seconds' worth of JSON, the same bytes every time
    model_dir = out / "tiny-qwen2"
    if (model_dir / "config.json").is_file() and any(model_dir.glob("*.safetensors")):
        return model_dir  # built before: nothing more to import (a rerun of `make demo` stays without torch)
    from .offline_tokenizer import build_offline_tokenizer, demo_tokenizer_texts
    from .tiny import build_tiny_model

    tok_dir = build_offline_tokenizer(out / "tokenizer", demo_tokenizer_texts())
    tmp = out / ".tiny-qwen2.tmp"
    build_tiny_model(tmp, tok_dir, "qwen2", hidden_size=hidden_size, num_layers=num_layers, num_heads=4,
                     num_kv_heads=2, intermediate_size=2 * hidden_size, seed=seed)
    tmp.replace(model_dir)
    return model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=str(DEMO_ASSETS))
    args = parser.parse_args(argv)
    from ..utils.entry import quiet_library_notices
    from ..utils.threads import apply_threads

    quiet_library_notices()
    apply_threads()  # as every stage does: the usable cores minus the processes running now, unless OMP_NUM_THREADS
    print(f"demo model: {build_demo_assets(args.out_dir)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
