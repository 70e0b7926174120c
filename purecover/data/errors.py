"""Errors for bad input files: each names the file, the record's line or index, and the field."""

from __future__ import annotations

from ..records import InvalidRecord

__all__ = ["DataFormatError", "DuplicateQuestionError", "HubDatasetError", "HubUnavailableError", "InvalidRecord"]


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


class DuplicateQuestionError(ValueError):
    """One question id in two files of a ``data.path`` list: ``str(err)`` names the id and both files (with the
    record of each). Never skipped by ``skip_invalid``: the files overlap, so the list itself must change."""

    def __init__(self, qid: str, first: tuple[str, str], second: tuple[str, str]) -> None:
        self.qid = qid
        self.files = (first[0], second[0])
        super().__init__(
            f"question id {qid!r} is in two files of data.path: {first[0]} ({first[1]}) and {second[0]} "
            f"({second[1]}); the files of a data.path list must hold different questions (drop one of the files "
            "from the list, or that question from one of them)")


class HubUnavailableError(RuntimeError):
    """A Hub dataset was requested but the Hub cannot be reached (offline or blocked)."""


class HubDatasetError(ValueError):
    """A Hub dataset (or local dataset repository) lacks the requested configuration or split.

    The message lists the configurations / splits that exist and names the recipe key to set.
    """
