"""Small GGUF files and wheels written by the tests (the `gguf` package's writer; no download).

`write_tiny_gguf` writes a 2-layer Llama-architecture model (hidden 32) in float32, with a 101-token byte-level
vocabulary of three merges or, given a byte-level BPE ``tokenizer.json`` directory (the demo's offline tokenizer),
that vocabulary, its merges and a ChatML chat template; `write_wheel` packs files into a minimal valid wheel that ``pip download --no-index
--find-links`` accepts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

TINY_NAME = "tiny test llama"
TINY_LICENSE = "apache-2.0"


def _bpe_vocabulary(tokenizer_dir: Path) -> tuple[list[str], list[str], list[int], int, int, str | None]:
    """(tokens by id, merges, token types, bos id, eos id, chat template) of a byte-level BPE tokenizer.json."""
    import gguf

    data = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = {i: t for t, i in data["model"]["vocab"].items()}
    specials = {a["id"]: a["content"] for a in data.get("added_tokens", [])}
    by_id.update(specials)
    tokens = [by_id[i] for i in range(len(by_id))]
    merges = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    types = [gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL for i in range(len(tokens))]
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    ids = {t: i for i, t in enumerate(tokens)}
    template = config.get("chat_template")
    if template is None and (tokenizer_dir / "chat_template.jinja").is_file():
        template = (tokenizer_dir / "chat_template.jinja").read_text(encoding="utf-8")
    return tokens, merges, types, ids.get("<|im_start|>", 0), ids.get("<|im_end|>", 0), template


def write_tiny_gguf(path: Path, seed: int = 0, arch: str = "llama", tokenizer_dir: Path | None = None,
                    context_length: int = 256, declared_ffn: int | None = None,
                    tensor_types: dict[str, str] | None = None) -> Path:
    """A tiny model of architecture `arch` (llama unless a test wants an unsupported one); returns `path`.
    `declared_ffn`: a feed-forward width for the metadata only (the tensors keep theirs), as a hostile file would.
    `tensor_types`: tensor name → GGML type to store it in instead of F32 (``Q8_0``, ``Q5_0``: quantised with the
    ``gguf`` package; ``F64``: as float64)."""
    import gguf

    rng = np.random.default_rng(seed)
    if tokenizer_dir is None:
        tokens = ["<|endoftext|>", "<s>", "</s>", *[chr(c) for c in range(33, 127)], "Ġ", "Ġt", "he", "Ġthe"]
        merges = ["Ġ t", "h e", "Ġt he"]
        types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (len(tokens) - 3)
        bos, eos, template, pre = 1, 2, None, "default"
    else:
        tokens, merges, types, bos, eos, template = _bpe_vocabulary(tokenizer_dir)
        pre = "qwen2"
    vocab, hidden, inter, layers, heads, kv = len(tokens), 32, 64, 2, 4, 2
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(TINY_NAME)
    w.add_license(TINY_LICENSE)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_context_length(context_length)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(declared_ffn or inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    if template:
        w.add_chat_template(template)

    def tensor(name: str, *shape: int) -> None:
        values = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        kind = (tensor_types or {}).get(name)
        if kind == "F64":
            w.add_tensor(name, values.astype(np.float64))
        elif kind is not None:
            from gguf.quants import quantize

            qtype = gguf.GGMLQuantizationType[kind]
            w.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)  # byte shape: the writer derives the rest
        else:
            w.add_tensor(name, values)

    tensor("token_embd.weight", vocab, hidden)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", (1 + rng.standard_normal(hidden) * 0.1).astype(np.float32))
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_k.weight", kv * hidden // heads, hidden)
        tensor(f"blk.{i}.attn_v.weight", kv * hidden // heads, hidden)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", inter, hidden)
        tensor(f"blk.{i}.ffn_up.weight", inter, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, inter)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    tensor("output.weight", vocab, hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_wheel(directory: Path, package: str, version: str, members: dict[str, bytes]) -> Path:
    """A pure-Python wheel of `package` holding `members` (path → bytes); returns its path."""
    dist = package.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: purecover-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"

    def record_line(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(data)}"

    record = "\n".join(record_line(n, d) for n, d in files.items()) + f"\n{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path
