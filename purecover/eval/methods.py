"""``eval.methods``: the selectors the evaluate stage compares, and how a recipe names them.

Each entry of the list is one of

* a name of `METHODS`: a baseline of `purecover.eval.baselines` (``retrieval``, ``cross_encoder``,
  ``cross_encoder_ft`` (`purecover.eval.cross_encoder_ft`),
  ``icr``, ``icr_fused``, ``mmr``, ``xquad``, ``ia_select``, ``lancer_*``, ``gold_support``), the run's own
  ``teacher`` labels or ``student`` selections, or ``none`` (closed book: the generator sees no passage);
* ``teacher:DIR`` / ``student:DIR``: the labels / selections of another run directory (an ablation's, say);
* ``selections:PATH[=name]``: an external reranker's selections, a JSONL of ``{qid, selected?,
  selected_doc_ids?}`` or a TREC run file (`purecover.eval.external`), shown as ``name`` (default: the
  file's stem).

`parse_methods` turns the list into `MethodSpec`s; anything else is a ValueError that names
``eval.methods`` and the closest valid name. The module imports nothing heavy, so the recipe check
(`purecover.validate`) runs it before any stage, and the evaluate stage and the pipeline's dry run
read the same specs.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EMBEDDING_METHODS", "EXTERNAL", "METHODS", "NO_RETRIEVAL", "RUN_DIR_METHODS", "MethodSpec",
           "parse_methods"]

NO_RETRIEVAL = "none"
EXTERNAL = "selections"  # selections:PATH=name, an external reranker's selections or TREC run file
RUN_DIR_METHODS = ("teacher", "student")  # the methods that may read another run directory (KIND:DIR)
EMBEDDING_METHODS = ("mmr", "xquad", "ia_select")  # the methods that need eval.embedding_model

# Every method name a recipe may list, with what it selects (the registry of `purecover.eval.baselines`,
# in its order, then the closed-book `none`).
METHODS: dict[str, str] = {
    "retrieval": "the retriever's first K candidates",
    "cross_encoder": "the top K candidates by a cross-encoder score of (question, passage) (eval.cross_encoder)",
    "cross_encoder_ft": "a cross-encoder fine-tuned on the run's teacher labels of the student's training questions "
                        "(eval.cross_encoder_ft_base): every candidate over its threshold, chosen on the calibration "
                        "questions, cut to K",
    "icr": "in-context reranking (Chen et al., ICLR 2025): the top K by the calibrated attention a causal LM's "
           "question tokens pay each candidate (eval.icr_model, eval.icr_layers)",
    "icr_fused": "ICR fused with the retrieval rank: the top K by z(icr) + w * z(-rank) (eval.icr_fusion_weight)",
    "mmr": "maximal marginal relevance over embedding cosines (eval.embedding_model)",
    "xquad": "xQuAD diversification over the question's subtopics (eval.subtopics)",
    "ia_select": "IA-Select diversification over the question's subtopics (eval.subtopics)",
    "lancer_sum": "LANCER: candidates by the sum of their sub-question answerability ratings (teacher labels)",
    "lancer_rrf": "LANCER: reciprocal-rank fusion of the per-sub-question rankings (teacher labels)",
    "lancer_greedy_sum": "LANCER: greedy on rating gains over the best rating so far per sub-question",
    "lancer_greedy_cov": "LANCER: greedy on the number of newly covered sub-questions (rating >= 3)",
    "lancer_greedy_alpha": "LANCER: greedy coverage whose gain decays by alpha once a sub-question is covered",
    "gold_support": "the gold supporting paragraphs among the candidates (an upper-bound reference)",
    "teacher": "the teacher's labels, cut to K",
    "student": "the student's selections, cut to K",
    NO_RETRIEVAL: "closed book: the generator answers without any passage",
}


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """One entry of ``eval.methods``: the selector `kind`, its display `name`, and an optional `source`:
    the run directory whose labels (teacher) or selections (student) it reads, or (kind ``selections``)
    an external reranker's selections file (JSONL or TREC run, `purecover.eval.external`)."""

    name: str
    kind: str
    source: Path | None = None

    @property
    def slug(self) -> str:
        """A file-name-safe form of `name`."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("_") or "method"

    @property
    def description(self) -> str:
        """What the method selects, in words."""
        if self.kind == EXTERNAL:
            return f"an external reranker's selections from {self.source}"
        if self.source is not None:
            return f"{METHODS[self.kind]}, read from the run directory {self.source}"
        return METHODS[self.kind]


def parse_methods(methods: Sequence[str]) -> list[MethodSpec]:
    """Validate ``eval.methods``; unknown names are errors that suggest the closest valid one."""
    valid = tuple(METHODS)
    specs: list[MethodSpec] = []
    for raw in methods:
        name = str(raw).strip()
        kind, _, source = name.partition(":")
        if kind == EXTERNAL:
            specs.append(_external_spec(name, source))
            continue
        if kind not in valid:
            close = difflib.get_close_matches(kind, valid, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {', '.join(valid)}"
            raise ValueError(f"eval.methods: unknown method {name!r}{hint}")
        if source and kind not in RUN_DIR_METHODS:
            raise ValueError(f"eval.methods: {name!r}: only teacher:DIR and student:DIR take a run directory "
                             f"({EXTERNAL}:PATH=name takes a selections or TREC run file)")
        specs.append(MethodSpec(name, kind, Path(source) if source else None))
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"eval.methods lists a method twice: {list(methods)}")
    if not specs:
        raise ValueError("eval.methods is empty")
    return specs


def _external_spec(raw: str, rest: str) -> MethodSpec:
    """``selections:PATH[=name]``: an external reranker's file, shown as `name` (default: the file stem).
    The name follows the last ``=`` when it holds no ``/`` (else the whole rest is the path)."""
    path, sep, name = rest.rpartition("=")
    if not sep or not name.strip() or "/" in name:
        path, name = rest, ""
    path = path.strip()
    if not path:
        raise ValueError(f"eval.methods: {raw!r}: {EXTERNAL}:PATH=name needs the path of a selections JSONL or "
                         "TREC run file, e.g. selections:runs/bm25.trec=bm25")
    return MethodSpec(name.strip() or Path(path).stem, EXTERNAL, Path(path))
