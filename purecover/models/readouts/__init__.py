"""The student's readouts, one module each, and their registry: where a selector reads each candidate's score.

A readout is chosen by the recipe's ``student.readout`` and ``student.passage_score`` (recorded under the same
keys in the student metadata and selector_config.json); `get_readout` maps the pair to its `Readout`. Code
outside this package asks the readout (its layout, marker, read token, head, scores, backend check and card
text) and never branches on its name; the recipe check, the records and the training arguments take the
values they accept from `READOUT_VALUES` and `PASSAGE_SCORES`, and reject a pair no readout has with
`pair_problem`.

A new readout is one module defining a `Readout` and one line in `REGISTRY`.
"""

from __future__ import annotations

from .base import Readout
from .identifier import IDENTIFIER
from .passage import PASSAGE
from .passage_head import PASSAGE_HEAD

__all__ = ["PASSAGE_SCORES", "READOUT_VALUES", "REGISTRY", "Readout", "get_readout", "pair_problem", "prompt_readout"]

REGISTRY: dict[str, Readout] = {r.name: r for r in (
    IDENTIFIER,
    PASSAGE,
    PASSAGE_HEAD,
)}
READOUT_VALUES: tuple[str, ...] = tuple(dict.fromkeys(r.readout for r in REGISTRY.values()))  # student.readout
PASSAGE_SCORES: tuple[str, ...] = tuple(dict.fromkeys(r.passage_score for r in REGISTRY.values()))


def pair_problem(readout: str, passage_score: str) -> str | None:
    """None when a registered readout has the pair (``readout``, ``passage_score``); else what is wrong with it,
    e.g. ``head scores the passage readout's markers: needs readout: passage``."""
    if any(r.readout == readout and r.passage_score == passage_score for r in REGISTRY.values()):
        return None
    if readout not in READOUT_VALUES:
        return f"unknown selector readout {readout!r}; expected one of {', '.join(READOUT_VALUES)}"
    if passage_score not in PASSAGE_SCORES:
        return f"unknown passage_score {passage_score!r}; expected one of {', '.join(PASSAGE_SCORES)}"
    scored = " or ".join(sorted({r.readout for r in REGISTRY.values() if r.passage_score == passage_score}))
    return f"{passage_score} scores the {scored} readout's markers: needs readout: {scored}"


def get_readout(readout: str = "identifier", passage_score: str = "token") -> Readout:
    """The readout the pair (``readout``, ``passage_score``) selects; ValueError (`pair_problem`) for a value no
    readout has, or a pair no readout has (``passage_score: head`` with ``readout: identifier``)."""
    for r in REGISTRY.values():
        if r.readout == readout and r.passage_score == passage_score:
            return r
    raise ValueError(f"readout {readout}, passage_score {passage_score}: {pair_problem(readout, passage_score)}")


def prompt_readout(readout: str) -> Readout:
    """The first registered readout of the ``student.readout`` value `readout`: the one whose prompt (layout and
    marker) that value renders, shared by every readout of the value. ValueError for an unknown value."""
    for r in REGISTRY.values():
        if r.readout == readout:
            return r
    raise ValueError(f"unknown selector readout {readout!r}; expected one of {', '.join(READOUT_VALUES)}")
