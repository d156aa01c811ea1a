"""File locks and process checks (flock(2), /proc/locks: proc(5))."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path):
    """An exclusive flock on `path` (created with its folder) for the block's duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def process_alive(pid: int) -> bool:
    """Is a process of this id running on this machine?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_holder(cell: str | Path) -> int | None:
    """The process holding `<cell>/.lock`, or None. Read from /proc/locks (proc(5)):
    probing with flock itself could make a cell starting that instant see itself busy."""
    try:
        st = (Path(cell) / ".lock").stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():   # "1: FLOCK  ADVISORY  WRITE <pid> <maj:min:inode> 0 EOF"
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == dev:
            return int(f[4])
    return None
