"""A chat template must finish: every template is rendered once, in a child process, under a time and size bound.

A tokenizer's chat template is a Jinja program that comes with the model (a GGUF file's
``tokenizer.chat_template``, a ``tokenizer_config.json``). transformers renders it in Jinja's sandbox, which
blocks file reads and attribute escapes but not a loop of ``range(100000)`` inside another: such a template
converts and loads fine and then hangs the first ``apply_chat_template`` (what the teacher, the generator and
the selector call). `check_chat_template` renders each template of a tokenizer once on a small conversation
in a forked child that is killed after `RENDER_SECONDS`, and refuses the template (ValueError naming the model)
when the child does not finish in time or renders more than `MAX_RENDERED_CHARS`. A template that raises (one
that refuses a system message, say) is not refused here: that is its own, prompt-time, error. Each template
is checked once per process (keyed by its sha256); the sandbox is transformers' own, unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MAX_RENDERED_CHARS", "RENDER_SECONDS", "check_chat_template"]

RENDER_SECONDS = 10.0  # real templates render a short conversation in milliseconds
MAX_RENDERED_CHARS = 1_000_000
CONVERSATION = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": "Which river flows through Paris?"},
                {"role": "assistant", "content": "The Seine."},
                {"role": "user", "content": "And through Vienna?"}]
_CHECKED: set[str] = set()


def _templates(tokenizer: Any) -> dict[str, str]:
    """name -> template text of every chat template `tokenizer` holds (one unnamed, or a dict of named ones)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        return {"default": template}
    if isinstance(template, dict):
        return {str(k): v for k, v in template.items() if isinstance(v, str)}
    return {}


def _render(tokenizer: Any, template: str, conn: Any) -> None:
    """The child: render `template` on `CONVERSATION` and send back ("ok", chars) or ("error", message)."""
    try:
        text = tokenizer.apply_chat_template(CONVERSATION, chat_template=template, tokenize=False,
                                             add_generation_prompt=True)
        conn.send(("ok", len(text)))
    except BaseException as exc:  # anything the template raises is reported, not judged
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))
    finally:
        conn.close()


def check_chat_template(tokenizer: Any, source: str) -> None:
    """Render each chat template of `tokenizer` once (module docstring); ValueError naming `source` when one
    does not finish within `RENDER_SECONDS` or renders more than `MAX_RENDERED_CHARS` characters."""
    for name, template in _templates(tokenizer).items():
        key = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()
        if key in _CHECKED:
            continue
        what = "its chat template" if name == "default" else f"its chat template {name!r}"
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_render, args=(tokenizer, template, child), daemon=True)
        proc.start()
        child.close()
        result = None
        if parent.poll(RENDER_SECONDS):
            try:
                result = parent.recv()
            except EOFError:  # the child died without a word (killed from outside, out of memory)
                result = ("error", "the rendering process exited")
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
        if result is None:
            raise ValueError(f"{source}: {what} did not finish rendering a 4-message conversation within "
                             f"{RENDER_SECONDS:.0f} s (runaway loops?); refusing it. Give the model a template "
                             "that finishes (tokenizer_config.json's chat_template, or chat_template.jinja)")
        status, value = result
        if status == "ok" and value > MAX_RENDERED_CHARS:
            raise ValueError(f"{source}: {what} renders a 4-message conversation as {value:,} characters (limit "
                             f"{MAX_RENDERED_CHARS:,}); refusing it")
        if status == "error":
            log.debug("%s: %s raised on the check's conversation: %s", source, what, value)
        _CHECKED.add(key)
