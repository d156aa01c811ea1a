"""DeepSpeed's op lock when the lock itself is odd (issue 64 item 9,
ablate/learners/oplock.py): stray bytes, a directory in its place, a pid reused by a
later process. Each is handled on the path meant to survive a bad lock: broken with one
warning line, or one line (a ConfigError, exit status 2), never a traceback or a wait of
ABLATE_OPLOCK_WAIT_S for nobody."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from ablate.core.errors import ConfigError
from ablate.learners import oplock
from ablate.learners.oplock import OpBaton, OpLockTimeout


def _baton(lock, bound: float) -> OpBaton:
    return OpBaton(lock, time.monotonic() + bound, {"built": False})


def _age(lock, seconds: float) -> None:
    os.utime(lock, (time.time() - seconds, time.time() - seconds))


def test_stray_bytes_are_an_unrecorded_holder(tmp_path, monkeypatch):
    lock = tmp_path / "lock"
    lock.write_bytes(b"\xff\xfe\x00garbage \x9c\n")
    assert oplock.holder(lock) == ("an unrecorded process", None)   # young: waited on
    monkeypatch.setenv(oplock.STALE_ENV, "60")
    _age(lock, 120)
    who, why = oplock.holder(lock)
    assert who == "an unrecorded process" and "120 s old" in why


def test_an_old_lock_of_stray_bytes_is_broken_with_one_line(tmp_path, capsys, monkeypatch):
    lock = tmp_path / "lock"
    lock.write_bytes(b"\x80\x81\x82")
    monkeypatch.setenv(oplock.STALE_ENV, "60")
    _age(lock, 120)
    with pytest.raises(oplock._Retry):
        _baton(lock, 5).wait()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "removed the stale lock" in lines[0] and str(lock) in lines[0]
    assert not lock.exists()


def test_a_directory_as_the_lock_is_one_line_at_once(tmp_path, capsys):
    lock = tmp_path / "lock"
    lock.mkdir()
    baton = _baton(lock, 30)
    assert baton.try_acquire() is False
    t = time.monotonic()
    with pytest.raises(OpLockTimeout) as err:
        baton.wait()
    assert time.monotonic() - t < 2                 # not the 30 s bound
    assert isinstance(err.value, ConfigError)
    msg = str(err.value)
    assert "\n" not in msg and msg.endswith(f"is a directory, not a lock file: remove it "
                                            f"(rm -r {lock}) and re-run")
    assert lock.is_dir()


def test_a_reused_pid_is_not_waited_on(tmp_path, capsys):
    """The lock's pid runs, but a process started after the lock was written: the
    holder died and its pid was given to another process."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        lock = tmp_path / "lock"
        lock.write_text(f"{proc.pid} {socket.gethostname()} {time.time() - 3600:.0f}\n")
        who, why = oplock.holder(lock)
        assert who == f"process {proc.pid}" and "pid reused" in why
        t = time.monotonic()
        with pytest.raises(oplock._Retry):
            _baton(lock, 30).wait()
        assert time.monotonic() - t < 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and "removed the stale lock" in lines[0]
        assert not lock.exists()
    finally:
        proc.kill()
        proc.wait()


def test_the_real_holder_is_still_waited_on(tmp_path):
    """A lock written after its holder started: the holder's start time is earlier."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        lock = tmp_path / "lock"
        lock.write_text(f"{proc.pid} {socket.gethostname()} {time.time():.0f}\n")
        assert oplock.holder(lock) == (f"process {proc.pid}", None)
        started = oplock._start_time(proc.pid)
        assert started is not None and abs(started - time.time()) < 30
    finally:
        proc.kill()
        proc.wait()
