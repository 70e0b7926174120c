"""Fixtures of the adapter tests: the session's real tiny trained selector (k1 = 6, tests/models/conftest.py),
a call-counting wrapper of it, questions with their retrieved passages, and the expected selection."""

from __future__ import annotations

import pytest

from tests.integrations.support import API_KEY, CountingSelector, Pairs
from tests.models.conftest import candidates, selector, selector_dir, selector_run  # noqa: F401


@pytest.fixture
def counting(selector) -> CountingSelector:  # noqa: F811
    return CountingSelector(selector)


@pytest.fixture(scope="session")
def cases(candidates) -> list[tuple[str, Pairs]]:  # noqa: F811
    """Four questions with their k1 retrieved passages as (title, text), in retrieval order."""
    return [(c["question"], [(d.get("title") or None, d["text"]) for d in c["docs"]]) for c in candidates[:4]]


@pytest.fixture(scope="session")
def overflow_case(candidates, selector) -> tuple[str, Pairs]:  # noqa: F811
    """A question with k1 + 3 passages: its own k1, then three of another question's."""
    first, second = candidates[0], candidates[1]
    docs = [*first["docs"], *second["docs"][:3]]
    assert len(docs) == selector.k1 + 3
    return first["question"], [(d.get("title") or None, d["text"]) for d in docs]


@pytest.fixture(scope="session")
def remote_url(selector):  # noqa: F811
    """A real ``purecover serve`` app around the session's selector, on a free loopback port (API key `API_KEY`)."""
    pytest.importorskip("fastapi", reason="the remote mode's server needs the serve extra")
    from purecover.serve.app import create_app
    from purecover.serve.server import serve_in_thread

    with serve_in_thread(create_app(selector, model_name="tiny-selector", api_key=API_KEY)) as base_url:
        yield base_url


@pytest.fixture(params=["in-process", "remote"])
def any_selector(request, selector):  # noqa: F811
    """The selector an adapter calls: the in-process one, or a `RemoteSelector` on the loopback server."""
    if request.param == "in-process":
        yield selector
        return
    from purecover.serve.client import RemoteSelector

    with RemoteSelector(request.getfixturevalue("remote_url"), api_key=API_KEY) as remote:
        yield remote
