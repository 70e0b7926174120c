"""Request and response bodies of `purecover serve` (pydantic models; the wire format of docs/guides/serving.md).

Two request shapes: ``/v1/select`` (purecover's own: the kept set and the score of every document)
and ``/v1/rerank`` = ``/v2/rerank`` (the Cohere / Jina rerank shape, plus purecover's ``selected`` and
``logit``). Type errors are FastAPI's 422; the checks that need the selector (document count against
k1, empty texts) are in `check_documents` and answer 400.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

__all__ = [
    "DocumentIn",
    "HealthResponse",
    "ModelCard",
    "ModelList",
    "RerankMeta",
    "RerankRequest",
    "RerankResponse",
    "RerankResult",
    "SelectRequest",
    "SelectResponse",
    "check_documents",
    "document_parts",
]


class DocumentIn(BaseModel):
    """A document as an object: its text and an optional title (other keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field(description="The passage's text (cut to the selector's max_passage_tokens, as in training).")
    title: str | None = Field(default=None, description="The passage's title, when it has one.")


Document = str | DocumentIn
_Finite = Annotated[float, Field(allow_inf_nan=False)]


class SelectRequest(BaseModel):
    """``POST /v1/select``: one question and its candidate documents (retrieval order)."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="The question.")
    documents: list[Document] = Field(description="At most k1 documents: strings or {text, title} objects.")
    k_max: StrictInt | None = Field(default=None, ge=1, description="Keep at most this many (default: the export's).")
    threshold: _Finite | None = Field(default=None, description="Keep scores above this, in the selector's score "
                                                                "space (default: the calibrated tau3).")
    min_select: StrictInt | None = Field(default=None, ge=0,
                                         description="Keep at least this many (default: the export's).")
    model: str | None = Field(default=None, description="Accepted and ignored: the server serves one selector.")


class SelectResponse(BaseModel):
    """The kept set (best first) and, in input order, every document's score and softmax probability."""

    model: str
    score_space: Literal["logit", "logprob"]
    threshold: float
    selected: list[int]
    scores: list[float]
    probabilities: list[float]


class RerankRequest(BaseModel):
    """``POST /v1/rerank`` / ``/v2/rerank``: the Cohere v2 and Jina request (unknown keys are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = Field(default=None, description="Accepted and ignored: the server serves one selector.")
    query: str
    documents: list[Document]
    top_n: StrictInt | None = Field(default=None, ge=1, description="Return only the best top_n results.")
    return_documents: bool = Field(default=False, description="Echo each result's document.")
    max_tokens_per_doc: int | None = Field(default=None, description="Accepted and ignored: passages are cut to "
                                                                      "the selector's max_passage_tokens.")


class RerankResult(BaseModel):
    """One document's result: ``relevance_score`` = sigmoid(score - threshold), > 0.5 exactly above the threshold."""

    index: int
    relevance_score: float
    document: dict[str, str] | None = None
    selected: bool
    logit: float


class RerankMeta(BaseModel):
    """What the Cohere SDK's ``ApiMeta`` reads."""

    api_version: dict[str, Any] = Field(default_factory=lambda: {"version": "2"})
    billed_units: dict[str, float] = Field(default_factory=dict)


class RerankResponse(BaseModel):
    """Results sorted by score, best first (cut to top_n), plus the kept set."""

    id: str
    results: list[RerankResult]
    meta: RerankMeta
    model: str
    score_space: Literal["logit", "logprob"]
    threshold: float
    selected: list[int]


class HealthResponse(BaseModel):
    status: str
    model: str
    k1: int
    backend: str


class ModelCard(BaseModel):
    """An OpenAI-style model entry with the selector's limits and threshold."""

    id: str
    object: str = "model"
    owned_by: str = "purecover"
    k1: int
    threshold: float
    score_space: Literal["logit", "logprob"]
    k_max: int | None
    min_select: int
    max_passage_tokens: int
    backend: str


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


def document_parts(doc: Document) -> tuple[str, str | None]:
    """(text, title) of a request document."""
    if isinstance(doc, str):
        return doc, None
    return doc.text, doc.title


def check_documents(documents: list[Document], k1: int) -> str | None:
    """The 400 message for `documents`, or None when they can be scored (1..k1 documents, none empty)."""
    if not documents:
        return "documents is empty: send at least one document"
    if len(documents) > k1:
        return (f"{len(documents)} documents, but this selector labels at most k1={k1} documents per request "
                f"(its identifier scheme was trained for {k1}); send the top {k1} candidates")
    for i, doc in enumerate(documents):
        text, title = document_parts(doc)
        if is_blank(text):
            return f"document {i} has an empty text"
        if "\x00" in text or (title is not None and "\x00" in title):
            return f"document {i} holds a NUL character (U+0000), which no passage text has"
        for field, value in (("text", text), ("title", title)):
            if value is not None and not is_encodable(value):
                return f"document {i}: its {field} is not valid Unicode (a lone surrogate such as \\ud800)"
    return None


def is_blank(text: str) -> bool:
    """Whether `text` has nothing to read: only whitespace, zero-width or other format characters (U+200B,
    U+FEFF, ...) and control characters (NUL included)."""
    return all(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp") for ch in text)


def is_encodable(text: str) -> bool:
    """Whether `text` is valid Unicode (JSON's \\uXXXX escapes can carry lone surrogates, which no tokenizer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
