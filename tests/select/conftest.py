"""The select stage's tests share the models tests' session fixtures (one trained, exported tiny selector)."""

from tests.models.conftest import candidates, selector, selector_dir, selector_run  # noqa: F401
