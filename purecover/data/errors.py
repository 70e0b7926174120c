"""Errors for bad input files: each names the file, the record's line or index, and the field."""

from __future__ import annotations

from ..records import InvalidRecord

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

    def invalid_record(self) -> InvalidRecord:
        """The record of this error for the data report (a record skipped with ``skip_invalid``)."""
        return InvalidRecord(source=self.source, location=self.location, field=self.field, problem=self.problem)


class HubUnavailableError(RuntimeError):
    """A Hub dataset was requested but the Hub cannot be reached (offline or blocked)."""


class HubDatasetError(ValueError):
    """A Hub dataset (or local dataset repository) lacks the requested configuration or split.

    The message lists the configurations / splits that exist and names the recipe key to set.
    """
