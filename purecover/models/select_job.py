"""The select stage: run the exported selector over candidates.jsonl → selections.jsonl (DESIGN §4).

    purecover select RECIPE [--set ...]

One record per question, in candidates order: ``{qid, selected, logits, probabilities}`` with the
logits and probabilities of all candidates in candidate order. Questions go through the selector
in fixed batches of `BATCH_SIZE` by position; a rerun skips the qids already written and redoes a
partly written batch whole (writing only its missing records), so a killed run, once rerun,
produces exactly the file of an uninterrupted run. A question without candidates gets an empty
selection (counted in the summary); more candidates than the selector's K1 is an error naming
the file and line.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..config import Recipe, recipe_to_dict, stage_fingerprint
from ..data.candidates import read_candidates
from ..utils.io import ResumableJsonl, read_jsonl
from ..utils.provenance import check_same_config, write_stage_manifest
from ..utils.rundir_lock import locked_stage
from .selector import SELECTOR_CONFIG, SelectionResult, Selector, read_selector_config

log = logging.getLogger(__name__)

__all__ = ["BATCH_SIZE", "SELECTIONS_FILE", "run_select_stage"]

SELECTIONS_FILE = "selections.jsonl"
BATCH_SIZE = 8


def _load_candidates(path: Path, k1: int) -> list[dict[str, Any]]:
    """The records of candidates.jsonl, checked for what selection needs (errors name line and field)."""
    return read_candidates(path, max_docs=k1, max_docs_hint=(
        f", the k1={k1} the selector was trained for; rebuild the candidates with data.k1 <= {k1}"))


def _selector_fingerprint(selector_dir: Path) -> str:
    """What identifies the selector: its config and the names and sizes of its weight files."""
    h = hashlib.sha256((selector_dir / SELECTOR_CONFIG).read_bytes())
    for p in sorted(selector_dir.glob("*.safetensors")):
        h.update(f"{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def _select_batch(selector: Selector, batch: Sequence[dict[str, Any]]) -> list[SelectionResult]:
    """Selections for one batch; questions without candidates get an empty selection."""
    present = [r for r in batch if r["docs"]]
    results = iter(selector.select_batch([r["question"] for r in present], [r["docs"] for r in present]))
    return [next(results) if r["docs"] else SelectionResult([], [], []) for r in batch]


@locked_stage("select")
def run_select_stage(recipe: Recipe, selector_dir: str | Path | None = None, show_progress: bool = True, *,
                     backend: str = "hf", **backend_kwargs: Any) -> dict[str, Any]:
    """Write run_dir/selections.jsonl with the selector in run_dir/selector (or `selector_dir`).

    `backend` is ``hf`` (dtype ``student.dtype``, device auto) or ``vllm``; `backend_kwargs` go to
    `Selector.from_pretrained`. Returns the summary also written to ``select.run.json``.
    """
    started = _dt.datetime.now(_dt.timezone.utc)
    run_dir = recipe.run_path
    sel_dir = Path(selector_dir) if selector_dir is not None else run_dir / "selector"
    if not (sel_dir / SELECTOR_CONFIG).is_file():
        raise FileNotFoundError(f"{sel_dir / SELECTOR_CONFIG} does not exist: run `purecover export RECIPE` first")
    config = read_selector_config(sel_dir)
    candidates = _load_candidates(run_dir / "candidates.jsonl", int(config["k1"]))
    out_path = run_dir / SELECTIONS_FILE
    config_hash = hashlib.sha256(
        (stage_fingerprint(recipe, "data") + _selector_fingerprint(sel_dir)).encode()).hexdigest()[:16]
    check_same_config(run_dir, "select", config_hash, [out_path], "selector or data",
                      f"use another run_dir or delete {out_path} to redo the selections")
    write_stage_manifest(run_dir, "select", recipe_to_dict(recipe), config_hash, {"status": "running"}, started)

    selector: Selector | None = None
    written = 0
    try:
        with ResumableJsonl(out_path) as out:
            already = sum(1 for r in candidates if r["qid"] in out.done)
            repaired = out.repaired
            if already < len(candidates):  # load only when there is work left
                kwargs = {"dtype": recipe.student.dtype, **backend_kwargs} if backend == "hf" else backend_kwargs
                selector = Selector.from_pretrained(sel_dir, backend=backend,
                                                    trust_remote_code=recipe.student.trust_remote_code, **kwargs)
            t0 = time.perf_counter()
            bar = tqdm(total=len(candidates), initial=already, desc="select", unit="q", disable=not show_progress)
            for i in range(0, len(candidates), BATCH_SIZE):
                batch = candidates[i : i + BATCH_SIZE]
                if all(r["qid"] in out.done for r in batch):
                    continue
                assert selector is not None
                for rec, res in zip(batch, _select_batch(selector, batch)):
                    if rec["qid"] not in out.done:
                        out.write(res.to_record(rec["qid"]))
                        written += 1
                        bar.update(1)
            bar.close()
    finally:
        if selector is not None:
            selector.close()
    elapsed = time.perf_counter() - t0

    sizes, empty = [], 0
    for _, rec in read_jsonl(out_path):
        sizes.append(len(rec["selected"]))
        empty += not rec["logits"]
    rate = round(written / elapsed, 3) if written and elapsed > 0 else None
    summary = {
        "status": "complete",
        "questions": len(candidates),
        "written": written,
        "already_done": already,
        "repaired_lines": repaired,
        "no_candidates": empty,
        "mean_selected": round(sum(sizes) / len(sizes), 4) if sizes else None,
        "questions_per_second": rate,
        "backend": backend,
        "selector": str(sel_dir),
        "tau3": config["tau3"],
        "k_max": config["k_max"],
        "min_select": config["min_select"],
        "selections": str(out_path),
    }
    if len(sizes) != len(candidates):
        raise RuntimeError(f"{out_path} has {len(sizes)} records for {len(candidates)} questions")
    log.info("selected for %d questions (%s questions/s)", written, rate)
    write_stage_manifest(run_dir, "select", recipe_to_dict(recipe), config_hash, summary, started)
    return summary
