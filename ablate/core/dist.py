"""Ranks of a cell started by a launcher (torchrun / `python -m torch.distributed.run`,
the `deepspeed` launcher, SLURM through torchrun): who am I, how many are we, and the few
collectives the cell loop needs (python objects, barrier). Without a launcher (no
WORLD_SIZE, or WORLD_SIZE=1) every function is the single-process answer and nothing
initialises a process group here.

The process group is initialised once, by `init`, before DeepSpeed's own
`deepspeed.init_distributed` (which reuses an initialised group), so that the collective
timeout is ours: a rank that dies makes the others' next collective fail within
`timeout_s` (torch.distributed.init_process_group, `timeout=`), never a hang. gloo on CPU,
nccl when CUDA is available (docs/distributed.md)."""
from __future__ import annotations

import datetime
import os
from typing import Any

import torch


def env_world_size() -> int:
    """The launcher's WORLD_SIZE (1 without a launcher)."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def _dist():
    d = torch.distributed
    return d if d.is_available() and d.is_initialized() else None


def _group():
    """The initialised group, or None with one rank; a launcher's ranks without `init`
    would each go on alone with their own share: an error instead."""
    d = _dist()
    if d is None and env_world_size() > 1:
        raise RuntimeError(f"WORLD_SIZE={env_world_size()} but this process has not joined "
                           "the process group: call ablate.core.dist.init first")
    return d if d is not None and d.get_world_size() > 1 else None


def world_size() -> int:
    d = _dist()
    return d.get_world_size() if d is not None else env_world_size()


def rank() -> int:
    d = _dist()
    if d is not None:
        return d.get_rank()
    return int(os.environ.get("RANK", "0")) if env_world_size() > 1 else 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0")) if env_world_size() > 1 else 0


def local_world_size() -> int:
    """Ranks of this cell on this machine: the launcher's LOCAL_WORLD_SIZE (torchrun, the
    deepspeed launcher), else every rank (one machine assumed)."""
    world = env_world_size()
    if world <= 1:
        return 1
    return int(os.environ.get("LOCAL_WORLD_SIZE") or world)


def is_writer() -> bool:
    """Rank 0 alone writes a cell's files (config, rows, trajectories, markers)."""
    return rank() == 0


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init(timeout_s: float = 600.0) -> bool:
    """Join the launcher's process group with a collective timeout; True when there is
    more than one rank. On nccl the rank's device is LOCAL_RANK (one GPU per rank)."""
    if env_world_size() <= 1:
        return False
    d = torch.distributed
    if not d.is_initialized():
        be = backend()
        if be == "nccl":
            torch.cuda.set_device(local_rank())
        d.init_process_group(backend=be, timeout=datetime.timedelta(seconds=float(timeout_s)))
    return d.get_world_size() > 1


def barrier() -> None:
    d = _group()
    if d is not None:
        d.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank `src`'s object on every rank (pickled; the object itself on one rank)."""
    d = _group()
    if d is None:
        return obj
    box = [obj]
    d.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj: Any) -> list:
    """Every rank's object, in rank order, on every rank."""
    d = _group()
    if d is None:
        return [obj]
    out: list = [None] * d.get_world_size()
    d.all_gather_object(out, obj)
    return out


def shard(n: int, rank_: int, world: int) -> range:
    """The contiguous share of `n` items of rank `rank_` of `world` (the first n % world
    ranks get one more); concatenated in rank order the shares are range(n)."""
    base, extra = divmod(n, world)
    start = rank_ * base + min(rank_, extra)
    return range(start, start + base + (1 if rank_ < extra else 0))
