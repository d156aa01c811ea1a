"""How many torch CPU threads a cell uses (`run.num_threads`).

    cell_threads(requested, *, cpus, local_ranks, async_level, in_process_sampler) -> int

`auto` gives a process every core it does not share: the cores this process may run on
(os.sched_getaffinity) divided among the ranks of the cell on this machine, less one
for the asynchronous rollout producer (its own process, one thread); 1 where the sampler
is an engine of its own (vLLM), which takes the cores while it generates. A parallel grid
divides them among its simultaneous cells before the cell starts (ablate/apps/cli.py).
Measured on the 2-core host (docs/cpu.md, issue 31): the synchronous default cell 6.8
units on two threads against 8.3 on one, with evaluation rows identical; two threads
on a core another process also uses are several times slower than one, so a shared
machine should set `run.num_threads=1`.
"""
from __future__ import annotations

import os

AUTO = "auto"


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                 # not Linux
        return os.cpu_count() or 1


def parse_threads(value) -> int | str:
    """`auto` or an int >= 0 (0: torch's default); ValueError otherwise."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    n = int(str(value).strip())
    if n < 0:
        raise ValueError(n)
    return n


def cell_threads(requested, *, cpus: int, local_ranks: int = 1, async_level: int = 0,
                 in_process_sampler: bool = True) -> int:
    """The thread count for `requested` (`auto` or an int; 0 keeps torch's default)."""
    value = parse_threads(requested)
    if value != AUTO:
        return value
    if not in_process_sampler:
        return 1
    share = cpus // max(1, local_ranks) - (1 if async_level > 0 else 0)
    return max(1, share)


def grid_threads(requested, *, cpus: int, parallel_cells: int) -> int | str:
    """A grid cell's `run.num_threads` when `parallel_cells` run at once on this machine:
    `auto` becomes the cell's share of the cores; a given value stays."""
    value = parse_threads(requested)
    if value != AUTO or parallel_cells <= 1:
        return value
    return max(1, cpus // parallel_cells)
