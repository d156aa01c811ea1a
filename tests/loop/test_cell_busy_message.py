"""The message of a cell another process runs (issue 64, minor): it names that process's
command, and calls it a grid's worker only when it is one."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ablate.loop.outputs import CellBusy, CellDir, holder_command

HOLD = ("import fcntl, sys, time; fh = open(sys.argv[1], 'a+'); "
        "fcntl.flock(fh, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")


def _holder(cell, *extra, env=None):
    cell.mkdir(exist_ok=True)
    script = cell.parent / "hold.py"
    script.write_text(HOLD)
    proc = subprocess.Popen([sys.executable, script.name, f"{cell.name}/.lock", *extra],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=cell.parent)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _busy(cell) -> str:
    with pytest.raises(CellBusy) as exc:
        CellDir(cell).lock()
    return str(exc.value)


def test_a_plain_second_command_is_not_called_a_grid_worker(tmp_path):
    # a plain command's environment: no grid's ABLATE_GRID_PID (an earlier in-process
    # `python -m ablate` test of this session may have set it in os.environ)
    env = {k: v for k, v in os.environ.items() if k != "ABLATE_GRID_PID"}
    proc = _holder(tmp_path / "cell", "trainer.max_steps=3", env=env)
    try:
        msg = _busy(tmp_path / "cell")
        assert f"being run by process {proc.pid} (" in msg
        assert "trainer.max_steps=3" in msg and "grid" not in msg
        assert msg.endswith(": wait for it, or kill it and re-run to resume")
    finally:
        proc.kill()
        proc.wait()


def test_a_grid_worker_is_named_one(tmp_path):
    env = {**os.environ, "ABLATE_GRID_PID": str(os.getpid())}
    proc = _holder(tmp_path / "cell", env=env)
    try:
        assert f"process {proc.pid} (a worker of a grid: " in _busy(tmp_path / "cell")
    finally:
        proc.kill()
        proc.wait()


def test_the_command_line_of_a_multirun():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m",
                             "seed=0,1"])
    try:
        time.sleep(0.2)
        assert holder_command(proc.pid).startswith(" (a worker of a grid: python")
        assert holder_command(os.getpid()).startswith(" (") and "grid" not in \
            holder_command(os.getpid())
        assert holder_command(2 ** 22 + 12345) == ""
    finally:
        proc.kill()
        proc.wait()
