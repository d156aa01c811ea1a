"""DeepSpeed's CPU comm op, loaded under a lock that a dead process cannot hold forever.

On CPU every DeepSpeed start loads the JIT-built `deepspeed_shm_comm` op through torch's
`cpp_extension.load`, which takes a file baton, `<build dir>/lock`, on every load (a
cached build too): created with O_EXCL, removed when done, and waited on by every other
process with no bound and no message. A process killed while it held the baton left the
file, and every later cell waited forever (issue 51). `load_comm_op` loads the op the way
DeepSpeed's own `build_shm_op` does, with torch's FileBaton replaced by `OpBaton`;
DeepSpeed then finds it loaded (OpBuilder._loaded_ops) and takes no baton itself.

- The holder writes `<pid> <host> <start time>` into the lock.
- A waiter breaks a lock whose holder is gone (this host: the pid not running, or
  running a process started after the lock was written, a reused pid) or, when no
  holder can be checked (an empty lock from plain torch, stray bytes, another host), one
  older than ABLATE_OPLOCK_STALE_S (300 s, longer than any build), with one warning line
  naming the file, and then builds itself: ninja redoes what the dead holder left unfinished.
- A live holder: one line (what, which lock, which process) once the wait passes 2 s, then
  OpLockTimeout after ABLATE_OPLOCK_WAIT_S (600 s), one line naming the lock to remove;
  a directory in the lock's place (no process takes a lock that way) at once.
- A build is complete when the stamp `ablate_built` (the library's size and mtime, written
  under the lock once ninja succeeded) matches the library. A library without a matching
  stamp (a build killed mid-way) is removed with its objects before building, so it is
  rebuilt, never loaded; a waiter released over an incomplete folder builds it itself.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path

from ablate.core.errors import ConfigError
from ablate.core.locks import file_lock, process_alive

WAIT_ENV = "ABLATE_OPLOCK_WAIT_S"
STALE_ENV = "ABLATE_OPLOCK_STALE_S"
STAMP = "ablate_built"
POLL_S = 0.2
QUIET_S = 2.0   # a cached load takes < 1 s: shorter waits (two ranks starting) say nothing


class OpLockTimeout(ConfigError):
    """A live process held the op's lock past the bound. A ConfigError so the CLI ends the
    cell with this one line and exit status 2 (ablate.apps.cli.CELL_ERRORS)."""


class _Retry(Exception):
    """The lock was broken, or released over an unfinished build: build it here."""


def _seconds(env: str, default: float) -> float:
    return float(os.environ.get(env) or default)


def load_comm_op():
    """DeepSpeed's CPU shared-memory comm op (built first if needed), or None where the
    accelerator has none; the same gate as deepspeed.comm.torch.build_shm_op."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    return load_op(builder)


def load_op(builder):
    """`builder.load()` under OpBaton, retried after a broken lock within one deadline."""
    from torch.utils.cpp_extension import JIT_EXTENSION_VERSIONER
    deadline = time.monotonic() + _seconds(WAIT_ENV, 600)
    while True:
        with _patched(deadline):
            try:
                return builder.load()
            except _Retry:   # torch's versioner would skip the build on the next call
                JIT_EXTENSION_VERSIONER.entries.pop(builder.name, None)


@contextlib.contextmanager
def _patched(deadline: float):
    """torch's _jit_compile with OpBaton, and ninja's success recorded for the stamp."""
    from torch.utils import cpp_extension as ce
    state = {"built": False}
    baton, build = ce.FileBaton, ce._write_ninja_file_and_build_library

    def built(*args, **kw):
        build(*args, **kw)
        state["built"] = True

    ce.FileBaton = lambda path, *a, **kw: OpBaton(path, deadline, state)
    ce._write_ninja_file_and_build_library = built
    try:
        yield
    finally:
        ce.FileBaton, ce._write_ninja_file_and_build_library = baton, build


