"""Command-line options of ``purecover export`` beyond the recipe (light: no torch): ``--push-to-hub``.

`export_command` is the export stage's `purecover.stages.Stage.command` hook: it adds the options to the
subcommand and returns the handler that runs the stage, then pushes the finished export. The push is not
a recipe key, so the export's config hash is the same with or without it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["export_command"]

Handler = Callable[..., int]


def export_command(p: argparse.ArgumentParser) -> Handler:
    """Add ``--push-to-hub REPO [--private] [--revision B] [--commit-message M]``; the handler to run."""
    p.add_argument("--push-to-hub", dest="push_to_hub", default=None, metavar="REPO",
                   help="after the export, upload run_dir/selector/ to this Hub model repo (owner/name)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument("--revision", default=None, metavar="BRANCH", help="with --push-to-hub: the branch (default main)")
    p.add_argument("--commit-message", default=None, help="with --push-to-hub: the commit message")
    return _export_then_push


def _export_then_push(args: argparse.Namespace, default: Handler) -> int:
    code = default(args)
    if code or not args.push_to_hub:
        return code
    from ..config import load_recipe
    from .push import push_export

    recipe = load_recipe(args.recipe, args.overrides)  # validated by the stage run above
    pushed = push_export(recipe, args.push_to_hub, private=args.private, revision=args.revision,
                         commit_message=args.commit_message)
    if pushed["already_pushed"]:
        print(f"already pushed: {pushed['url']} (commit {pushed['commit']}, same files)")
    else:
        print(f"pushed: {pushed['url']} (commit {pushed['commit']})")
    return 0
