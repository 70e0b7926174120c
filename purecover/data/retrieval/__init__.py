"""Retrievers over a `Corpus`: BM25 (bm25s) and dense (sentence-transformers, FAISS when installed)."""

from .base import Hit, Retriever, top_k
from .bm25 import BM25Retriever

__all__ = ["BM25Retriever", "Hit", "Retriever", "top_k"]
