"""The Haystack adapter (`PurecoverSelector` component) with the real haystack-ai and the session's tiny trained
selector: it keeps exactly what the offline `Selector.select` keeps, runs in a `Pipeline` fed by a BM25
retriever over an in-memory store, loads its model in `warm_up`, and survives a dumps/loads round trip."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("haystack", reason="needs the haystack extra")
from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.core.errors import SerializationError
from haystack.document_stores.in_memory import InMemoryDocumentStore

from purecover.integrations import METADATA_KEYS
from purecover.integrations.haystack import PurecoverSelector
from tests.integrations.support import API_KEY, DOCS, doc_example, expected

pytestmark = pytest.mark.samples


def _docs(pairs) -> list[Document]:
    return [Document(id=f"d{i}", content=text, meta={"title": title, "source": f"doc-{i}"}, score=0.5)
            for i, (title, text) in enumerate(pairs)]


def _check(out, docs, exp, threshold) -> None:
    """`out` is `exp`'s kept set of `docs`, best first: score = the selector's score, purecover metadata."""
    assert [d.id for d in out] == [docs[i].id for i in exp.indices]
    assert [d.content for d in out] == [docs[i].content for i in exp.indices]
    assert [d.score for d in out] == [exp.logits[i] for i in exp.indices]
    for rank, (doc, i) in enumerate(zip(out, exp.indices), start=1):
        assert doc.meta["purecover_score"] == exp.logits[i]
        assert doc.meta["purecover_probability"] == pytest.approx(exp.probabilities[i])
        assert (doc.meta["purecover_rank"], doc.meta["purecover_index"], doc.meta["purecover_selected"]) \
            == (rank, i, True)
        assert (doc.meta["purecover_score_space"], doc.meta["purecover_threshold"]) == (exp.score_space, threshold)
        assert doc.meta["source"] == f"doc-{i}"
    assert all(not set(METADATA_KEYS) & set(d.meta) and d.score == 0.5 for d in docs)  # the inputs are untouched


def test_keeps_exactly_what_the_selector_keeps(selector, any_selector, cases, recwarn):
    component = PurecoverSelector(selector=any_selector)
    for question, pairs in cases:
        docs = _docs(pairs)
        _check(component.run(query=question, documents=docs)["documents"], docs, expected(selector, question, pairs),
               selector.threshold)
    assert not [w for w in recwarn if "Mutating attribute" in str(w.message)]  # copies, never in-place edits


def test_overrides_in_the_constructor_and_per_call(selector, any_selector, cases):
    question, pairs = cases[2]
    docs = _docs(pairs)
    default = expected(selector, question, pairs)
    assert len(default.indices) > 2
    component = PurecoverSelector(selector=any_selector, k_max=2)
    _check(component.run(query=question, documents=docs)["documents"], docs,
           expected(selector, question, pairs, k_max=2), selector.threshold)
    out = component.run(query=question, documents=docs, k_max=1)["documents"]
    _check(out, docs, expected(selector, question, pairs, k_max=1), selector.threshold)
    tau = sorted(default.logits, reverse=True)[1] - 1e-6  # the best two pass
    out = PurecoverSelector(selector=any_selector).run(query=question, documents=docs, threshold=tau)["documents"]
    _check(out, docs, expected(selector, question, pairs, tau=tau), tau)
    assert len(out) == 2
    out = PurecoverSelector(selector=any_selector, include_unselected=True).run(query=question, documents=docs)
    flags = [d.meta["purecover_selected"] for d in out["documents"]]
    assert flags == [True] * len(default.indices) + [False] * (len(docs) - len(default.indices))


def test_more_than_k1_documents(selector, overflow_case, counting, caplog):
    question, pairs = overflow_case
    docs = _docs(pairs)
    component = PurecoverSelector(selector=counting)
    with caplog.at_level(logging.WARNING, logger="purecover.integrations._common"):
        out = component.run(query=question, documents=docs)["documents"]
    _check(out, docs, expected(selector, question, pairs[: selector.k1]), selector.threshold)
    assert component.counters.documents_dropped == 3
    assert any("k1=6" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="at most k1=6"):
        PurecoverSelector(selector=counting, overflow="error").run(query=question, documents=docs)
    assert counting.calls == 1


def test_no_documents_and_bad_input(counting, cases):
    component = PurecoverSelector(selector=counting)
    assert component.run(query="Who?", documents=[]) == {"documents": []}
    assert (counting.calls, counting.k1_reads) == (0, 0)
    docs = _docs(cases[0][1])
    docs[3] = Document(content=None, meta={"title": "an image"})
    with pytest.raises(ValueError, match="document 3: its text is empty"):
        component.run(query=cases[0][0], documents=docs)
    with pytest.raises(ValueError, match="exactly one of selector_dir, base_url or selector"):
        PurecoverSelector()
    with pytest.raises(ValueError, match="threshold must be a number"):
        PurecoverSelector(selector=counting, threshold="high")
    with pytest.raises(SerializationError, match="selector_dir"):
        component.to_dict()


def test_pipeline_with_bm25_retriever_end_to_end(selector, selector_dir, candidates):
    store = InMemoryDocumentStore()
    pool = [d for c in candidates[:3] for d in c["docs"]]
    store.write_documents([Document(id=f"p{i}", content=d["text"], meta={"title": d["title"]})
                           for i, d in enumerate(pool)])
    component = PurecoverSelector(str(selector_dir), device="cpu", dtype="float32")
    assert component.selector is None  # the model loads in warm_up, not in the constructor
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=selector.k1))
    pipe.add_component("selector", component)
    pipe.connect("retriever.documents", "selector.documents")
    question = candidates[1]["question"]
    result = pipe.run({"retriever": {"query": question}, "selector": {"query": question}},
                      include_outputs_from={"retriever"})
    retrieved = result["retriever"]["documents"]
    assert len(retrieved) == selector.k1
    exp = expected(selector, question, [(d.meta["title"], d.content) for d in retrieved])
    out = result["selector"]["documents"]
    assert [d.id for d in out] == [retrieved[i].id for i in exp.indices]
    assert [d.score for d in out] == pytest.approx([exp.logits[i] for i in exp.indices], abs=1e-5)
    loaded = component.selector
    assert loaded is not None
    pipe.warm_up()
    assert component.selector is loaded  # warm_up is idempotent: Pipeline.run calls it every time

    # the pipeline serialises and loads back (the component's module must be allowed explicitly)
    again = Pipeline.loads(pipe.dumps(), allowed_modules=["purecover.integrations.haystack"])
    result = again.run({"retriever": {"query": question}, "selector": {"query": question}})
    assert [d.id for d in result["selector"]["documents"]] == [d.id for d in out]


def test_remote_mode_through_a_running_server(selector, remote_url, candidates, overflow_case, monkeypatch):
    """``base_url``: a pipeline calling a real ``purecover serve`` on loopback gives the in-process result; the
    API key comes from the environment (the default secret) and the pipeline serialises without it."""
    monkeypatch.setenv("PURECOVER_API_KEY", API_KEY)
    store = InMemoryDocumentStore()
    store.write_documents([Document(id=f"p{i}", content=d["text"], meta={"title": d["title"]})
                           for i, d in enumerate(d for c in candidates[:3] for d in c["docs"])])
    results = []
    for component in (PurecoverSelector(base_url=remote_url), PurecoverSelector(selector=selector)):
        pipe = Pipeline()
        pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=selector.k1))
        pipe.add_component("selector", component)
        pipe.connect("retriever.documents", "selector.documents")
        question = candidates[2]["question"]
        results.append(pipe.run({"retriever": {"query": question}, "selector": {"query": question}}))
        if component.base_url:
            dumped = pipe.dumps()
            assert API_KEY not in dumped and "PURECOVER_API_KEY" in dumped
            again = Pipeline.loads(dumped, allowed_modules=["purecover.integrations.haystack"])
            results.append(again.run({"retriever": {"query": question}, "selector": {"query": question}}))
    remote, reloaded, local = ([(d.id, d.score, d.meta) for d in r["selector"]["documents"]] for r in results)
    assert remote == local == reloaded and remote
    question, pairs = overflow_case
    docs = _docs(pairs)
    component = PurecoverSelector(base_url=remote_url)
    _check(component.run(query=question, documents=docs)["documents"], docs,
           expected(selector, question, pairs[: selector.k1]), selector.threshold)
    assert component.counters.documents_dropped == 3
    component.close()
    assert component.selector is None


def test_the_guide_example_runs(selector_dir, capsys):
    """docs/guides/haystack.md's example, run as written (with the test selector's directory)."""
    exec(compile(doc_example(DOCS / "haystack.md", selector_dir), "haystack.md", "exec"), {})
    ranks = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert ranks and ranks == [str(r) for r in range(1, len(ranks) + 1)]
