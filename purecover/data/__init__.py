"""Stage `data`: dataset loaders, corpora, retrieval and candidate files. Imports no other stage."""

from .corpus import Corpus, CorpusLike, Doc, content_doc_id, corpus_from_examples, load_corpus_jsonl
from .corpus_store import CorpusStore, open_corpus_store
from .errors import DataFormatError, HubUnavailableError, InvalidRecord
from .example import Example, Paragraph
from .loaders import DATASETS, ExampleSource, demo_path, load_examples

__all__ = [
    "DATASETS",
    "Corpus",
    "CorpusLike",
    "CorpusStore",
    "DataFormatError",
    "Doc",
    "Example",
    "ExampleSource",
    "HubUnavailableError",
    "InvalidRecord",
    "Paragraph",
    "content_doc_id",
    "corpus_from_examples",
    "demo_path",
    "load_corpus_jsonl",
    "load_examples",
    "open_corpus_store",
]
