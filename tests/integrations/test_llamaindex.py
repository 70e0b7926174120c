"""The LlamaIndex adapter (`PurecoverNodePostprocessor`) with the real llama-index-core and the session's tiny
trained selector: through the public `postprocess_nodes` it keeps exactly what the offline `Selector.select`
keeps, and a real query engine (vector index, mock embedding and LLM) returns that set as its sources."""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from purecover.integrations import METADATA_KEYS
from purecover.integrations.llamaindex import PurecoverNodePostprocessor
from tests.integrations.support import API_KEY, DOCS, doc_example, expected

pytestmark = pytest.mark.samples


def _nodes(pairs) -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=text, metadata={"title": title, "source": f"doc-{i}"}, id_=f"n{i}"),
                          score=1.0 - i / 10) for i, (title, text) in enumerate(pairs)]


def _check(out, nodes, exp, threshold) -> None:
    """`out` is `exp`'s kept set of `nodes`, best first: score = the selector's score, purecover metadata."""
    assert [n.node.node_id for n in out] == [nodes[i].node.node_id for i in exp.indices]
    assert [n.score for n in out] == [exp.logits[i] for i in exp.indices]
    for rank, (item, i) in enumerate(zip(out, exp.indices), start=1):
        meta = item.node.metadata
        assert item.node.get_content() == nodes[i].node.get_content()
        assert meta["purecover_score"] == exp.logits[i]
        assert meta["purecover_probability"] == pytest.approx(exp.probabilities[i])
        assert (meta["purecover_rank"], meta["purecover_index"], meta["purecover_selected"]) == (rank, i, True)
        assert (meta["purecover_score_space"], meta["purecover_threshold"]) == (exp.score_space, threshold)
        assert meta["source"] == f"doc-{i}"
        llm_text = item.node.get_content(metadata_mode=MetadataMode.LLM)
        assert "purecover" not in llm_text and "source: doc-" in llm_text  # our keys stay out of the prompt
    assert all(not set(METADATA_KEYS) & set(n.node.metadata) for n in nodes)  # the inputs are untouched
    assert [n.score for n in nodes] == [1.0 - i / 10 for i in range(len(nodes))]


def test_keeps_exactly_what_the_selector_keeps(selector, any_selector, cases):
    post = PurecoverNodePostprocessor(any_selector)
    for question, pairs in cases:
        nodes = _nodes(pairs)
        out = post.postprocess_nodes(nodes, query_str=question)
        _check(out, nodes, expected(selector, question, pairs), selector.threshold)
    question, pairs = cases[0]
    nodes = _nodes(pairs)
    exp = expected(selector, question, pairs)
    _check(post.postprocess_nodes(nodes, QueryBundle(question)), nodes, exp, selector.threshold)
    _check(asyncio.run(post.apostprocess_nodes(nodes, query_str=question)), nodes, exp, selector.threshold)


def test_k_max_threshold_and_include_unselected(selector, any_selector, cases):
    question, pairs = cases[1]
    nodes = _nodes(pairs)
    default = expected(selector, question, pairs)
    assert len(default.indices) > 2
    out = PurecoverNodePostprocessor(any_selector, k_max=2).postprocess_nodes(nodes, query_str=question)
    _check(out, nodes, expected(selector, question, pairs, k_max=2), selector.threshold)
    assert len(out) == 2
    tau = sorted(default.logits, reverse=True)[1] - 1e-6  # the best two pass
    out = PurecoverNodePostprocessor(any_selector, threshold=tau).postprocess_nodes(nodes, query_str=question)
    _check(out, nodes, expected(selector, question, pairs, tau=tau), tau)
    assert len(out) == 2
    out = PurecoverNodePostprocessor(any_selector, include_unselected=True).postprocess_nodes(nodes, query_str=question)
    assert len(out) == len(nodes)
    assert [n.node.metadata["purecover_index"] for n in out if n.node.metadata["purecover_selected"]] \
        == default.indices
    assert [n.score for n in out[len(default.indices):]] == sorted((default.logits[i] for i in range(len(nodes))
                                                                    if i not in default.indices), reverse=True)


