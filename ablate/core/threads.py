"""How many torch CPU threads a cell uses (`run.num_threads`).

    cell_threads(requested, *, cpus, local_ranks, async_level, in_process_sampler) -> int
    update_threads(requested, *, process, cpus, local_ranks, engine_rule, host_optimizer)

`auto` gives a process every core it does not share: the cores this process may run on
(os.sched_getaffinity) divided among the ranks of the cell on this machine, less one
for the asynchronous rollout producer (its own process, one thread); 1 where the sampler
is an engine of its own (vLLM), which takes the cores while it generates. A parallel grid
divides them among its simultaneous cells before the cell starts (ablate/apps/cli.py).
Measured on the 2-core host (docs/cpu.md, issue 31): the synchronous default cell 6.8
units on two threads against 8.3 on one, with evaluation rows identical; two threads
on a core another process also uses are several times slower than one, so a shared
machine should set `run.num_threads=1`.

The learner's update is exempt from the one-thread rule (issue 61 fault 10): the engine
does not generate while the learner updates, and under optimizer offload the step itself
runs on the host (DeepSpeedCPUAdam's `#pragma omp parallel for`,
deepspeed/ops/csrc/adam/cpu_adam_impl.cpp, on the OpenMP threads torch.set_num_threads
sets), so `update_threads` gives update() the cell's share of the cores there.
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


def update_threads(requested: int, *, process: int, cpus: int, local_ranks: int = 1,
                   engine_rule: bool = False, host_optimizer: bool = False) -> int:
    """learner.update_threads resolved (0: update() runs on the process's `process`
    threads). A value > 0 stays. Otherwise update() gets the cell's share of the cores
    (cpus / local ranks) where the one-thread rule of an engine sampler set the process
    to 1 (`engine_rule`: run.num_threads=auto beside vLLM) or where the optimizer steps on
    the host (`host_optimizer`: ZeRO offload, whatever run.num_threads says); 0 where that
    share is no more than the process already has."""
    if int(requested) > 0:
        return int(requested)
    share = max(1, cpus // max(1, local_ranks))
    if (engine_rule or host_optimizer) and share > process:
        return share
    return 0
