"""Stage `train`: selector dataset and collator, losses, the Trainer subclass, launch entry point, export.

Reads labels.jsonl and candidates.jsonl; never imports `teacher`.
"""
