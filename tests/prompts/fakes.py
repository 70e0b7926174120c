"""Two stand-in tokenizers for rendering prompts without a model: one without a chat template (the
plain layout) and one with a small chat template of its own. Words split on whitespace are the tokens."""

from __future__ import annotations

from typing import Any

from purecover.records import CandidateDoc

QUESTION = "  Which river flows through the town where {the} author was born?  "
SUBQUESTION = " Where was the author born? "
DOCS = [
    CandidateDoc(title="Tollbridge", text="The river Mirren\nflows through it; the author was born there in 1901."),
    CandidateDoc(title="", text="Untitled passage with {braces} and   extra   spaces."),
    CandidateDoc(title="Jon Vale", text="Jon Vale (1901-1970) was a novelist born in Tollbridge."),
]


class PlainTokenizer:
    """No chat template: `render_chat` uses its plain layout."""

    chat_template: Any = None

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def _id(self, word: str) -> int:
        if word not in self.vocab:
            self.vocab[word] = len(self.words)
            self.words.append(word)
        return self.vocab[word]

    def __call__(self, text: str, add_special_tokens: bool = False, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [self._id(w) for w in text.split()]}

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids)


class ChatTokenizer(PlainTokenizer):
    """A chat template of its own: ``<|role|>`` headers, one message per block, then the assistant header."""

    chat_template = "fake-chat-template-v1"

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False,
                            add_generation_prompt: bool = True) -> str:
        text = "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")
