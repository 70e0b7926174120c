"""Demo and test scaffolding built offline: a byte-level BPE tokenizer, tiny random causal LMs, the demo assets.

Not part of a deployed selector or of any stage; it may import the stages' prompt modules (to train
the tokenizer on the texts the stages render). Nothing in the stages imports it.
"""
