"""Devices of the parallel cells of a grid on a multi-GPU machine: with
`hydra/launcher=joblib` (or `submitit_local`) and `run.devices_per_cell=K`, the cell of
job index i sees its own K devices through CUDA_VISIBLE_DEVICES, set before anything
touches CUDA (docs/distributed.md, "Parallel grids").

Jobs are handed to the workers in index order, so the jobs running together have
consecutive indices: job i takes slot i mod S of the S = len(devices) // K disjoint
slots, and any S consecutive jobs use disjoint devices."""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("ablate.apps.devices")


def devices_for_job(job_index: int, devices: list[str], per_cell: int) -> list[str]:
    """The devices of job `job_index` (0-based) given the machine's `devices` (ids as
    CUDA_VISIBLE_DEVICES names them) and `per_cell` devices per cell."""
    if per_cell < 1:
        raise ValueError(f"run.devices_per_cell={per_cell} must be >= 1 to assign devices")
    if per_cell > len(devices):
        raise ValueError(f"run.devices_per_cell={per_cell} but this machine shows "
                         f"{len(devices)} device(s) ({','.join(devices) or 'none'})")
    slots = len(devices) // per_cell
    slot = job_index % slots
    return devices[slot * per_cell:(slot + 1) * per_cell]


def visible_devices() -> list[str]:
    """The devices this process may use: CUDA_VISIBLE_DEVICES when set, else every GPU."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip()]
    import torch
    return [str(i) for i in range(torch.cuda.device_count())]


def assign(job_index: int, per_cell: int) -> list[str] | None:
    """Set CUDA_VISIBLE_DEVICES for this grid job (a worker process of the launcher);
    None when not asked for (per_cell 0). The grid's own value is remembered, so a worker
    that runs several jobs draws each job's devices from the whole machine's list."""
    if per_cell <= 0:
        return None
    if _cuda_initialized():
        # a reused worker (joblib's loky): CUDA read CUDA_VISIBLE_DEVICES when its first
        # job started and ignores any change now, so the worker keeps that job's devices
        # (its first job's slot; the S workers' first jobs are S consecutive indices)
        kept = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        log.info("grid job %d: this worker initialised CUDA already; it keeps "
                 "CUDA_VISIBLE_DEVICES=%s", job_index, ",".join(kept))
        return kept
    if "ABLATE_GRID_DEVICES" not in os.environ:
        os.environ["ABLATE_GRID_DEVICES"] = ",".join(visible_devices())
    devices = [d for d in os.environ["ABLATE_GRID_DEVICES"].split(",") if d]
    chosen = devices_for_job(job_index, devices, per_cell)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    log.info("grid job %d: CUDA_VISIBLE_DEVICES=%s", job_index, ",".join(chosen))
    return chosen


def _cuda_initialized() -> bool:
    """Whether this process has initialised CUDA (without importing torch for it)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def export_submitit_ranks() -> bool:
    """A job of `hydra/launcher=submitit_slurm` with `hydra.launcher.tasks_per_node` x
    `hydra.launcher.nodes` > 1 tasks: every task runs the cell as one rank. submitit's
    helper exports RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR (the job's first node) and
    MASTER_PORT (from the job id) for torch.distributed's env:// init; each rank then takes
    GPU LOCAL_RANK of its node. A launcher's own variables (torchrun) are kept."""
    if "WORLD_SIZE" in os.environ or not os.environ.get("SUBMITIT_EXECUTOR"):
        return False
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment
    if JobEnvironment().num_tasks <= 1:
        return False
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    return True
