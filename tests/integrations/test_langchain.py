"""The LangChain adapter (`PurecoverCompressor`) with the real langchain-core / langchain-classic and the session's
tiny trained selector: it keeps exactly what the offline `Selector.select` keeps, and a
`ContextualCompressionRetriever` over a real in-memory vector store returns that set end to end."""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("langchain_classic", reason="needs the langchain extra and langchain-classic (dev)")
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from purecover.integrations import METADATA_KEYS
from purecover.integrations.langchain import PurecoverCompressor
from tests.integrations.support import API_KEY, DOCS, doc_example, expected

pytestmark = pytest.mark.samples


def _docs(pairs) -> list[Document]:
    return [Document(page_content=text, metadata={"title": title, "source": f"doc-{i}"}, id=f"d{i}")
            for i, (title, text) in enumerate(pairs)]


def _check(out, docs, exp, threshold) -> None:
    """`out` is `exp`'s kept set of `docs`, best first, with the purecover metadata."""
    assert [d.page_content for d in out] == [docs[i].page_content for i in exp.indices]
    assert [d.id for d in out] == [docs[i].id for i in exp.indices]
    for rank, (doc, i) in enumerate(zip(out, exp.indices), start=1):
        meta = doc.metadata
        assert meta["purecover_score"] == exp.logits[i]
        assert meta["purecover_probability"] == pytest.approx(exp.probabilities[i])
        assert (meta["purecover_rank"], meta["purecover_index"], meta["purecover_selected"]) == (rank, i, True)
        assert meta["purecover_score_space"] == exp.score_space
        assert meta["purecover_threshold"] == threshold
        assert (meta["title"], meta["source"]) == (docs[i].metadata["title"], f"doc-{i}")  # kept
    assert all(not set(METADATA_KEYS) & set(d.metadata) for d in docs)  # the inputs are untouched


def test_keeps_exactly_what_the_selector_keeps(selector, any_selector, cases):
    compressor = PurecoverCompressor(selector=any_selector)
    sizes = set()
    for question, pairs in cases:
        docs = _docs(pairs)
        exp = expected(selector, question, pairs)
        out = compressor.compress_documents(docs, question)
        _check(out, docs, exp, selector.threshold)
        sizes.add(len(out))
    assert all(0 < n < len(cases[0][1]) for n in sizes)  # a real variable-size choice, not all or nothing


def test_k_max_threshold_and_min_select_overrides(selector, any_selector, cases):
    question, pairs = cases[0]
    docs = _docs(pairs)
    default = expected(selector, question, pairs)
    assert len(default.indices) > 2
    exp = expected(selector, question, pairs, k_max=2)
    out = PurecoverCompressor(selector=any_selector, k_max=2).compress_documents(docs, question)
    _check(out, docs, exp, selector.threshold)
    assert len(out) == 2
    # a threshold between the best and the second-best score keeps only the best
    best, second = sorted(default.logits, reverse=True)[:2]
    tau = (best + second) / 2
    out = PurecoverCompressor(selector=any_selector, threshold=tau).compress_documents(docs, question)
    _check(out, docs, expected(selector, question, pairs, tau=tau), tau)
    assert len(out) == 1
    # nothing passes a huge threshold: min_select decides how many are kept anyway
    out = PurecoverCompressor(selector=any_selector, threshold=1e9, min_select=3).compress_documents(docs, question)
    _check(out, docs, expected(selector, question, pairs, tau=1e9, min_select=3), 1e9)
    assert len(out) == 3


def test_include_unselected_returns_every_scored_document(selector, any_selector, cases):
    question, pairs = cases[1]
    docs = _docs(pairs)
    exp = expected(selector, question, pairs)
    out = PurecoverCompressor(selector=any_selector, include_unselected=True).compress_documents(docs, question)
    assert len(out) == len(docs)
    chosen = [d for d in out if d.metadata["purecover_selected"]]
    assert [d.metadata["purecover_index"] for d in chosen] == exp.indices
    assert out[: len(chosen)] == chosen  # the selected first
    rest = [d.metadata["purecover_score"] for d in out[len(chosen):]]
    assert rest == sorted(rest, reverse=True)
    assert [d.metadata["purecover_rank"] for d in out] == list(range(1, len(docs) + 1))


def test_more_than_k1_documents(selector, overflow_case, counting, caplog):
    question, pairs = overflow_case
    docs = _docs(pairs)
    compressor = PurecoverCompressor(selector=counting)
    with caplog.at_level(logging.WARNING, logger="purecover.integrations._common"):
        out = compressor.compress_documents(docs, question)
        compressor.compress_documents(docs, question)
    _check(out, docs, expected(selector, question, pairs[: selector.k1]), selector.threshold)
    assert (compressor.counters.calls, compressor.counters.overflow_calls, compressor.counters.documents_dropped) \
        == (2, 2, 6)
    warnings = [r for r in caplog.records  # ours only: another library's warning may land here too
                if r.levelno == logging.WARNING and r.name == "purecover.integrations._common"]
    assert len(warnings) == 1 and "k1=6" in warnings[0].getMessage()  # warned once, counted always
    strict = PurecoverCompressor(selector=counting, overflow="error")
    calls = counting.calls
    with pytest.raises(ValueError, match=r"9 documents.*at most k1=6"):
        strict.compress_documents(docs, question)
    assert counting.calls == calls


