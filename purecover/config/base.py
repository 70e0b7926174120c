"""What every module of the recipe package shares: the error types and the field types of the sections.

`ConfigError` is the one-line error a bad recipe or override becomes; `_SectionError` is raised by a
section's own cross-key check and names the key it is about (`purecover.config.schema` turns it into the
dotted key of the message).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictInt


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the key and what is expected."""


class _SectionError(ValueError):
    """A check across the keys of one section failed: `key` is the key the message is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


# Every section rejects keys it does not declare; defaults are trusted (not re-validated).
_SECTION = ConfigDict(extra="forbid")
_NOT_BLANK = r"\S"  # a string pattern: at least one non-space character
_DTYPES = Literal["auto", "float32", "bfloat16", "float16"]
_AtLeastOne = Annotated[StrictInt, Field(ge=1)]  # an integer >= 1
