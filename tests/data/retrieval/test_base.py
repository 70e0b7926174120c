from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from purecover.data.retrieval import top_k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-3, max_value=3), min_size=1, max_size=40), st.integers(min_value=1, max_value=45))
def test_top_k_equals_full_stable_sort(values, k):
    scores = np.array(values, dtype=np.float32)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    assert [h.index for h in top_k(scores, k)] == expected


def test_top_k_with_allowed_subset():
    scores = np.array([5.0, 9.0, 1.0, 9.0, 7.0])
    hits = top_k(scores, 2, allowed=np.array([0, 3, 4]))
    assert [(h.index, h.score) for h in hits] == [(3, 9.0), (4, 7.0)]
