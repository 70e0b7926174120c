"""Passage identifiers that are single tokens wherever they occur (docs/guides/student.md#identifiers).

Qwen's tokenizer splits numbers into digits ("12" is two tokens) and merges punctuation with a
following letter (",C" is one token), so identifiers are letters and the separator is a
newline: the prompt introduces passage k as ``\\nA: title...`` and the target reads
``A\\nC\\nD<end of turn>``. `IdentifierScheme.check` verifies, for the actual tokenizer, that each
identifier is exactly one token, the same token, at the start of the reply and after the
separator, and fails with a clear message when K1 exceeds what the scheme can label.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from ..records import IdentifiersRecord, validate_record

__all__ = ["SCHEMES", "IdentifierError", "IdentifierScheme"]

SCHEMES: dict[str, tuple[str, ...]] = {
    "letters": tuple(string.ascii_uppercase),  # 26, like FIRST
    "letters52": tuple(string.ascii_uppercase + string.ascii_lowercase),
}


class IdentifierError(ValueError):
    """The identifier scheme cannot label the candidates with this tokenizer."""


@dataclass
class IdentifierScheme:
    """Identifiers of one scheme, bound to a tokenizer after `check` (`token_ids[k]` for passage k)."""

    name: str = "letters"
    separator: str = "\n"
    labels: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    separator_id: int | None = None

    def __post_init__(self) -> None:
        if not self.labels:
            if self.name not in SCHEMES:
                raise IdentifierError(f"unknown identifier scheme {self.name!r}; expected {', '.join(SCHEMES)}")
            self.labels = SCHEMES[self.name]

    @property
    def capacity(self) -> int:
        return len(self.labels)

    def check(self, tokenizer: Any, k1: int) -> IdentifierScheme:
        """Bind to `tokenizer` for up to `k1` candidates; raise IdentifierError on any violation."""
        if k1 > self.capacity:
            raise IdentifierError(
                f"{k1} candidates but the {self.name!r} identifier scheme has only {self.capacity} single-token "
                f"identifiers; lower data.k1 or use a larger scheme ({', '.join(f'{n}: {len(v)}' for n, v in SCHEMES.items())})"
            )
        sep_ids = tokenizer(self.separator, add_special_tokens=False)["input_ids"]
        if len(sep_ids) != 1:
            raise IdentifierError(f"separator {self.separator!r} is {len(sep_ids)} tokens for this tokenizer")
        ids = []
        for label in self.labels[:k1]:
            alone = tokenizer(label, add_special_tokens=False)["input_ids"]
            after = tokenizer(self.separator + label + self.separator, add_special_tokens=False)["input_ids"]
            if len(alone) != 1:
                raise IdentifierError(f"identifier {label!r} is {len(alone)} tokens ({alone}) for this tokenizer")
            if after != [sep_ids[0], alone[0], sep_ids[0]]:
                raise IdentifierError(
                    f"identifier {label!r} is not the same single token after the separator {self.separator!r} "
                    f"(got {after}, expected {[sep_ids[0], alone[0], sep_ids[0]]})")
            ids.append(alone[0])
        if len(set(ids)) != len(ids):
            raise IdentifierError("two identifiers map to the same token")
        self.token_ids = ids
        self.separator_id = sep_ids[0]
        return self

    def target_ids(self, order: Sequence[int], end_id: int) -> list[int]:
        """Token ids of the reply listing passages `order`: ``id sep id sep ... id <end>``."""
        if not self.token_ids:
            raise IdentifierError("call check(tokenizer, k1) before building targets")
        out: list[int] = []
        for i, k in enumerate(order):
            if i:
                out.append(self.separator_id)  # type: ignore[arg-type]
            out.append(self.token_ids[k])
        out.append(end_id)
        return out

    def to_record(self) -> IdentifiersRecord:
        """The scheme as stored (``identifiers`` of selector_config.json and of the student metadata)."""
        return IdentifiersRecord(name=self.name, separator=self.separator, labels=list(self.labels))

    def to_dict(self) -> dict[str, str | list[str]]:
        """`to_record` as JSON: ``{"name", "separator", "labels"}``."""
        return {"name": self.name, "separator": self.separator, "labels": list(self.labels)}

    @classmethod
    def from_record(cls, record: IdentifiersRecord) -> IdentifierScheme:
        """The scheme a stored `IdentifiersRecord` describes (not yet bound to a tokenizer)."""
        return cls(name=record.name, separator=record.separator, labels=tuple(record.labels))

    @classmethod
    def from_dict(cls, data: IdentifiersRecord | dict[str, JsonValue]) -> IdentifierScheme:
        """`from_record` of a record, or of its JSON form (validated: a bad value is a ValueError naming the field)."""
        record = data if isinstance(data, IdentifiersRecord) else validate_record(IdentifiersRecord, data,
                                                                                  "identifiers")
        return cls.from_record(record)
