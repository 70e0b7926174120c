"""Bundled demo set: a small fictional multi-hop QA set in HotpotQA format, written for purecover."""
