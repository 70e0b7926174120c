"""Helpers of the adapter tests: a call-counting selector wrapper and the offline expectation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from purecover.models.selector import SelectionResult

Pairs = list[tuple[str | None, str]]
API_KEY = "integration-test-key"  # the loopback server's key (conftest.remote_url)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "guides"
EXAMPLE_SELECTOR = "runs/demo/selector"  # the selector directory the docs examples load


class CountingSelector:
    """The real selector, counting `select` calls and `k1` reads (to show when the model is not called)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.k1_reads = 0

    @property
    def k1(self) -> int:
        self.k1_reads += 1
        return int(self.inner.k1)

    @property
    def threshold(self) -> float:
        return float(self.inner.threshold)

    def select(self, question: str, docs: Sequence[Any], tau: float | None = None, k_max: int | None = None,
               min_select: int | None = None) -> SelectionResult:
        self.calls += 1
        return self.inner.select(question, docs, tau=tau, k_max=k_max, min_select=min_select)


def expected(selector: Any, question: str, pairs: Pairs, *, tau: float | None = None, k_max: int | None = None,
             min_select: int | None = None) -> SelectionResult:
    """What the offline `Selector.select` keeps for these (title, text) passages."""
    docs = [{"title": t, "text": x} for t, x in pairs]
    return selector.select(question, docs, tau=tau, k_max=k_max, min_select=min_select)


def doc_example(page: Path, selector_dir: Path) -> str:
    """The first Python block of a docs page, with its example selector path replaced by `selector_dir`."""
    text = page.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    code = text[start: text.index("```", start)]
    assert EXAMPLE_SELECTOR in code, f"{page}: the example no longer loads {EXAMPLE_SELECTOR}"
    return code.replace(EXAMPLE_SELECTOR, str(selector_dir))
