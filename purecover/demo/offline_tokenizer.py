"""A small byte-level BPE tokenizer trained offline, Qwen2.5-style, for demos and tests without the Hub.

`build_offline_tokenizer` trains a byte-level BPE (the `tokenizers` library) on the given texts
and saves it as a fast tokenizer that ``AutoTokenizer.from_pretrained(out_dir)`` loads offline:

- pre-tokenisation as Qwen2 (its split regex, then byte-level without prefix space): digits are
  single tokens, letters never merge with a preceding newline, so the ``letters`` identifier
  scheme (`purecover.models.identifiers`) holds;
- all 256 bytes are in the vocabulary, so no text is ever unknown and, with no normaliser (Qwen
  applies NFC), ``decode(encode(x)) == x`` for every string and offsets map exactly to characters;
- special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos), appended after
  the learned vocabulary as in Qwen2.5, and a ChatML chat template (no tools) whose default
  system message is "You are a helpful assistant.".

Training is deterministic: the same texts and vocab size give a byte-identical tokenizer.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_offline_tokenizer", "demo_tokenizer_texts"]

# Qwen2's pre-tokenisation regex (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                     r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
DEFAULT_SYSTEM = "You are a helpful assistant."

# ChatML as Qwen2.5 renders system/user/assistant messages (tool calls are not supported).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- set rest = messages[1:] %}"
    "{%- else %}"
    "{{- '<|im_start|>system\\n" + DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- set rest = messages %}"
    "{%- endif %}"
    "{%- for message in rest %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Prompt pieces not available as module constants (layouts of the teacher, selector and RAG prompts, ChatML).
_EXTRA_TEXTS = (
    "system\nuser\nassistant\n",
    "\n\nDocuments:\n[1] [2] [3] [4] [5]\n\nQuestion: ",
    "[Step 1]: [Step 2]: [Step 3]: [Step 4]: [Step 5]: [Answer]: yes no",
    "\n\nQuestion: \n\nPassages:\nA: \nB: \nC: \nD: \nE: \nF: \nG: \nH: ",
    "Document 1 (Title: ): Document 2 (Title: ): Document 3 (Title: ): ",
)
_FIXED_WEIGHT = 8  # the fixed strings recur in every prompt: repeat them so their words merge


def build_offline_tokenizer(out_dir: str | Path, texts: Iterable[str], vocab_size: int = 4000) -> Path:
    """Train a byte-level BPE on `texts` and save it to `out_dir`; returns `out_dir`.

    The vocabulary has at most `vocab_size` tokens, special tokens included: merges stop earlier
    when no pair occurs twice (the demo texts give about 3,000). The result loads with
    ``AutoTokenizer.from_pretrained(out_dir)``.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} is below the {len(alphabet)} bytes + {len(SPECIAL_TOKENS)} "
                         "special tokens a byte-level BPE needs")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(SPECIAL_TOKENS), min_frequency=2,
                                  initial_alphabet=sorted(alphabet), special_tokens=[], show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    missing = [c for c in alphabet if tok.token_to_id(c) is None]
    if missing:  # the trainer keeps the initial alphabet; guard the no-unknown-bytes guarantee anyway
        raise RuntimeError(f"byte-level alphabet incomplete after training: {missing[:5]}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], clean_up_tokenization_spaces=False,
        model_max_length=32768, padding_side="left", chat_template=CHAT_TEMPLATE)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return out


def demo_tokenizer_texts() -> list[str]:
    """Texts to train the demo tokenizer on: the bundled demo set and the fixed prompt strings."""
    from ..data.loaders import demo_path
    from ..eval import rag_prompt
    from ..models import selector_prompt
    from ..teacher import prompts

    texts: list[str] = []
    for record in json.loads(demo_path().read_text(encoding="utf-8")):
        texts.append(record["question"])
        texts.append(str(record.get("answer", "")))
        for title, sentences in record.get("context", []):
            texts.append(f"{title}\n{''.join(sentences)}")
    fixed = [prompts.SYSTEM_PROMPT, prompts.ReasoningPrompt.default().user_message("", [])[0],
             selector_prompt.SELECTOR_SYSTEM,
             selector_prompt.SELECTOR_INSTRUCTIONS, DEFAULT_SYSTEM, *_EXTRA_TEXTS]
    fixed += [rag_prompt.qa_messages("", [], d)[0] for d in ("hotpotqa", "strategyqa")]
    fixed += [rag_prompt.qa_messages("", [{"title": "", "text": ""}], d)[0] for d in ("hotpotqa", "strategyqa")]
    return texts + fixed * _FIXED_WEIGHT