def test_no_documents_never_calls_the_model(counting):
    compressor = PurecoverCompressor(selector=counting)
    assert compressor.compress_documents([], "Who?") == []
    assert asyncio.run(compressor.acompress_documents([], "Who?")) == []
    assert (counting.calls, counting.k1_reads) == (0, 0)


def test_bad_input_is_refused_by_name(selector, counting, cases):
    question, pairs = cases[0]
    docs = _docs(pairs)
    docs[2] = Document(page_content="   ", metadata={})
    with pytest.raises(ValueError, match="document 2: its text is empty"):
        PurecoverCompressor(selector=counting).compress_documents(docs, question)
    with pytest.raises(TypeError, match=r"documents\[1\]"):
        PurecoverCompressor(selector=counting).compress_documents([docs[0], "text"], question)
    assert counting.calls == 0
    with pytest.raises(ValueError, match="k_max must be an integer >= 1"):
        PurecoverCompressor(selector=selector, k_max=0)
    with pytest.raises(ValueError, match="overflow"):
        PurecoverCompressor(selector=selector, overflow="chunk")
    with pytest.raises(TypeError, match=r"expected a purecover Selector.*from_pretrained"):
        PurecoverCompressor(selector="runs/x/selector")


def test_contextual_compression_retriever_end_to_end(selector, candidates):
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    pool = [d for c in candidates[:3] for d in c["docs"]]
    store.add_documents([Document(page_content=d["text"], metadata={"title": d["title"]}) for d in pool])
    base = store.as_retriever(search_kwargs={"k": selector.k1})
    retriever = ContextualCompressionRetriever(base_compressor=PurecoverCompressor(selector=selector),
                                               base_retriever=base)
    question = candidates[0]["question"]
    retrieved = base.invoke(question)
    assert len(retrieved) == selector.k1
    exp = expected(selector, question, [(d.metadata["title"], d.page_content) for d in retrieved])
    for out in (retriever.invoke(question), asyncio.run(retriever.ainvoke(question))):
        assert [d.page_content for d in out] == [retrieved[i].page_content for i in exp.indices]
        assert [d.metadata["purecover_score"] for d in out] == [exp.logits[i] for i in exp.indices]


def test_from_pretrained_loads_the_selector_directory(selector, selector_dir, cases):
    compressor = PurecoverCompressor.from_pretrained(selector_dir, device="cpu", dtype="float32", k_max=3)
    question, pairs = cases[2]
    docs = _docs(pairs)
    out = compressor.compress_documents(docs, question)
    exp = expected(selector, question, pairs, k_max=3)
    assert [d.metadata["purecover_index"] for d in out] == exp.indices
    assert [d.metadata["purecover_score"] for d in out] == pytest.approx([exp.logits[i] for i in exp.indices],
                                                                          abs=1e-5)
    compressor.close()


def test_remote_mode_through_a_running_server(selector, remote_url, candidates, overflow_case):
    """`from_url`: a real ``purecover serve`` on loopback gives the in-process result, end to end."""
    from purecover.serve.client import RemoteSelectorError

    compressor = PurecoverCompressor.from_url(remote_url, api_key=API_KEY)
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents([Document(page_content=d["text"], metadata={"title": d["title"]})
                         for c in candidates[:3] for d in c["docs"]])
    base = store.as_retriever(search_kwargs={"k": selector.k1})
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    for question in (candidates[0]["question"], candidates[2]["question"]):
        local = ContextualCompressionRetriever(base_compressor=PurecoverCompressor(selector=selector),
                                               base_retriever=base).invoke(question)
        remote = retriever.invoke(question)
        assert [(d.page_content, d.metadata) for d in remote] == [(d.page_content, d.metadata) for d in local]
    question, pairs = overflow_case  # more than k1: the server's k1 is read from /v1/models
    out = compressor.compress_documents(_docs(pairs), question)
    _check(out, _docs(pairs), expected(selector, question, pairs[: selector.k1]), selector.threshold)
    assert compressor.counters.documents_dropped == 3
    compressor.close()
    wrong = PurecoverCompressor.from_url(remote_url, api_key="not-the-key")
    with pytest.raises(RemoteSelectorError) as caught:
        wrong.compress_documents(_docs(pairs[:2]), question)
    assert caught.value.status == 401
    wrong.close()


def test_the_guide_example_runs(selector_dir, capsys):
    """docs/guides/langchain.md's example, run as written (with the test selector's directory)."""
    exec(compile(doc_example(DOCS / "langchain.md", selector_dir), "langchain.md", "exec"), {})
    ranks = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert ranks and ranks == [str(r) for r in range(1, len(ranks) + 1)]
