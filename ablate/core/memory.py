"""Freed memory kept for reuse (`run.malloc_reuse`, glibc only).

A cell allocates and frees the same large tensors over and over: the HF sampler's
key/value buffers every turn (tens of MB each), the learner's activations every update.
glibc serves allocations above M_MMAP_THRESHOLD (at most 32 MiB, adjusted dynamically)
with a fresh mmap and returns them on free, so each reuse page-faults the whole block in
again: ~300k minor faults and ~1 s of system time per evaluation of the default cell
(docs/cpu.md, issue 31). mallopt(M_MMAP_MAX, 0) serves every allocation from the heap
and M_TRIM_THRESHOLD keeps up to 1 GiB of freed heap mapped (mallopt(3)); the process's
peak memory is unchanged, it is just not handed back between turns. Most, not all, reuses
are served this way: where the heap cannot grow in place glibc still maps a block (a
freed 64 MiB block faulted again in 0-1 of 7 reuses, against 7 of 7 with the defaults;
tests/core/test_threads.py).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("ablate.core.memory")

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4    # glibc malloc.h
KEEP_BYTES = 1 << 30


DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD = 65536, 128 * 1024   # mallopt(3)


def reuse_freed_memory(keep: bool = True) -> bool:
    """Ask glibc to keep freed memory for reuse (keep=False: glibc's default values
    again, for a benchmark's baseline); False where libc is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mmap_max, trim = (0, KEEP_BYTES) if keep else (DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD)
    ok = mallopt(M_MMAP_MAX, mmap_max) == 1 and mallopt(M_TRIM_THRESHOLD, trim) == 1
    if not ok:
        log.warning("mallopt refused: freed memory is returned to the system as before")
    return ok