class OpBaton:
    """torch's FileBaton (try_acquire / wait / release) with a holder, a stale rule and a
    bounded wait."""

    def __init__(self, path, deadline: float, state: dict):
        self.path, self.deadline, self.state, self.fd = Path(path), deadline, state, None

    def try_acquire(self) -> bool:
        try:
            self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(self.fd, f"{os.getpid()} {socket.gethostname()} {time.time():.0f}\n".encode())
            check_folder(self.path.parent)
        except BaseException:
            self.release()
            raise
        return True

    def wait(self) -> None:
        start, said = time.monotonic(), False
        while self.path.exists():
            who, stale = holder(self.path)
            if who == "nobody":   # released meanwhile
                continue
            if stale:
                break_lock(self.path, who, stale)
                raise _Retry
            waited = time.monotonic() - start
            if not said and waited >= min(QUIET_S, (self.deadline - start) / 2):
                said = _say(f"ablate: waiting for {who} to finish building or loading "
                            f"DeepSpeed's {self.path.parent.name} op (lock {self.path})")
            if time.monotonic() > self.deadline:
                raise OpLockTimeout(f"DeepSpeed's {self.path.parent.name} op is still locked "
                                    f"by {who}: if that process is not building it, remove "
                                    f"{self.path} and re-run")
            time.sleep(POLL_S)
        if not complete(self.path.parent):
            raise _Retry

    def release(self) -> None:
        try:
            if self.state["built"]:
                write_stamp(self.path.parent)
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            self.path.unlink(missing_ok=True)


def _say(line: str) -> bool:
    print(line, file=sys.stderr, flush=True)
    return True


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed child its parent has not reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return process_alive(pid)
    return state not in ("Z", "X")


def holder(lock: Path) -> tuple[str, str | None]:
    """Who holds `lock`, and why it is stale (None: not stale, or already released). A
    lock that is not text (stray bytes) has no holder to check: the age rule breaks it;
    a directory in its place is no lock anyone took: OpLockTimeout says to remove it."""
    try:
        raw, age = lock.read_bytes(), time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return "nobody", None
    except IsADirectoryError:
        raise OpLockTimeout(f"DeepSpeed's {lock.parent.name} op lock {lock} is a directory, "
                            f"not a lock file: remove it (rm -r {lock}) and re-run") from None
    fields = raw.decode("utf-8", errors="replace").split()
    if len(fields) >= 2 and fields[0].isdigit() and fields[1] == socket.gethostname():
        pid = int(fields[0])
        return f"process {pid}", _gone(pid, fields[2] if len(fields) > 2 else "")
    readable = len(fields) >= 2 and all(f.isprintable() and "\ufffd" not in f
                                        for f in fields[:2])
    who = f"process {fields[0]} on {fields[1]}" if readable else "an unrecorded process"
    limit = _seconds(STALE_ENV, 300)
    return who, f"{age:.0f} s old (> {STALE_ENV}={limit:.0f})" if age > limit else None


def _gone(pid: int, recorded: str) -> str | None:
    """Why process `pid`, recorded as the holder at time `recorded`, no longer holds the
    lock (None: it does): not running, or its pid now names a process started after the
    lock was written (a reused pid; the holder writes the lock after it starts)."""
    if not _running(pid):
        return "which is no longer running"
    started = _start_time(pid)
    try:
        written = float(recorded)
    except ValueError:
        return None
    if started is not None and started > written + 2:   # the record is rounded to 1 s
        return (f"whose pid now names a process started {started - written:.0f} s after "
                "the lock was written (the holder is gone, its pid reused)")
    return None


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch): /proc/<pid>/stat's
    starttime (clock ticks after boot) plus /proc/stat's btime (proc(5)); None without
    /proc."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def break_lock(lock: Path, who: str, why: str) -> None:
    """Remove `lock` if it is still the same stale one: breakers take turns (flock), so
    none removes a lock another has just taken."""
    with file_lock(lock.with_name("lock.break")):
        again, stale = holder(lock)
        if stale and again == who:
            lock.unlink(missing_ok=True)
            _say(f"ablate: warning: removed the stale lock {lock} of {who}, {why}; "
                 "the op is checked and rebuilt if needed")


def library(folder: Path) -> Path:
    from torch.utils.cpp_extension import LIB_EXT
    return folder / f"{folder.name}{LIB_EXT}"


def _signature(lib: Path) -> str:
    st = lib.stat()
    return f"{st.st_size} {st.st_mtime_ns}"


def complete(folder: Path) -> bool:
    """The library is there and the stamp of a finished build matches it."""
    try:
        return (folder / STAMP).read_text().strip() == _signature(library(folder))
    except OSError:
        return False


def write_stamp(folder: Path) -> None:
    tmp = folder / f"{STAMP}.{os.getpid()}"
    tmp.write_text(_signature(library(folder)) + "\n")
    os.replace(tmp, folder / STAMP)


def check_folder(folder: Path) -> None:
    """Under the lock: a library without a matching stamp is a half-built one; it and its
    objects go, so ninja rebuilds them (a folder built before the stamp existed too)."""
    lib = library(folder)
    if not lib.exists() or complete(folder):
        return
    _say(f"ablate: warning: {folder} has no record of a finished build (killed mid-build?): "
         "rebuilding the op")
    for path in [lib, *folder.glob("*.o")]:
        path.unlink(missing_ok=True)
