"""The installed package wins from any working directory: from the clone's parent folder, where the clone is a
folder named purecover/ without __init__.py, `import purecover` must not give an empty namespace package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_purecover_imports_from_the_clones_parent_folder(tmp_path):
    (tmp_path / "purecover").symlink_to(REPO, target_is_directory=True)  # the clone, as its parent folder sees it
    code = ("import purecover, purecover.data.passage; from purecover.models.selector import Selector; "
            "print(purecover.__file__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip().splitlines()[-1]).resolve() == (REPO / "purecover" / "__init__.py").resolve()


def test_make_setup_installs_in_compat_mode():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "EDITABLE := --config-settings editable_mode=compat" in makefile and "$(EDITABLE) -e" in makefile
