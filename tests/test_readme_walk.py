"""The README's commands run as written in a fresh shell after its install step: `. .venv/bin/activate`, then the
quickstart's `purecover config my.yaml` and `purecover pipeline my.yaml --dry-run` on the `my.yaml` it shows
(`purecover: command not found` before: activation was only shown for GPU installs)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    """Every README bash line, without its comment."""
    return [line.split("  #")[0].strip() for block in _blocks("bash") for line in block.splitlines() if line.strip()]


def test_the_install_step_activates_the_environment_before_any_purecover_command():
    commands = _commands()
    first = next(i for i, c in enumerate(commands) if c.startswith("purecover "))
    assert ". .venv/bin/activate" in commands[:first]
    assert commands.index("make setup") < commands.index(". .venv/bin/activate")


def test_the_quickstart_runs_as_written_in_a_fresh_shell(tmp_path):
    """A folder standing in for the clone (its configs/ and .venv/), my.yaml as the README shows it, then the
    README's own lines in `bash --noprofile --norc` with a bare environment."""
    for name in ("configs", ".venv"):
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    my_yaml = next(b for b in _blocks("yaml") if b.startswith("base: configs/recipes/real_cpu/own_data.yaml"))
    (tmp_path / "my.yaml").write_text(my_yaml, encoding="utf-8")
    quickstart = [c for c in _commands() if c.startswith(("purecover config my.yaml", "purecover pipeline my.yaml --"))]
    assert len(quickstart) == 2
    script = "set -e\n. .venv/bin/activate\n" + "\n".join(quickstart) + "\n"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                        "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert "command not found" not in done.stderr
    assert "run_dir: runs/mine" in done.stdout and "plan:" in done.stdout
    assert "data.path" in done.stdout and "missing" in done.stdout  # the README's data files are the user's to add
