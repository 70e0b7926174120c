"""The plain layout (no chat template) starts with the tokenizer's BOS token: exactly once, and spans still map.

Every prompt is tokenised with ``add_special_tokens=False``; the BOS comes from the rendered text. Three tiny
word-level tokenizers: one whose post-processor adds a BOS (Llama-style), one with a BOS token it never adds
(Gemma-3 base as loaded without a template), one without a BOS.
"""

from __future__ import annotations

import pytest

from purecover.models.chat import bos_prefix, render_chat
from purecover.models.identifiers import IdentifierScheme
from purecover.models.selector_prompt import build_selector_prompt
from purecover.records import CandidateDoc

BOS = "<bos>"
TEXTS = ["You select passages. Which city hosts the tower? Paris hosts the tower. Rome has a forum.",
         "Question Passages Answer Step Document documents A B C D E the of and is in to a"]


def _tokenizer(bos: str | None, auto_add: bool, chat_template: str | None = None):
    import re
    import string

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<eos>"] + ([bos] if bos else [])
    words = set(string.ascii_letters) | set(string.punctuation) | set(string.digits) | {"\n"}
    for text in TEXTS:
        words.update(re.findall(r"\w+|[^\w\s]", text))
    vocab = {w: i for i, w in enumerate(specials + sorted(words - set(specials)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
        pre_tokenizers.Split(Regex("[ \t\r]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="isolated"),
    ])
    core.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    if bos and auto_add:
        core.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>",
                                  bos_token=bos)
    if chat_template:
        tok.chat_template = chat_template
    return tok


@pytest.fixture(scope="module")
def auto_bos():
    tok = _tokenizer(BOS, auto_add=True)
    assert tok("Paris")["input_ids"][0] == tok.bos_token_id  # it does add one when asked to
    return tok


@pytest.fixture(scope="module")
def silent_bos():
    tok = _tokenizer(BOS, auto_add=False)
    assert tok("Paris")["input_ids"][0] != tok.bos_token_id  # a BOS token it never adds by itself
    return tok


@pytest.fixture(scope="module")
def no_bos():
    tok = _tokenizer(None, auto_add=False)
    assert tok.bos_token is None
    return tok


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]  # how every prompt of the project is tokenised


@pytest.mark.parametrize("name", ["auto_bos", "silent_bos"])
def test_plain_layout_starts_with_one_bos(name, request):
    tok = request.getfixturevalue(name)
    chat = render_chat(tok, "You select passages.", "Which city hosts the tower?")
    assert chat.text == f"{BOS}You select passages.\n\nWhich city hosts the tower?\n\n"
    ids = _ids(tok, chat.text)
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1  # once, never twice
    assert chat.text[chat.user_offset:].startswith("Which city")  # the user message is still located
    assert render_chat(tok, None, "Paris").text == f"{BOS}Paris\n\n" and bos_prefix(tok) == BOS


def test_without_a_bos_the_plain_layout_is_unchanged(no_bos):
    chat = render_chat(no_bos, "You select passages.", "Which city hosts the tower?")
    assert chat.text == "You select passages.\n\nWhich city hosts the tower?\n\n" and chat.user_offset == 22
    assert bos_prefix(no_bos) == ""
    assert _ids(no_bos, chat.text) == _ids(no_bos, "You select passages.") + _ids(no_bos, "\n\nWhich city hosts "
                                                                                          "the tower?\n\n")


def test_a_chat_template_keeps_its_own_bos():
    """With a template the template decides (here it writes the BOS): nothing is added on top."""
    tok = _tokenizer(BOS, auto_add=True, chat_template="{{ bos_token }}{% for m in messages %}{{ m.content }}\n"
                                                       "{% endfor %}")
    chat = render_chat(tok, "You select passages.", "Which city?")
    assert chat.text == f"{BOS}You select passages.\nWhich city?\n"
    assert _ids(tok, chat.text).count(tok.bos_token_id) == 1


@pytest.mark.parametrize("name", ["auto_bos", "silent_bos", "no_bos"])
def test_selector_prompt_token_ids(name, request):
    tok = request.getfixturevalue(name)
    scheme = IdentifierScheme().check(tok, 2)
    docs = [CandidateDoc(doc_id="p", title="Paris", text="Paris hosts the tower."),
            CandidateDoc(doc_id="r", title="Rome", text="Rome has a forum.")]
    prompt = build_selector_prompt(tok, "Which city hosts the tower?", docs, scheme, max_passage_tokens=32)
    if tok.bos_token is None:
        assert tok.unk_token_id not in prompt.input_ids[:1] and not prompt.text.startswith(BOS)
        assert prompt.input_ids == _ids(tok, prompt.text)
    else:
        assert prompt.input_ids[0] == tok.bos_token_id and prompt.input_ids.count(tok.bos_token_id) == 1
    assert all(t in prompt.input_ids for t in scheme.token_ids)  # the identifiers are still single tokens


@pytest.mark.parametrize("name", ["auto_bos", "silent_bos", "no_bos"])
def test_teacher_spans_map_to_the_same_tokens(name, request):
    """The teacher maps document and step character spans to token positions through the offsets: with the
    BOS in front they still cover exactly the document's and the step's tokens."""
    from purecover.teacher.prompts import build_reasoning_prompt, build_teacher_sequence

    tok = request.getfixturevalue(name)
    docs = [CandidateDoc(doc_id="p", title="Paris", text="Paris hosts the tower."),
            CandidateDoc(doc_id="r", title="Rome", text="Rome has a forum.")]
    text, spans = build_reasoning_prompt(tok, "Which city hosts the tower?", docs)
    assert text.startswith(BOS) == (tok.bos_token is not None)
    for (a, b), d in zip(spans, docs):
        assert text[a:b] == f"{d.title}\n{d.text}"
    seq = build_teacher_sequence(tok, text, spans, ["Paris hosts the tower."], "Paris")
    if tok.bos_token is not None:
        assert seq.input_ids[0] == tok.bos_token_id and seq.input_ids.count(tok.bos_token_id) == 1
    for (a, b), d in zip(seq.doc_spans, docs):
        assert seq.input_ids[a:b] == _ids(tok, f"{d.title}\n{d.text}")
    (sa, sb), = seq.step_spans
    assert seq.input_ids[sa:sb] == _ids(tok, "Paris hosts the tower.")
    assert seq.input_ids[seq.answer_span[0]:seq.answer_span[1]] == _ids(tok, "Paris")


def test_bpe_tokenizer_with_bos_spans(sample_dir):
    """The same on a real byte-level BPE (Qwen2's, given a BOS and no template, as a base model's can be)."""
    from transformers import AutoTokenizer

    from purecover.teacher.prompts import build_reasoning_prompt, build_teacher_sequence

    tok = AutoTokenizer.from_pretrained(sample_dir / "qwen2_tokenizer")
    tok.chat_template = None
    tok.bos_token = "<|endoftext|>"
    docs = [CandidateDoc(doc_id="p", title="Paris", text="Paris hosts the Eiffel tower."),
            CandidateDoc(doc_id="r", title="Rome", text="Rome has a forum.")]
    text, spans = build_reasoning_prompt(tok, "Which city hosts the tower?", docs)
    seq = build_teacher_sequence(tok, text, spans, ["Paris hosts the tower."], "Paris")
    assert seq.input_ids[0] == tok.bos_token_id and seq.input_ids.count(tok.bos_token_id) == 1
    for (a, b), d in zip(seq.doc_spans, docs):
        assert tok.decode(seq.input_ids[a:b]).strip() == f"{d.title}\n{d.text}"
    scheme = IdentifierScheme().check(tok, 2)
    prompt = build_selector_prompt(tok, "Which city?", docs, scheme)
    assert prompt.input_ids[0] == tok.bos_token_id and prompt.input_ids.count(tok.bos_token_id) == 1
