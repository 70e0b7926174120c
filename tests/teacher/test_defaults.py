"""Null recipe keys resolve to the defaults of the signal they act on (purecover/teacher/defaults.py)."""

from __future__ import annotations

import pytest

from purecover.config import load_recipe
from purecover.teacher.defaults import LAM_DEFAULTS, SIGNAL_DEFAULTS, resolve_params


def resolved(*overrides, **changes):
    return resolve_params(load_recipe(None, list(overrides)).teacher, **changes)


def test_attention_defaults_to_zscore():
    p = resolved()
    assert (p.e_source, p.w_source, p.normalize) == ("attention", "attention", "zscore")
    assert (p.tau_e, p.tau_w, p.lam) == (0.4, 0.4, 0.1)
    assert p.calibrate and p.cot_weighting and p.beta == 0.0


def test_absolute_attention_gets_the_papers_temperatures():
    p = resolved("teacher.normalize=absolute")
    assert (p.tau_e, p.tau_w, p.lam) == (4e-5, 4e-5, 0.3)


def test_embedding_defaults_are_the_tuned_cosine_values():
    p = resolved("teacher.estimator=embedding")
    assert (p.e_source, p.w_source, p.normalize) == ("similarity", "similarity", "absolute")
    assert (p.tau_e, p.tau_w, p.lam) == (SIGNAL_DEFAULTS["similarity"].e["absolute"],
                                         SIGNAL_DEFAULTS["similarity"].W["absolute"],
                                         LAM_DEFAULTS[("similarity", "absolute")])
    assert not p.calibrate  # nothing to calibrate without attention to documents
    z = resolved("teacher.estimator=embedding", "teacher.normalize=zscore")
    assert (z.tau_e, z.tau_w) == (4.0, 1.0)


def test_no_attention_takes_e_from_attention_and_w_from_similarity():
    p = resolved("teacher.estimator=no_attention", "teacher.tau1=2e-5", "teacher.embedding_tau=0.3")
    assert (p.e_source, p.w_source) == ("attention", "similarity")
    assert (p.tau_e, p.tau_w, p.lam, p.normalize) == (2e-5, 0.3, 0.1, "absolute")
    assert not p.calibrate


def test_explicit_keys_win_and_only_the_used_temperatures_matter():
    p = resolved("teacher.tau1=0.5", "teacher.tau2=2", "teacher.lam=0.7", "teacher.embedding_tau=9")
    assert (p.tau_e, p.tau_w, p.lam) == (0.5, 2.0, 0.7)


def test_changes_override_recipe_keys_like_tune_does():
    p = resolved("teacher.estimator=embedding", lam=0.2, embedding_tau=0.05, tau_stop=0.01, beta=0.5)
    assert (p.lam, p.tau_w, p.tau_stop) == (0.2, 0.05, 0.01)
    assert p.beta == 0.0  # LANCER is off in this recipe, so β does nothing
    assert resolved("teacher.lancer.enabled=true", beta=0.5).beta == 0.5
    with pytest.raises(ValueError, match="cannot vary"):
        resolved(temperature=1.0)
    with pytest.raises(ValueError, match="tau_w must be > 0"):
        resolved(tau2=0.0)


def test_recipe_rejects_non_positive_temperatures():
    from purecover.config import ConfigError

    with pytest.raises(ConfigError, match="teacher.embedding_tau_e: must be > 0"):
        load_recipe(None, ["teacher.embedding_tau_e=0"])
    with pytest.raises(ConfigError, match=r"teacher.normalize: expected 'absolute' \| 'zscore' \| null"):
        load_recipe(None, ["teacher.normalize=minmax"])
