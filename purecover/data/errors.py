"""Errors for bad input files: each names the file, the record's line or index, and the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DataFormatError", "HubDatasetError", "HubUnavailableError", "InvalidRecord"]


class DataFormatError(ValueError):
    """A record is malformed. ``str(err)`` reads ``FILE:LOCATION: field 'F': problem``."""

    def __init__(self, source: str, location: str, field: str | None, problem: str) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.problem = problem
        where = f"{source}:{location}" if location else source
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {what}{problem}")


class HubUnavailableError(RuntimeError):
    """A Hub dataset was requested but the Hub cannot be reached (offline or blocked)."""


class HubDatasetError(ValueError):
    """A Hub dataset (or local dataset repository) lacks the requested configuration or split.

    The message lists the configurations / splits that exist and names the recipe key to set.
    """


@dataclass
class InvalidRecord:
    """One skipped record (with ``skip_invalid``), as written to the data report."""

    source: str
    location: str
    field: str | None
    problem: str

    @classmethod
    def from_error(cls, err: DataFormatError) -> InvalidRecord:
        return cls(err.source, err.location, err.field, err.problem)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "location": self.location, "field": self.field, "problem": self.problem}
