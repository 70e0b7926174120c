"""The documentation site's own code (not part of the installed package): the generated reference pages
(`reference`, written by ``python docs/generate.py``) and the formulas as MathML (`mathml`, a hook of mkdocs.yml)."""
