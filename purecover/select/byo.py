"""Bring your own data: an exported selector over any questions file, no recipe or run directory.

    purecover select --selector DIR --input ANY.jsonl --out FILE [--trec FILE [--trec-all]] [--run-name NAME]
                     [--batch-size N] [--backend hf|vllm] [--device D] [--dtype T]

Input, one JSON object a line: ``{qid, question, docs: [{doc_id?, title?, text}]}``, docs in retrieval
order (best first). ``qid`` is a string or an integer (written as a string); a doc is an object with
a ``text`` string (or just a string, the text); ``title`` is optional; ``doc_id`` (string or integer)
defaults to the doc's 1-based position ("1", "2", ...), and must be unique within the question. Other
fields are ignored; ``passages`` / ``contexts`` / ``ctxs`` are not read as ``docs`` (the error says so).
More docs than the selector's K1, or a malformed line, is an error naming the file, line and field.

Output `out`, one record per question in input order (the select stage's record plus ``doc_ids``):
``{qid, selected, selected_doc_ids, logits, probabilities, doc_ids}``; ``selected`` are positions in
score order, ``logits``/``probabilities``/``doc_ids`` cover all candidates in input order. It is
written by the stage's worker (`select_into`): resumable and kill-safe. ``OUT.run.json`` records the
selector's fingerprint and the input's sha256; a rerun with another selector or input is refused.

While it runs, the command holds an exclusive lock (``fcntl.flock``) on ``.OUT.lock`` (hidden) beside the output:
a second ``purecover select ... --out OUT`` started meanwhile fails at once with one line naming the
holder's pid (it does not wait: the first may run for hours, and two writers would interleave their
records). The kernel releases the lock when the holder exits or is killed; the lock file stays.

Questions longer than the selector's ``max_question_tokens`` (256 tokens) are cut to it, as passages
are cut to ``max_passage_tokens``; the summary counts them (``questions_truncated``).

``--trec FILE`` writes a TREC run (``qid Q0 doc_id rank score run_name``, score = the logit), atomically:
by default only the selected docs (the file *is* the selection, best first); with ``--trec-all`` every
candidate, the selected first (in their order, which is the score order), then the rest by logit
(ties: earlier position), so the selected set is the top ``len(selected)`` lines of each question.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from ..data.doc_ids import candidate_doc_id
from ..data.errors import DataFormatError
from ..models.selector import MAX_QUESTION_TOKENS, Selector
from ..records import (
    ByoSelectRun,
    ByoSelectSummary,
    CandidateDoc,
    SelectInputRecord,
    SelectionRecord,
    SelectorConfig,
    validate_line,
)
from ..utils.io import atomic_write_json, atomic_write_text, ensure_output_dir, open_in_place, read_jsonl
from ..utils.trec import check_trec_token, trec_run_lines
from .select_stage import (
    BATCH_SIZE,
    _selector_fingerprint,
    select_into,
    selector_config,
    summarize_selections,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_RUN_NAME", "OutputBusyError", "output_lock", "read_select_input", "run_byo_select",
           "trec_ranking"]

DEFAULT_RUN_NAME = "purecover"
_DOC_ALIASES = ("passages", "contexts", "ctxs")


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_select_input(path: str | Path, k1: int, *, trec: bool = False) -> list[SelectInputRecord]:
    """The questions of a bring-your-own input file, each doc with its id and title (module docstring for the
    format); errors (`DataFormatError`) name the file, line and field.

    `k1`: the most docs a question may have (the selector's). `trec`: qids and doc ids must also be
    usable in a TREC run file (non-empty, no whitespace).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--input {path} does not exist")
    try:
        return _read_select_input(path, k1, trec)
    except UnicodeDecodeError:
        lineno, column, byte = _first_non_utf8(path)
        raise DataFormatError(str(path), str(lineno), None,
                              f"not UTF-8 text (byte 0x{byte:02x} at column {column}): save the file as UTF-8 "
                              "(e.g. `iconv -f latin1 -t utf-8 IN > OUT` for a Latin-1 file)") from None


def _first_non_utf8(path: Path) -> tuple[int, int, int]:
    """(1-based line, 1-based byte column, byte value) of the first byte of `path` that is not UTF-8."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return lineno, exc.start + 1, raw[exc.start]
    return 0, 0, 0  # not reached: the caller saw a decoding error


def _read_select_input(path: Path, k1: int, trec: bool) -> list[SelectInputRecord]:
    records: list[SelectInputRecord] = []
    seen: dict[str, int] = {}
    for lineno, rec in read_jsonl(path):
        def bad(field: str, problem: str, lineno: int = lineno) -> DataFormatError:
            return DataFormatError(str(path), str(lineno), field, problem)

        qid = rec.get("qid")
        if isinstance(qid, bool) or not isinstance(qid, (str, int)) or qid == "":
            raise bad("qid", "missing, empty, or not a string or integer")
        qid = str(qid)
        if qid in seen:
            raise bad("qid", f"duplicate {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        if not isinstance(rec.get("question"), str) or not rec["question"].strip():
            raise bad("question", "missing, empty, or not a string")
        docs = rec.get("docs")
        if docs is None:
            alias = next((a for a in _DOC_ALIASES if a in rec), None)
            hint = f" (found {alias!r}: rename it to 'docs')" if alias else ""
            raise bad("docs", f"missing{hint}")
        if not isinstance(docs, list):
            raise bad("docs", f"not a list (got {type(docs).__name__})")
        if len(docs) > k1:
            raise bad("docs", f"{len(docs)} candidates, more than the selector's k1={k1}: pass at most the top {k1}")
        rows: list[CandidateDoc] = []
        ids: dict[str, int] = {}
        for i, doc in enumerate(docs):
            if isinstance(doc, str):
                doc = {"text": doc}
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise bad(f"docs[{i}].text", "missing or not a string (a doc is {\"text\": ...} or a string)")
            if doc.get("title") is not None and not isinstance(doc["title"], str):
                raise bad(f"docs[{i}].title", f"not a string (got {type(doc['title']).__name__})")
            raw_id = doc.get("doc_id")
            if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, (str, int))):
                raise bad(f"docs[{i}].doc_id", f"not a string or integer (got {type(raw_id).__name__})")
            doc_id = candidate_doc_id(doc, i)
            if doc_id in ids:
                raise bad(f"docs[{i}].doc_id", f"duplicate {doc_id!r} (also docs[{ids[doc_id]}]) within the question")
            ids[doc_id] = i
            problem = check_trec_token(doc_id, "doc id") if trec else None
            if problem:
                raise bad(f"docs[{i}].doc_id", problem + " (needed by --trec)")
            rows.append(CandidateDoc(doc_id=doc_id, title=doc.get("title") or "", text=doc["text"]))
        problem = check_trec_token(qid, "qid") if trec else None
        if problem:
            raise bad("qid", problem + " (needed by --trec)")
        records.append(SelectInputRecord(qid=qid, question=rec["question"], docs=rows))
    if not records:
        raise ValueError(f"--input {path} has no records")
    return records


def trec_ranking(record: SelectionRecord, all_candidates: bool) -> list[tuple[str, float]]:
    """(doc_id, logit) of one output record (written with ``doc_ids``), best first: the selected, then
    (`all_candidates`) the rest by logit (ties: earlier position)."""
    logits, selected = record.logits, record.selected
    ids = record.doc_ids
    if ids is None:
        raise ValueError(f"question {record.qid!r}: the selections record has no doc_ids")
    order = list(selected)
    if all_candidates:
        chosen = set(selected)
        order += sorted((k for k in range(len(ids)) if k not in chosen), key=lambda k: (-logits[k], k))
    return [(ids[k], float(logits[k])) for k in order]


def run_byo_select(selector_dir: str | Path, input_path: str | Path, out_path: str | Path, *,
                   trec_path: str | Path | None = None, trec_all: bool = False, run_name: str | None = None,
                   batch_size: int = BATCH_SIZE, backend: str = "hf", device: str = "auto", dtype: str = "auto",
                   show_progress: bool = True) -> ByoSelectSummary:
    """Select with the selector in `selector_dir` for every question of `input_path` into `out_path`
    (and a TREC run at `trec_path`); module docstring for the formats. Returns the summary, also
    written to ``OUT.run.json``.

    `batch_size`: questions per resumable batch and per forward pass (hf). `device`/`dtype` go to the
    hf backend (`dtype` also to vllm).
    """
    started = _dt.datetime.now(_dt.timezone.utc)
    sel_dir, input_path, out_path = Path(selector_dir), Path(input_path), Path(out_path)
    trec_file = Path(trec_path) if trec_path is not None else None
    run_name = DEFAULT_RUN_NAME if run_name is None else run_name
    if trec_file is not None and (problem := check_trec_token(run_name, "run name")):
        raise ValueError(f"--run-name: {problem}")
    if trec_all and trec_file is None:
        raise ValueError("--trec-all needs --trec FILE")
    if backend not in ("hf", "vllm"):
        raise ValueError(f"--backend: unknown selector backend {backend!r}; expected hf or vllm")
    if len({p.resolve() for p in (input_path, out_path, *([trec_file] if trec_file else []))}) < 2 + bool(trec_file):
        raise ValueError("--input, --out and --trec must be different files")
    config = selector_config(sel_dir)
    records = read_select_input(input_path, config.k1, trec=trec_file is not None)
    with output_lock(out_path):
        summary = _select_locked(sel_dir, input_path, out_path, records, config, started, trec_file=trec_file,
                                 trec_all=trec_all, run_name=run_name, batch_size=batch_size, backend=backend,
                                 device=device, dtype=dtype, show_progress=show_progress)
    log.info("selected for %d questions -> %s", summary.questions, out_path)
    return summary


def _select_locked(sel_dir: Path, input_path: Path, out_path: Path, records: list[SelectInputRecord],
                   config: SelectorConfig, started: _dt.datetime, *, trec_file: Path | None, trec_all: bool,
                   run_name: str, batch_size: int, backend: str, device: str, dtype: str,
                   show_progress: bool) -> ByoSelectSummary:
    """The part of `run_byo_select` done under `output_lock`: guard, select, TREC file, summary."""
    sidecar = out_path.with_name(out_path.name + ".run.json")
    running = ByoSelectRun(selector=str(sel_dir), selector_fingerprint=_selector_fingerprint(sel_dir),
                           input=str(input_path), input_sha256=_hash_file(input_path), status="running",
                           started=started.isoformat(timespec="seconds"))
    _guard(out_path, sidecar, running)
    _check_no_duplicates(out_path, sidecar)
    atomic_write_json(sidecar, running.to_json_dict())
    loaded: list[Selector] = []

    def load() -> Selector:
        if backend == "hf":
            selector = Selector.from_pretrained(sel_dir, backend=backend, device=device, dtype=dtype,
                                                batch_size=batch_size)
        else:
            selector = Selector.from_pretrained(sel_dir, backend=backend, dtype=dtype)
        loaded.append(selector)
        return selector

    progress = select_into(out_path, records, load, batch_size=batch_size, with_doc_ids=True,
                           show_progress=show_progress)
    by_qid = {r.qid: r for r in (validate_line(SelectionRecord, line, out_path, lineno)
                                 for lineno, line in read_jsonl(out_path))}
    missing = [r.qid for r in records if r.qid not in by_qid]
    if missing or len(by_qid) != len(records):
        raise RuntimeError(f"{out_path} has {len(by_qid)} records for {len(records)} questions "
                           f"(missing: {', '.join(missing[:3]) or 'none'})")
    trec_lines = 0
    if trec_file is not None:
        lines = [line for r in records
                 for line in trec_run_lines(r.qid, trec_ranking(by_qid[r.qid], trec_all), run_name)]
        atomic_write_text(trec_file, "".join(line + "\n" for line in lines))
        trec_lines = len(lines)
    summary = ByoSelectSummary(
        **summarize_selections(out_path, len(records), progress, backend, sel_dir, config).model_dump(),
        input=str(input_path),
        trec=str(trec_file) if trec_file is not None else None,
        trec_lines=trec_lines,
        # Questions cut to max_question_tokens among those selected by this command (0 when all were done).
        questions_truncated=sum(sel.questions_truncated for sel in loaded),
        max_question_tokens=loaded[0].max_question_tokens if loaded else MAX_QUESTION_TOKENS,
    )
    if summary.questions_truncated:
        log.warning("%d question(s) longer than %d tokens were cut to that length for the selector",
                    summary.questions_truncated, summary.max_question_tokens)
    complete = running.model_copy(update={
        "status": "complete", "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "summary": summary})
    atomic_write_json(sidecar, complete.to_json_dict())
    return summary


class OutputBusyError(RuntimeError):
    """Another process is selecting into the same ``--out`` file."""


@contextlib.contextmanager
def output_lock(out_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``.OUT.lock`` (hidden, beside `out_path`) while the block runs.

    Does not wait: when another process holds it, raises `OutputBusyError` naming that process (pid,
    host, start, from the lock file). The lock file is created if needed, never followed through a
    symbolic link, and left in place (removing it could let a third process lock a different file).
    Without flock support (some network file systems) the block runs unlocked, with a warning.
    """
    import fcntl

    lock = out_path.with_name(f".{out_path.name}.lock")  # hidden: a side file, not a result
    ensure_output_dir(lock.parent)
    fd = open_in_place(lock, os.O_RDWR | os.O_CREAT, 0o644)  # a link there is refused, never followed
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
            except (OSError, ValueError):
                holder = {}
            holder = holder if isinstance(holder, dict) else {}
            who = (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since {holder.get('started', '?')}"
                   if holder else "another process")
            raise OutputBusyError(f"--out {out_path} is being written by another `purecover select` ({who}; lock "
                                  f"{lock.name}): wait for it to finish, or choose another --out") from None
        except OSError as exc:
            log.warning("cannot lock %s (%s): selecting without the output lock", lock, exc)
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode("utf-8"), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _check_no_duplicates(out_path: Path, sidecar: Path) -> None:
    """Refuse an existing `out_path` holding one qid on two lines (e.g. two commands that wrote it at once,
    before the output lock existed), with the remedy."""
    if not out_path.is_file():
        return
    first: dict[str, int] = {}
    duplicates: list[tuple[int, str]] = []
    with out_path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                qid = json.loads(raw.decode("utf-8")).get("qid")
            except (UnicodeDecodeError, ValueError, AttributeError):
                continue  # a damaged line: the resumable writer repairs or reports it
            if not isinstance(qid, (str, int)) or isinstance(qid, bool):
                continue
            if str(qid) in first:
                duplicates.append((lineno, str(qid)))
            else:
                first[str(qid)] = lineno
    if duplicates:
        line, qid = duplicates[0]
        lines = ", ".join(str(n) for n, _ in duplicates[:5]) + (", ..." if len(duplicates) > 5 else "")
        raise ValueError(
            f"{out_path}:{line}: duplicate qid {qid!r} (first on line {first[qid]}); {len(duplicates)} duplicate "
            f"line(s) ({lines}), as left by two commands writing this --out at once: delete {out_path} and "
            f"{sidecar.name} to redo the selections, or delete the duplicate lines to keep the rest")


def _guard(out_path: Path, sidecar: Path, identity: ByoSelectRun) -> None:
    """Refuse to append to `out_path` when it was written for another selector or input (or not by us): the
    sidecar is read leniently (any JSON object; what it lacks counts as different)."""
    if not out_path.exists() or out_path.stat().st_size == 0:
        return
    remedy = f"delete {out_path} (and {sidecar.name}) to redo the selections, or choose another --out"
    if not sidecar.is_file():
        raise ValueError(f"--out {out_path} exists but has no {sidecar.name} (not written by `purecover select "
                         f"--selector ...`); {remedy}")
    try:
        previous = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{sidecar}: unreadable ({exc}); {remedy}") from None
    previous = previous if isinstance(previous, dict) else {}
    for key, name, what in (("selector_fingerprint", "selector", "selector"), ("input_sha256", "input", "input file")):
        if previous.get(key) != getattr(identity, key):
            raise ValueError(f"--out {out_path} holds the selections of another {what} (recorded in {sidecar.name}: "
                             f"{previous.get(name)!r}, sha256/fingerprint {str(previous.get(key))[:16]}); {remedy}")
