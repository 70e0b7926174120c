"""No module of the package is over 600 lines: a longer one holds more than one job and is split along them (see
`purecover/config/`, `purecover/data/retrieval/bm25_*.py`, `purecover/eval/baseline_*.py`), its old module name
re-exporting what callers import."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "purecover"
MAX_LINES = 600


def _too_long(package: Path) -> list[str]:
    """``path: N lines`` of each module of `package` over `MAX_LINES` lines, longest first."""
    sizes = [(len(p.read_text(encoding="utf-8").splitlines()), p) for p in package.rglob("*.py")]
    return [f"purecover/{p.relative_to(package)}: {n} lines" for n, p in sorted(sizes, reverse=True) if n > MAX_LINES]


def test_no_module_is_over_600_lines():
    assert _too_long(PACKAGE) == [], f"split these modules along their jobs (at most {MAX_LINES} lines each)"


def test_the_size_check_finds_a_long_module(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert _too_long(tmp_path) == [f"purecover/sub/long.py: {MAX_LINES + 1} lines"]
