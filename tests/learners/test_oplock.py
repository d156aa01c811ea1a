"""DeepSpeed's CPU comm op lock (issue 51, ablate/learners/oplock.py): a lock left by a
dead process is broken with one warning line, a live holder gets one waiting line and a
one-line error (exit 2) after the bound, a half-built folder is rebuilt, never loaded.

Every test works on a copy of the built op in a temporary TORCH_EXTENSIONS_DIR: the
shared cache (~/.cache/torch_extensions) is only read."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.core.errors import ConfigError
from ablate.learners import oplock
from ablate.learners.oplock import OpBaton, OpLockTimeout

NAME = "deepspeed_shm_comm"
# the learner's path to the op: the hook make_learner runs, then DeepSpeed's own loader
START = ("from ablate.learners.oplock import load_comm_op; load_comm_op(); import deepspeed; "
         "from ablate.learners.deepspeed_learner import ensure_dist_env; ensure_dist_env(); "
         "deepspeed.init_distributed(); print('started')")


def _real_folder() -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        from torch.utils.cpp_extension import get_default_build_root
        tag = f"py{sys.version_info.major}{sys.version_info.minor}_cpu"
        root = os.path.join(get_default_build_root(), tag)
    return Path(root) / NAME


@pytest.fixture
def ext_dir(tmp_path) -> Path:
    """A TORCH_EXTENSIONS_DIR holding a copy of the built op (stamped as finished)."""
    real = _real_folder()
    if not oplock.library(real).exists():
        pytest.skip(f"no built {NAME} op in {real}: run python -m ablate.learners.prebuild")
    folder = tmp_path / NAME
    shutil.copytree(real, folder, ignore=shutil.ignore_patterns("lock*", "ablate_built*"))
    oplock.write_stamp(folder)
    return tmp_path


def _plant(folder: Path, pid: int) -> Path:
    lock = folder / "lock"
    lock.write_text(f"{pid} {socket.gethostname()} {time.time():.0f}\n")
    return lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _run(ext_dir: Path, args: list[str], **env) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext_dir), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=240)


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ablate:")]


def _baton(lock: Path, bound: float) -> OpBaton:
    return OpBaton(lock, time.monotonic() + bound, {"built": False})


def test_dead_holder_lock_is_broken_with_one_line(tmp_path, capsys):
    lock = _plant(tmp_path, _dead_pid())
    with pytest.raises(oplock._Retry):   # broken: this process builds (ninja checks) itself
        _baton(lock, 5).wait()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "stale lock" in lines[0] and str(lock) in lines[0]
    assert not lock.exists()


def test_unrecorded_lock_is_broken_only_when_old(tmp_path, capsys, monkeypatch):
    lock = tmp_path / "lock"
    lock.write_text("")   # plain torch's baton records no holder
    assert oplock.holder(lock) == ("an unrecorded process", None)
    monkeypatch.setenv(oplock.STALE_ENV, "60")
    os.utime(lock, (time.time() - 120, time.time() - 120))
    who, why = oplock.holder(lock)
    assert why and "ABLATE_OPLOCK_STALE_S=60" in why


def test_live_holder_one_waiting_line_then_one_error(tmp_path, capsys):
    lock = _plant(tmp_path, os.getpid())
    t = time.monotonic()
    with pytest.raises(OpLockTimeout) as err:
        _baton(lock, 1.0).wait()
    assert 1.0 <= time.monotonic() - t < 5
    assert isinstance(err.value, ConfigError)   # the CLI's one line and exit status 2
    msg = str(err.value)
    assert "\n" not in msg and f"process {os.getpid()}" in msg and f"remove {lock}" in msg
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "waiting for" in lines[0] and str(lock) in lines[0]
    assert lock.exists()   # a live holder's lock is never broken


def test_released_over_an_unfinished_build_builds_here(ext_dir):
    folder = ext_dir / NAME
    assert oplock.complete(folder)
    _baton(folder / "lock", 5).wait()   # released over a finished build: load it
    (folder / oplock.STAMP).unlink()
    with pytest.raises(oplock._Retry):
        _baton(folder / "lock", 5).wait()


def test_half_built_folder_is_cleared_before_the_build(ext_dir, capsys):
    folder = ext_dir / NAME
    lib = oplock.library(folder)
    baton = _baton(folder / "lock", 5)
    assert baton.try_acquire()          # finished build: kept
    baton.release()
    assert lib.exists() and not capsys.readouterr().err
    with open(lib, "r+b") as fh:        # a link killed half-way
        fh.truncate(lib.stat().st_size // 2)
    assert not oplock.complete(folder)
    baton = _baton(folder / "lock", 5)
    assert baton.try_acquire()
    assert not lib.exists() and not list(folder.glob("*.o"))   # ninja rebuilds them
    assert (folder / "lock").read_text().split()[0] == str(os.getpid())
    baton.release()
    assert not (folder / "lock").exists()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "no record of a finished build" in lines[0]


def test_killed_holder_then_learner_start_proceeds(ext_dir):
    """A process SIGKILLed while it holds the baton; the next start goes on at once."""
    folder = ext_dir / NAME
    hold = (f"import time; from ablate.learners.oplock import OpBaton; "
            f"OpBaton({str(folder / 'lock')!r}, 0, {{'built': False}}).try_acquire(); "
            f"print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (folder / "lock").read_text().split()[0] == str(proc.pid)
    lib_mtime = oplock.library(folder).stat().st_mtime_ns
    t = time.monotonic()
    run = _run(ext_dir, ["-c", START])
    assert run.returncode == 0, run.stderr[-2000:]
    assert time.monotonic() - t < 120   # seconds on a quiet host; a loaded 2-core one is slower
    assert "started" in run.stdout
    lines = _ours(run.stderr)
    assert len(lines) == 1 and "stale lock" in lines[0] and f"process {proc.pid}" in lines[0]
    assert not (folder / "lock").exists()
    assert oplock.library(folder).stat().st_mtime_ns == lib_mtime   # cached: not rebuilt
    assert oplock.complete(folder)


def test_live_holder_prebuild_exits_2_with_one_line(ext_dir):
    lock = _plant(ext_dir / NAME, os.getpid())
    run = _run(ext_dir, ["-m", "ablate.learners.prebuild"], ABLATE_OPLOCK_WAIT_S="1")
    assert run.returncode == 2, run.stderr[-2000:]
    waiting, error = _ours(run.stderr)
    assert "waiting for" in waiting and f"process {os.getpid()}" in waiting
    assert error.startswith("ablate: error:") and f"remove {lock}" in error
    assert lock.exists()


@pytest.mark.slow
def test_half_built_op_is_rebuilt_and_loads(ext_dir):
    """A real rebuild (40-60 s of gcc on a quiet 2-core host)."""
    lib = oplock.library(ext_dir / NAME)
    with open(lib, "r+b") as fh:
        fh.truncate(lib.stat().st_size // 2)
    run = _run(ext_dir, ["-c", START])
    assert run.returncode == 0, run.stderr[-2000:]
    assert "started" in run.stdout and oplock.complete(ext_dir / NAME)
