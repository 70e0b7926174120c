"""The select stage: run an exported selector over candidates → selections.jsonl (imports `models` and `data`)."""