def test_more_than_k1_nodes(selector, overflow_case, counting, caplog):
    question, pairs = overflow_case
    nodes = _nodes(pairs)
    post = PurecoverNodePostprocessor(counting)
    with caplog.at_level(logging.WARNING, logger="purecover.integrations._common"):
        out = post.postprocess_nodes(nodes, query_str=question)
    _check(out, nodes, expected(selector, question, pairs[: selector.k1]), selector.threshold)
    assert post.counters.documents_dropped == 3
    assert any("k1=6" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="at most k1=6"):
        PurecoverNodePostprocessor(counting, overflow="error").postprocess_nodes(nodes, query_str=question)
    assert counting.calls == 1


def test_no_nodes_no_query_and_bad_settings(selector, counting, cases):
    post = PurecoverNodePostprocessor(counting)
    assert post.postprocess_nodes([], query_str="Who?") == []
    assert (counting.calls, counting.k1_reads) == (0, 0)
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(_nodes(cases[0][1]))
    with pytest.raises(ValueError, match="min_select must be an integer >= 0"):
        PurecoverNodePostprocessor(selector, min_select=-1)
    with pytest.raises(TypeError, match="expected a purecover Selector"):
        PurecoverNodePostprocessor(None)
    assert PurecoverNodePostprocessor(selector, k_max=4).to_dict()["k_max"] == 4  # the settings serialise


def test_query_engine_end_to_end(selector, candidates):
    pool = [d for c in candidates[:3] for d in c["docs"]]
    index = VectorStoreIndex([TextNode(text=d["text"], metadata={"title": d["title"]}, id_=f"p{i}")
                              for i, d in enumerate(pool)], embed_model=MockEmbedding(embed_dim=8))
    question = candidates[0]["question"]
    retrieved = index.as_retriever(similarity_top_k=selector.k1).retrieve(question)
    assert len(retrieved) == selector.k1
    exp = expected(selector, question, [(n.node.metadata["title"], n.node.get_content()) for n in retrieved])
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=selector.k1,
                                   node_postprocessors=[PurecoverNodePostprocessor(selector)])
    response = engine.query(question)
    assert [n.node.node_id for n in response.source_nodes] == [retrieved[i].node.node_id for i in exp.indices]
    assert [n.score for n in response.source_nodes] == [exp.logits[i] for i in exp.indices]
    prompt = str(response)  # MockLLM answers with its prompt: the titles are in it, our metadata is not
    assert f"title: {retrieved[exp.indices[0]].node.metadata['title']}" in prompt and "purecover" not in prompt


def test_remote_mode_through_a_running_server(selector, remote_url, candidates, overflow_case):
    """`from_url`: a query engine calling a real ``purecover serve`` on loopback gives the in-process result."""
    pool = [d for c in candidates[:3] for d in c["docs"]]
    index = VectorStoreIndex([TextNode(text=d["text"], metadata={"title": d["title"]}, id_=f"p{i}")
                              for i, d in enumerate(pool)], embed_model=MockEmbedding(embed_dim=8))
    remote = PurecoverNodePostprocessor.from_url(remote_url, api_key=API_KEY, k_max=3)
    question = candidates[2]["question"]
    answers = [index.as_query_engine(llm=MockLLM(), similarity_top_k=selector.k1, node_postprocessors=[post])
               .query(question).source_nodes for post in (remote, PurecoverNodePostprocessor(selector, k_max=3))]
    assert [(n.node.node_id, n.score, n.node.metadata) for n in answers[0]] \
        == [(n.node.node_id, n.score, n.node.metadata) for n in answers[1]]
    assert 0 < len(answers[0]) <= 3
    question, pairs = overflow_case
    nodes = _nodes(pairs)
    out = remote.postprocess_nodes(nodes, query_str=question)
    _check(out, nodes, expected(selector, question, pairs[: selector.k1], k_max=3), selector.threshold)
    assert remote.counters.documents_dropped == 3
    remote.close()


def test_the_guide_example_runs(selector_dir, capsys):
    """docs/guides/llamaindex.md's example, run as written (with the test selector's directory)."""
    exec(compile(doc_example(DOCS / "llamaindex.md", selector_dir), "llamaindex.md", "exec"), {})
    ranks = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert ranks and ranks == [str(r) for r in range(1, len(ranks) + 1)]
