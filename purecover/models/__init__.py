"""What a deployed selector needs: model/tokenizer loading, chat rendering, identifiers, the Selector.

Imports neither `train`, `teacher` nor `eval`.
"""
