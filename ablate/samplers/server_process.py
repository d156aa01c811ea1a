"""The lifetime of the processes sampler=vllm_server starts (ablate/samplers/vllm_server.py):
a process group killed as a whole, and processes that die with the cell's process."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def signal_group(pgid: int, sig) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that are not zombies (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out


# `python -c DIE_WITH_PARENT SIG PARENT_PID CMD...`: CMD with PR_SET_PDEATHSIG armed (it
# survives execve), so that it gets SIG when the process that started it dies (Linux).
# Armed here rather than in a preexec_fn: a preexec_fn makes Popen fork the whole cell
# process, which fails with ENOMEM when the cell holds many GiB; without one it can vfork.
DIE_WITH_PARENT = """
import ctypes, os, sys
sig, parent = int(sys.argv[1]), int(sys.argv[2])
try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)   # PR_SET_PDEATHSIG
except Exception:   # not Linux: close()/atexit only
    pass
if os.getppid() != parent:   # the parent died before the signal was armed
    os._exit(1)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def with_parent(cmd: list[str], sig: int = signal.SIGKILL) -> list[str]:
    """`cmd`, run so that it gets `sig` when this process dies (DIE_WITH_PARENT)."""
    return [sys.executable, "-c", DIE_WITH_PARENT, str(int(sig)), str(os.getpid()), *cmd]


# Beside each started server a watchdog: when the cell's process dies (even by SIGKILL)
# it gets SIGTERM (PR_SET_PDEATHSIG) and kills the server's whole process group, engine
# processes included; it exits by itself once the group is gone.
WATCHDOG = """
import os, signal, sys, time
pgid = int(sys.argv[1])
def kill(*_):
    try:
        os.killpg(pgid, signal.SIGKILL)
    finally:
        os._exit(0)
signal.signal(signal.SIGTERM, kill)
while True:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        os._exit(0)
    time.sleep(2)
"""
