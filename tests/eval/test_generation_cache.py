"""The generation cache: keys, only-missing generation, lazy backend, torn-line repair."""

from __future__ import annotations

import pytest

from purecover.eval.generation_cache import GenerationCache, prompt_key


class _EchoBackend:
    """Stands in for the model behind the GenerationBackend interface; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.closed = False

    def generate(self, prompts, max_new_tokens):
        self.calls.append(list(prompts))
        return [f" answer to {p[-3:]} " for p in prompts]

    def close(self):
        self.closed = True


def _count(text: str) -> int:
    return len(text.split())


def test_prompt_key_depends_on_generator_budget_and_prompt():
    base = prompt_key("gen", 32, "p")
    assert base != prompt_key("gen2", 32, "p") != prompt_key("gen", 16, "p") != prompt_key("gen", 32, "q")
    assert base == prompt_key("gen", 32, "p") and len(base) == 24


def test_only_missing_prompts_are_generated(tmp_path):
    prompts = {prompt_key("g", 8, f"prompt {i:03d}"): f"prompt {i:03d}" for i in range(5)}
    backend = _EchoBackend()
    with GenerationCache(tmp_path / "gen.jsonl") as cache:
        stats = cache.fill(prompts, lambda: backend, _count, 8, batch_size=2, show_progress=False)
    assert stats.generated == 5 and [len(c) for c in backend.calls] == [2, 2, 1] and backend.closed
    first = next(iter(prompts))
    with GenerationCache(tmp_path / "gen.jsonl") as cache:
        assert cache[first].prediction == "answer to 000" and cache[first].prompt_tokens == 2
        more = {**prompts, prompt_key("g", 8, "prompt 999"): "prompt 999"}
        loads = []
        stats = cache.fill(more, lambda: loads.append(1) or _EchoBackend(), _count, 8, 4, show_progress=False)
        assert (stats.generated, stats.cached) == (1, 5) and loads == [1]
        stats = cache.fill(more, lambda: pytest.fail("backend loaded with nothing to do"), _count, 8, 4, False)
        assert stats.generated == 0


def test_a_torn_last_line_is_dropped_and_redone(tmp_path):
    prompts = {prompt_key("g", 8, f"p{i}"): f"p{i}" for i in range(3)}
    path = tmp_path / "gen.jsonl"
    with GenerationCache(path) as cache:
        cache.fill(prompts, _EchoBackend, _count, 8, 3, show_progress=False)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]) + lines[2][:15])
    with GenerationCache(path) as cache:
        assert cache.repaired == 1 and len(cache) == 2
        stats = cache.fill(prompts, _EchoBackend, _count, 8, 3, show_progress=False)
    assert stats.generated == 1 and path.read_text().count("\n") == 3


def test_backend_returning_the_wrong_count_is_an_error(tmp_path):
    class Short(_EchoBackend):
        def generate(self, prompts, max_new_tokens):
            return ["x"]

    with GenerationCache(tmp_path / "gen.jsonl") as cache, pytest.raises(RuntimeError, match="2 prompts"):
        cache.fill({"a": "p1", "b": "p2"}, Short, _count, 8, 2, show_progress=False)


def test_a_bad_cache_line_is_named(tmp_path):
    from purecover.records import LineRecordError

    path = tmp_path / "gen.jsonl"
    path.write_text('{"key": "a", "prediction": "x", "prompt_tokens": 2, "completion_tokens": 1}\n'
                    '{"key": "b", "prediction": "y", "prompt_tokens": "2", "completion_tokens": 1}\n')
    with pytest.raises(LineRecordError, match=r"gen\.jsonl:2: field 'prompt_tokens': must be an integer"):
        GenerationCache(path)


def test_prompts_of_like_length_share_a_batch(tmp_path):
    """A batch pads to its longest prompt: the missing prompts go shortest first, whatever their order."""
    texts = ["x" * 50, "x" * 5, "x" * 400, "x" * 7, "x" * 60, "x" * 390]
    prompts = {prompt_key("g", 8, t): t for t in texts}
    backend = _EchoBackend()
    with GenerationCache(tmp_path / "gen.jsonl") as cache:
        cache.fill(prompts, lambda: backend, _count, 8, batch_size=2, show_progress=False)
        assert [[len(p) for p in call] for call in backend.calls] == [[5, 7], [50, 60], [390, 400]]
        assert all(cache[k].prediction == f"answer to {t[-3:]}" for k, t in prompts.items())
