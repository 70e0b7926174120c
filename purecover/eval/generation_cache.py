"""Generations cached by prompt hash, so an evaluation rerun only generates what is missing.

The cache is a `ResumableJsonl` keyed by ``key`` = sha256 of (generator, max_new_tokens, prompt),
one `purecover.records.GenerationRecord` ``{key, prediction, prompt_tokens, completion_tokens}`` per
distinct prompt (checked when read back: errors name file, line and field). Several
(method, budget) pairs that choose the same passages share one generation. Records are appended
and fsynced batch by batch: a killed run keeps every finished batch, and a torn last line is cut
off and redone on the next run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..models.generation import GenerationBackend
from ..records import GenerationRecord, validate_line
from ..utils.io import ResumableJsonl, read_jsonl
from ..utils.progress import tqdm

log = logging.getLogger(__name__)

__all__ = ["GenerationCache", "GenerationStats", "prompt_key"]


@dataclasses.dataclass(frozen=True)
class GenerationStats:
    """What one `GenerationCache.fill` did: prompts generated and found cached, seconds spent generating and the
    throughput (None when nothing was generated)."""

    generated: int
    cached: int
    seconds: float
    prompts_per_second: float | None


def prompt_key(generator: str, max_new_tokens: int, prompt: str) -> str:
    """Cache key of one generation: 24 hex chars of sha256(generator, max_new_tokens, prompt)."""
    blob = f"{generator}\x00{max_new_tokens}\x00{prompt}".encode()
    return hashlib.sha256(blob).hexdigest()[:24]


class GenerationCache:
    """Generations by prompt key, backed by a resumable JSONL file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.records: dict[str, GenerationRecord] = {}
        self._out = ResumableJsonl(self.path, key="key")  # repairs a torn last line before we read
        self.repaired = self._out.repaired
        try:
            for lineno, line in read_jsonl(self.path):
                rec = validate_line(GenerationRecord, line, self.path, lineno)
                self.records[rec.key] = rec
        except BaseException:
            self._out.close()
            raise

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def __getitem__(self, key: str) -> GenerationRecord:
        return self.records[key]

    def __len__(self) -> int:
        return len(self.records)

    def fill(self, prompts: Mapping[str, str], load_backend: Callable[[], GenerationBackend],
             count_tokens: Callable[[str], int], max_new_tokens: int, batch_size: int,
             show_progress: bool = True) -> GenerationStats:
        """Generate the prompts (key → text) missing from the cache; the backend is loaded only then."""
        # shortest first: a batch pads every prompt to its longest, so prompts of like length go together
        missing = sorted((k for k in prompts if k not in self.records), key=lambda k: len(prompts[k]))
        cached = len(prompts) - len(missing)
        if not missing:
            return GenerationStats(generated=0, cached=cached, seconds=0.0, prompts_per_second=None)
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
                    rec = GenerationRecord(key=key, prediction=out.strip(), prompt_tokens=count_tokens(text),
                                           completion_tokens=count_tokens(out))
                    self._out.write(rec.to_json_dict())
                    self.records[key] = rec
                bar.update(len(keys))
                elapsed = time.perf_counter() - t0
                bar.set_postfix(prompts_per_s=f"{(i + len(keys)) / elapsed:.2f}" if elapsed else "-")
        finally:
            bar.close()
            backend.close()
        seconds = round(time.perf_counter() - t0, 3)
        stats = GenerationStats(generated=len(missing), cached=cached, seconds=seconds,
                                prompts_per_second=round(len(missing) / seconds, 3) if seconds else None)
        log.info("generated %d answers in %.1fs (%s prompts/s)", len(missing), stats.seconds,
                 stats.prompts_per_second)
        return stats

    def close(self) -> None:
        self._out.close()

    def __enter__(self) -> GenerationCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
