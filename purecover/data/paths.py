"""``data.path`` as one source or a list of local files: its entries, the recipe key of each, how it is shown.

``data.path`` is one source (a local file, ``demo``, a Hub dataset id or a local dataset repository folder) or a
list of two or more local files of one record format (``data.dataset``), read in list order as one set of
questions (`purecover.data.loaders.ExampleSource`). A list never holds ``demo``, a Hub dataset id or a folder:
those are read alone (`list_entry_problem`). A one-entry list is the plain path (`purecover.config.DataConfig`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..config import ConfigError, Recipe

__all__ = ["check_data_files", "check_path_list", "data_path_entries", "is_path_list", "list_entry_problem",
           "not_a_file", "show_data_path"]


def is_path_list(path: object) -> bool:
    """Whether `path` is the list form of ``data.path`` (a list or tuple, not a string)."""
    return isinstance(path, (list, tuple))


def data_path_entries(path: str | Path | Sequence[str | Path] | None, key: str = "data.path") -> list[tuple[str, str]]:
    """``(recipe key, entry)`` of each entry of ``data.path``: ``[("data.path", P)]`` for one source,
    ``[("data.path[0]", A), ("data.path[1]", B), ...]`` for a list, ``[]`` when unset."""
    if path is None:
        return []
    if is_path_list(path):
        return [(f"{key}[{i}]", str(p)) for i, p in enumerate(path)]
    return [(key, str(path))]


def show_data_path(path: str | Path | Sequence[str | Path] | None) -> str:
    """``data.path`` for messages: the path itself, or the list's entries joined by ``" + "``."""
    if path is None:
        return "null"
    if is_path_list(path):
        return " + ".join(str(p) for p in path)
    return str(path)


def list_entry_problem(entry: str, must_exist: bool = False) -> str | None:
    """Why `entry` cannot be an entry of a ``data.path`` list (None when it can): ``demo``, a folder (a local
    dataset repository is read through `datasets`, alone) or a Hub dataset id are read alone; with `must_exist`,
    an entry that is no existing file."""
    from .loaders.hub import is_hub_name

    alone = "read it alone (data.path: {0}); a list of data.path entries must be local files of one format"
    if entry == "demo":
        return "is the bundled demo set: " + alone.format("demo")
    p = Path(entry).expanduser()
    if p.is_dir():
        return "is a folder (a local dataset repository): " + alone.format(entry)
    if not p.exists() and is_hub_name(entry):
        return "is a Hugging Face Hub dataset id, not a local file: " + alone.format(entry) + \
            " (download the Hub dataset's files and list those instead)"
    if must_exist and not p.is_file():
        return not_a_file(p) + " (a data.path list names local files, each read in list order)"
    return None


def not_a_file(path: Path) -> str:
    """What `path` is, when it is no regular file: a symbolic-link loop, a link to nothing, a named pipe, a
    device (``/dev/null``), a socket, or nothing."""
    import errno
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a loop of symbolic links"
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
        return "does not exist"
    kinds = ((stat.S_ISFIFO, "is a named pipe (FIFO), not a file"),
             (stat.S_ISCHR, "is a character device (such as /dev/null), not a file"),
             (stat.S_ISBLK, "is a block device, not a file"), (stat.S_ISSOCK, "is a socket, not a file"),
             (stat.S_ISDIR, "is a folder"))
    return next((said for test, said in kinds if test(mode)), "is not a regular file")


def check_path_list(path: str | Sequence[str] | None, must_exist: bool = True) -> None:
    """Every entry of a ``data.path`` list can be one (`list_entry_problem`; with `must_exist`, is an existing
    file): else a ConfigError naming the entry's key (``data.path[1]``) and its path. One path: nothing to check
    here (it may be a Hub dataset id: the data stage resolves it)."""
    if not is_path_list(path):
        return
    for key, entry in data_path_entries(path):
        problem = list_entry_problem(entry, must_exist)
        if problem is not None:
            raise ConfigError(f"{key}: {entry!r} {problem}")


def check_data_files(recipe: Recipe, dry_run: bool = False) -> None:
    """The data stage's recipe check (`purecover.stages.Stage.check`), which ``purecover pipeline`` (and its dry
    run) runs before any stage when the data stage has work: every file of a ``data.path`` list exists. Not part of
    `purecover.validate.validate_recipe`, so a run directory whose data stage is complete still trains and
    evaluates where the files are absent (a missing file is not a changed input)."""
    check_path_list(recipe.data.path, must_exist=True)
