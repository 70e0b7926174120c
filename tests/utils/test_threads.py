"""Threads chosen for the machine: the user's OMP_NUM_THREADS wins, then the recipe's number, else the usable
cores minus the processes running now (read from the real /proc/loadavg beside real busy processes), applied to
torch at each stage and logged."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from purecover.utils import threads
from purecover.utils.threads import ThreadChoice, apply_threads, choose_threads, other_runnable, usable_cores


def test_the_users_omp_num_threads_wins_then_the_recipe() -> None:
    assert choose_threads(4, {"OMP_NUM_THREADS": "3"}) == ThreadChoice(3, "OMP_NUM_THREADS")
    assert choose_threads("auto", {"OMP_NUM_THREADS": "1"}) == ThreadChoice(1, "OMP_NUM_THREADS")
    assert choose_threads(4, {}) == ThreadChoice(4, "recipe")
    assert choose_threads(4, {}).describe() == "torch threads: 4 (the recipe's threads)"


def test_auto_is_the_usable_cores_minus_the_other_running_processes(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    loadavg = tmp_path / "loadavg"
    cpu_max = tmp_path / "cpu.max"
    monkeypatch.setattr(threads, "LOADAVG", loadavg)
    monkeypatch.setattr(threads, "CGROUP_CPU_MAX", cpu_max)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    cpu_max.write_text("max 100000\n")
    loadavg.write_text("0.50 0.40 0.30 1/250 12345\n")  # only the reader runs
    assert (usable_cores(), other_runnable(interval=0)) == (4, 0)
    assert choose_threads("auto", {}) == ThreadChoice(4, "auto", cores=4, busy=0)
    loadavg.write_text("2.10 1.40 0.30 3/250 12345\n")  # two others
    assert choose_threads("auto", {}) == ThreadChoice(2, "auto", cores=4, busy=2)
    cpu_max.write_text("150000 100000\n")  # a quota of 1.5 cores: 2 usable
    assert usable_cores() == 2
    assert choose_threads("auto", {}).threads == 1  # never fewer than one
    assert choose_threads("auto", {}).describe() == ("torch threads: 1 (2 usable cores, 2 other running processes; "
                                                     "set threads in the recipe or OMP_NUM_THREADS to choose)")
    loadavg.unlink()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.4, 1.0, 0.5))  # no /proc: the load average
    assert other_runnable(interval=0) == 1


@pytest.mark.skipif(not Path("/proc/loadavg").is_file(), reason="needs Linux's /proc/loadavg")
def test_busy_processes_are_counted_on_the_real_machine() -> None:
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass\n"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(1.0)  # both started and spinning
        assert other_runnable() >= 2
        assert choose_threads("auto", {}).threads <= max(1, usable_cores() - 2)
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_apply_sets_torch_and_logs_and_never_mistakes_its_own_setting_for_the_users(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_ours", {})
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger="purecover.utils.threads"):
            assert apply_threads(1) == ThreadChoice(1, "recipe")
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
        assert "torch threads: 1 (the recipe's threads)" in caplog.text
        # the value it set is not a user's setting: the next stage chooses again
        assert choose_threads(2).source == "recipe"
        monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a user's
        assert apply_threads(2) == ThreadChoice(3, "OMP_NUM_THREADS")
        assert torch.get_num_threads() == 1  # left to torch and the user
    finally:
        torch.set_num_threads(before)


def test_every_stage_the_contract_runs_makes_the_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from purecover import contract
    from purecover.config import load_recipe

    seen: list[object] = []
    monkeypatch.setattr(contract, "apply_threads", lambda setting: seen.append(setting))
    recipe = load_recipe(None, [f"run_dir={tmp_path / 'run'}", "data.path=demo", "threads=2"])
    contract.run_stage("data", recipe, show_progress=False)
    assert seen == [2]
    contract.run_stage("data", recipe, show_progress=False)  # complete: skipped, nothing to choose for
    assert seen == [2]


def test_a_started_process_chooses_its_own_threads_unless_the_user_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OMP_NUM_THREADS this process set for itself is left out of the environment for the processes it starts
    (each chooses for the load at its own start: a real child reports `auto`); a user's value is passed on."""
    import torch

    from purecover.utils.threads import env_choosing_own_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_ours", {})
    before = torch.get_num_threads()
    child = [sys.executable, "-c", "from purecover.utils.threads import choose_threads; print(choose_threads().source)"]
    try:
        apply_threads(1)
        assert os.environ["OMP_NUM_THREADS"] == "1"
        env = env_choosing_own_threads()
        assert "OMP_NUM_THREADS" not in env and env["PATH"] == os.environ["PATH"]
        assert subprocess.run(child, env=env, capture_output=True, text=True, check=True).stdout.strip() == "auto"
        assert subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip() == "OMP_NUM_THREADS"
        monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a user's
        assert env_choosing_own_threads()["OMP_NUM_THREADS"] == "3"
        assert env_choosing_own_threads({"OMP_NUM_THREADS": "1", "X": "y"}) == {"X": "y"}  # a given env: ours dropped
    finally:
        torch.set_num_threads(before)
