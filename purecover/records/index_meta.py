"""The shared index directory: a corpus store's store.json (and the invalid records it left out), the
embedding shards' manifest, a FAISS index's metadata and a BM25 index's metadata."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import NonNegativeInt, _Written


class BuiltFile(_Written):
    """One file an index build wrote, as it was when built: checked each time the index is opened
    (`purecover.utils.built_files`)."""

    bytes: NonNegativeInt = Field(description="Its size in bytes.")
    crc32: str = Field(pattern=r"^[0-9a-f]{8}$", description="CRC-32 of its bytes, 8 lower-case hex digits.")


class FileStamp(_Written):
    """A file's identity as ``stat`` saw it when its checksum last matched: an open reads the file again only when
    one of these moved."""

    size: NonNegativeInt = Field(description="Its size in bytes.")
    mtime_ns: int = Field(description="Its modification time in nanoseconds.")
    ctime_ns: int = Field(description="Its inode change time in nanoseconds (moves with any write, rename or "
                                      "chmod, and cannot be set back).")
    inode: NonNegativeInt = Field(description="Its inode number.")


class VerifiedFiles(_Written):
    """``verified.json`` beside an index's files: when each was last found equal to its build checksum
    (`purecover.utils.built_files`). Deleting it costs one full read of the files on the next open."""

    files: dict[str, FileStamp] = Field(description="Each file (and the metadata file) by name, as it was then.")
    meta_crc32: str = Field(pattern=r"^[0-9a-f]{8}$", description="CRC-32 of the metadata file then: a metadata "
                                                                  "file edited after the build is noticed.")
    verified_at: str = Field(description="When (UTC, ISO 8601, seconds).")


_FILES_DESCRIPTION = ("Size and CRC-32 of each file the build wrote, by name (checked when the index is opened); "
                      "absent in indexes of earlier versions, which are built again.")


class InvalidRecord(_Written):
    """One input record left out as invalid (``data.skip_invalid``): in data_report.json and in a corpus store's
    store.json. `purecover.data.errors.DataFormatError.invalid_record` makes it from the error."""

    source: str = Field(description="The file (or Hub dataset) the record comes from.")
    location: str = Field(description="Where the record is in it, e.g. 'line 12' or 'row 3'.")
    field: str | None = Field(description="The field at fault; null when the record as a whole is.")
    problem: str = Field(description="What is wrong with it.")


class CorpusFileIdentity(_Written):
    """A corpus file as ``stat`` saw it when its store was built: a change to any of these gets a new store.

    ``ctime_ns`` (the inode's change time, which no ordinary tool sets back) catches an edit in place whose
    mtime was restored; it is absent in stores of early versions, which are therefore built again once."""

    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset({"ctime_ns"})

    path: str = Field(description="The file's resolved path.")
    size: NonNegativeInt = Field(description="Its size in bytes.")
    mtime_ns: int = Field(description="Its modification time in nanoseconds.")
    inode: NonNegativeInt = Field(description="Its inode number.")
    ctime_ns: int | None = Field(default=None, description="Its inode change time in nanoseconds (moves with any "
                                                           "write, rename, chmod or mtime change).")


class CorpusStoreMeta(_Written):
    """``<index_dir>/corpus-<key>/store.json``: what a corpus store holds, written last when it is built
    (`purecover.data.corpus_store`); a store whose file does not validate is built again."""

    format: int = Field(description="The store's format (purecover.data.corpus_store.STORE_FORMAT).")
    source: CorpusFileIdentity = Field(description="The corpus file it was built from.")
    passages: int = Field(ge=1, description="How many passages it holds (invalid records and repeated ids left "
                                            "out).")
    fingerprint: str = Field(description="SHA-256 over the ids, titles and texts in order (the corpus "
                                         "fingerprint).")
    batch_rows: int = Field(ge=1, description="Rows per Arrow record batch of passages.arrow.")
    invalid_records: list[InvalidRecord] = Field(description="The records left out as invalid "
                                                             "(data.skip_invalid).")
    built_at: str = Field(description="When it was built (UTC, ISO 8601, seconds).")
    build_seconds: float = Field(ge=0, description="How long the build took.")
    build_peak_rss_mb: float | None = Field(description="Peak resident memory of the building process, MiB; null "
                                                        "where it cannot be read.")
    versions: dict[str, str] = Field(description="Versions of purecover, pyarrow and numpy that built it.")
    files: dict[str, BuiltFile] | None = Field(default=None, description=_FILES_DESCRIPTION)


class ShardManifest(_Written):
    """``dense-<key>/manifest.json`` of a shard directory: what its embedding shards hold
    (`purecover.data.retrieval.embedding_shards`). Written sorted by key, 2-space indented."""

    format_version: int = Field(description="The shard layout's version (embedding_shards.FORMAT_VERSION).")
    corpus: str = Field(description="The fingerprint of the corpus encoded.")
    corpus_source: str = Field(description="Where the corpus was read from (not part of the key).")
    n: NonNegativeInt = Field(description="How many passages the corpus has.")
    shard_size: int = Field(ge=1, description="Passages per shard (the last one holds the rest).")
    model: str = Field(description="The embedding model's name.")
    passage_prefix: str = Field(description="Text put before every passage when encoding.")
    dtype: Literal["float32", "float16"] = Field(description="The stored embeddings' dtype.")
    dim: int | None = Field(ge=1, description="Embedding dimension; null when the model does not declare it.")
    normalize: bool = Field(description="Whether rows are L2-normalised (always true).")
    key: str = Field(description="16 hex digits of SHA-256 over the other fields (corpus_source left out).")


class FaissIndexMeta(_Written):
    """``<index file>.json`` beside a FAISS index built from embedding shards
    (`purecover.data.retrieval.faiss_index.build_faiss_index`)."""

    format_version: int = Field(description="The metadata's version (faiss_index.INDEX_FORMAT_VERSION).")
    factory: str = Field(description="The faiss.index_factory string, e.g. 'Flat' or 'IVF4096,PQ96'.")
    metric: str = Field(description="The metric: inner_product.")
    ntotal: NonNegativeInt = Field(description="Vectors in the index.")
    dim: int = Field(ge=1, description="Their dimension.")
    shards_key: str = Field(description="The key of the shard manifest it was built from.")
    trained_on: NonNegativeInt = Field(description="Rows the index was trained on (0: no training needed).")
    seed: int = Field(description="Seed of the training.")
    faiss_version: str = Field(description="The faiss version that built it.")
    files: dict[str, BuiltFile] | None = Field(default=None, description=_FILES_DESCRIPTION)


class BM25Settings(_Written):
    """What a BM25 index depends on: its key hashes these (sorted JSON)."""

    corpus: str = Field(description="The fingerprint of the corpus indexed.")
    stopwords: str | None = Field(description="bm25s stopword list (e.g. 'en'); null for none.")
    bm25s: str = Field(description="The bm25s version whose tokenizer and scoring are reproduced.")
    method: str = Field(description="The BM25 variant: lucene.")
    k1: float = Field(description="BM25's k1 (term frequency saturation).")
    b: float = Field(description="BM25's b (length normalisation).")
    text: str = Field(description="What is indexed of each passage: title+text.")
    format: int = Field(description="The index files' format (bm25_index.FORMAT_VERSION).")


class BM25BuildStats(_Written):
    """How a BM25 index was built (`purecover.data.retrieval.bm25_index.build_index`)."""

    passages: NonNegativeInt = Field(description="Passages indexed.")
    terms: NonNegativeInt = Field(description="Vocabulary size.")
    postings: NonNegativeInt = Field(description="Non-zero weights (term, passage).")
    tokens: NonNegativeInt = Field(description="Tokens over all passages.")
    runs: NonNegativeInt = Field(description="Sorted runs written by the first pass.")
    buckets: NonNegativeInt = Field(description="Column buckets merged by the second pass.")
    read_batch: int = Field(ge=1, description="Passages read per batch (a memory knob).")
    run_tokens: int = Field(ge=1, description="Tokens per run (a memory knob).")
    bucket_postings: int = Field(ge=1, description="Postings per bucket (a memory knob).")
    tokenize_seconds: float = Field(ge=0, description="Seconds of the first (tokenizing) pass.")
    build_seconds: float = Field(ge=0, description="Seconds of the whole build.")
    build_peak_rss_mb: float | None = Field(description="Peak resident memory of the building process, MiB; null "
                                                        "where it cannot be read.")


class BM25IndexMeta(_Written):
    """``bm25-<key>/`` metadata file of a BM25 index on disk, written last (`purecover.data.retrieval.bm25`)."""

    settings: BM25Settings = Field(description="What the index depends on (hashed into its key).")
    n_docs: NonNegativeInt = Field(description="Passages in the index.")
    source: str = Field(description="Where the corpus was read from.")
    build: BM25BuildStats = Field(description="How it was built.")
    files: dict[str, BuiltFile] | None = Field(default=None, description=_FILES_DESCRIPTION)
