"""Generations cached by prompt hash, so an evaluation rerun only generates what is missing.

The cache is a `ResumableJsonl` keyed by ``key`` = sha256 of (generator, max_new_tokens, prompt),
one record ``{key, prediction, prompt_tokens, completion_tokens}`` per distinct prompt. Several
(method, budget) pairs that choose the same passages share one generation. Records are appended
and fsynced batch by batch: a killed run keeps every finished batch, and a torn last line is cut
off and redone on the next run.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..models.generation import GenerationBackend
from ..utils.io import ResumableJsonl, read_jsonl

log = logging.getLogger(__name__)

__all__ = ["GenerationCache", "prompt_key"]


def prompt_key(generator: str, max_new_tokens: int, prompt: str) -> str:
    """Cache key of one generation: 24 hex chars of sha256(generator, max_new_tokens, prompt)."""
    blob = f"{generator}\x00{max_new_tokens}\x00{prompt}".encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class GenerationCache:
    """Generations by prompt key, backed by a resumable JSONL file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self._out = ResumableJsonl(self.path, key="key")  # repairs a torn last line before we read
        self.repaired = self._out.repaired
        if self.path.exists():
            for _, rec in read_jsonl(self.path):
                self.records[rec["key"]] = rec

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __getitem__(self, key: str) -> dict[str, Any]:
        return self.records[key]

    def __len__(self) -> int:
        return len(self.records)

    def fill(self, prompts: Mapping[str, str], load_backend: Callable[[], GenerationBackend],
             count_tokens: Callable[[str], int], max_new_tokens: int, batch_size: int,
             show_progress: bool = True) -> dict[str, Any]:
        """Generate the prompts (key → text) missing from the cache; the backend is loaded only then.

        Returns ``{"generated", "cached", "seconds", "prompts_per_second"}``.
        """
        missing = [k for k in prompts if k not in self.records]
        stats: dict[str, Any] = {"generated": 0, "cached": len(prompts) - len(missing), "seconds": 0.0,
                                 "prompts_per_second": None}
        if not missing:
            return stats
        backend = load_backend()
        t0 = time.perf_counter()
        bar = tqdm(total=len(missing), desc="generate", unit="prompt", disable=not show_progress)
        try:
            for i in range(0, len(missing), batch_size):
                keys = missing[i : i + batch_size]
                texts = [prompts[k] for k in keys]
                outputs = backend.generate(texts, max_new_tokens)
                if len(outputs) != len(keys):
                    raise RuntimeError(f"the generator returned {len(outputs)} outputs for {len(keys)} prompts")
                for key, text, out in zip(keys, texts, outputs):
                    rec = {"key": key, "prediction": out.strip(), "prompt_tokens": count_tokens(text),
                           "completion_tokens": count_tokens(out)}
                    self._out.write(rec)
                    self.records[key] = rec
                bar.update(len(keys))
                elapsed = time.perf_counter() - t0
                bar.set_postfix(prompts_per_s=f"{(i + len(keys)) / elapsed:.2f}" if elapsed else "-")
        finally:
            bar.close()
            backend.close()
        stats["generated"] = len(missing)
        stats["seconds"] = round(time.perf_counter() - t0, 3)
        stats["prompts_per_second"] = round(len(missing) / stats["seconds"], 3) if stats["seconds"] else None
        log.info("generated %d answers in %.1fs (%s prompts/s)", len(missing), stats["seconds"],
                 stats["prompts_per_second"])
        return stats

    def close(self) -> None:
        self._out.close()

    def __enter__(self) -> GenerationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
