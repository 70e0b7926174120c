"""purecover: distilled set-wise document selection for retrieval-augmented generation."""

__version__ = "0.1.0"
