"""Lazy readers for the two file shapes datasets come in: a JSON array and JSON lines.

Both yield ``(location, record)`` where location is ``"line N"`` (JSONL) or ``"record I (line N)"``
(JSON array, 0-based index), so errors can point at the record. Large files are streamed:
the JSON array reader decodes one element at a time from a moving buffer.

Bad input of any kind (invalid or truncated JSON, bytes that are not UTF-8, nesting too deep
to decode, numbers too long to convert, a lone UTF-16 surrogate escape such as ``"\\ud800"`` that
decodes to no character) raises `DataFormatError`; a missing file raises `FileNotFoundError`.
``check_text=False`` leaves the surrogate check to the caller (`check_lone_surrogates`), so a loader
can skip such a record like any other malformed one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import DataFormatError

__all__ = ["check_lone_surrogates", "find_lone_surrogate", "iter_json_array", "iter_jsonl", "iter_records"]

_CHUNK = 1 << 20
_WS = " \t\r\n"
# Files are opened with errors="surrogateescape": a byte that is not UTF-8 becomes one of these.
_BAD_BYTE = re.compile("[\udc80-\udcff]")
_NOT_UTF8 = "is not valid UTF-8 text"
_NUMBER_TAIL = re.compile(r"[0-9.eE+\-]*")
# A JSON \uXXXX escape in the surrogate range; only records holding one can decode to a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def find_lone_surrogate(obj: Any, field: str = "") -> tuple[str, str, int] | None:
    """(field path, text, offset) of the first string in `obj` holding a lone UTF-16 surrogate.

    The JSON decoder turns a valid escape pair (``\\ud83d\\ude00``) into one character, so any
    surrogate left in a decoded string is unpaired and cannot be written as UTF-8 later. Keys are
    checked too (field ``a.<key>``). The field path reads like ``context[2][1][0]``.
    """
    if isinstance(obj, str):
        m = _SURROGATE.search(obj)
        return (field, obj, m.start()) if m else None
    if isinstance(obj, dict):
        for key, value in obj.items():
            name = f"{field}.{key}" if field else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                return find_lone_surrogate(key, f"{field}.<key>" if field else "<key>")
            found = find_lone_surrogate(value, name)
            if found:
                return found
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found = find_lone_surrogate(value, f"{field}[{i}]")
            if found:
                return found
    return None


def check_lone_surrogates(obj: Any, source: str, location: str) -> None:
    """Raise DataFormatError naming file, location and field if `obj` holds a lone surrogate."""
    found = find_lone_surrogate(obj)
    if found is None:
        return
    field, text, at = found
    code = f"\\u{ord(text[at]):04x}"
    context = text[max(0, at - 20):at + 21].encode("unicode_escape", "backslashreplace").decode("ascii")
    raise DataFormatError(
        source, location, field or None,
        f"holds a lone surrogate {code} at character {at} (in '{context}'): a \\uD800-\\uDFFF escape without "
        "its pair is not valid Unicode text; fix or remove it in the file")


def _open_text(path: Path) -> Any:
    return path.open("r", encoding="utf-8", errors="surrogateescape")


def iter_jsonl(path: str | Path, *, check_text: bool = True,
               progress: Callable[[int], None] | None = None) -> Iterator[tuple[str, Any]]:
    """Yield (``"line N"``, object) for each non-blank line; a bad line raises DataFormatError.

    `progress`, when given, is called every 4,096 lines and at the end with the bytes read so far
    (to within the reader's 8 KiB buffer), for a progress bar over the file size.
    """
    path = Path(path)
    with _open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if progress is not None and not lineno % 4096:
                progress(fh.buffer.tell())
            if not line.strip():
                continue
            if _BAD_BYTE.search(line):
                raise DataFormatError(str(path), f"line {lineno}", None, _NOT_UTF8)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(str(path), f"line {lineno}", None,
                                      f"invalid JSON ({exc.msg} at column {exc.colno})") from None
            except (ValueError, RecursionError) as exc:  # a number too long for int(); nesting too deep
                raise DataFormatError(str(path), f"line {lineno}", None, f"invalid JSON ({exc})") from None
            if check_text and _SURROGATE_ESCAPE.search(line):
                check_lone_surrogates(obj, str(path), f"line {lineno}")
            yield f"line {lineno}", obj
        if progress is not None:
            progress(fh.buffer.tell())


def iter_json_array(path: str | Path, *, check_text: bool = True) -> Iterator[tuple[str, Any]]:
    """Stream the elements of a top-level JSON array without loading the whole file."""
    path = Path(path)
    decoder = json.JSONDecoder()
    with _open_text(path) as fh:
        buf = fh.read(_CHUNK)
        pos = 0
        line = 1  # line number of buf[pos]
        eof = False

        def skip_ws() -> None:
            nonlocal pos, line
            while pos < len(buf) and buf[pos] in _WS:
                if buf[pos] == "\n":
                    line += 1
                pos += 1

        def refill() -> None:
            nonlocal buf, pos, eof
            more = fh.read(_CHUNK)
            if not more:
                eof = True
            buf = buf[pos:] + more
            pos = 0

        skip_ws()
        while pos >= len(buf) and not eof:
            refill()
            skip_ws()
        if pos >= len(buf) or buf[pos] != "[":
            raise DataFormatError(str(path), "line 1", None, "expected a JSON array ('[' at the start of the file)")
        pos += 1
        index = 0
        expect_value = True  # after '[' or ','
        while True:
            skip_ws()
            while pos >= len(buf) and not eof:
                refill()
                skip_ws()
            if pos >= len(buf):
                raise DataFormatError(str(path), f"record {index} (line {line})", None,
                                      "file ends before the closing ']' (truncated JSON)")
            ch = buf[pos]
            if ch == "]" and (index == 0 or not expect_value):
                return
            if not expect_value:
                if ch != ",":
                    raise DataFormatError(str(path), f"after record {index - 1} (line {line})", None,
                                          f"expected ',' or ']' but found {ch!r}")
                pos += 1
                expect_value = True
                continue
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                    # A number cut by the buffer edge may decode short ("1.5" of "1.5e3"): make sure it ended.
                    if not eof and _NUMBER_TAIL.match(buf, end).end() >= len(buf):
                        raise ValueError("at buffer edge")
                    break
                except RecursionError:
                    raise DataFormatError(str(path), f"record {index} (line {line})", None,
                                          "invalid JSON (nested too deeply to decode)") from None
                except (json.JSONDecodeError, ValueError) as exc:
                    if eof:
                        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                        raise DataFormatError(str(path), f"record {index} (line {line})", None,
                                              f"invalid or truncated JSON ({msg})") from None
                    refill()
            location = f"record {index} (line {line})"
            if _BAD_BYTE.search(buf, pos, end):
                raise DataFormatError(str(path), location, None, _NOT_UTF8)
            if check_text and _SURROGATE_ESCAPE.search(buf, pos, end):
                check_lone_surrogates(obj, str(path), location)
            line += buf.count("\n", pos, end)
            pos = end
            yield location, obj
            index += 1
            expect_value = False


def iter_records(path: str | Path, *, check_text: bool = True) -> Iterator[tuple[str, Any]]:
    """JSON array or JSONL, decided by the first non-blank character ('[' means array)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist")
    with _open_text(path) as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("["):
        yield from iter_json_array(path, check_text=check_text)
    else:
        yield from iter_jsonl(path, check_text=check_text)
