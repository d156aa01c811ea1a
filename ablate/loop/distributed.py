"""What a surviving rank says when a peer dies (docs/distributed.md, "A rank that dies").

A killed rank makes its peers' next collective fail (gloo: the connection closed) and
torchrun then sends them SIGTERM. Either way the survivor ends with one line naming the
dead rank, the step it was at and the step a re-run resumes from:

    rank 1 died at step 2; re-run the same command to resume from step 1

`watch_peers()` (after the process group is up) learns every rank's host and process id
and turns SIGTERM into `Stopped`; `peer_failure(exc, ckpt_dir)` is that line, or None when
no peer on this host died and the rank was not stopped (the error is its own)."""
from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Optional

from ablate.core import dist

_STATE: dict = {"peers": [], "step": 0}
GRACE_S = 2.0   # a peer that raised exits a moment after its sockets fail ours


class RankDied(RuntimeError):
    """A peer rank died (or the launcher stopped this one): the cell ends in one line."""


class Stopped(BaseException):
    """SIGTERM (torchrun ending the survivors of a failed rank, or a user's kill): a
    BaseException, like KeyboardInterrupt, so no `except Exception` swallows it."""


def watch_peers() -> None:
    """Every rank's (host, pid), for telling which died; SIGTERM raised as `Stopped`."""
    _STATE["peers"] = dist.all_gather_object((socket.gethostname(), os.getpid()))
    _STATE["step"] = 0
    signal.signal(signal.SIGTERM, _stop)


def _stop(signum, frame):
    raise Stopped("SIGTERM")


def at_step(step: int) -> None:
    """The step this rank is at (the one being trained, or the start)."""
    _STATE["step"] = int(step)


def dead_ranks() -> list[int]:
    """Ranks on this host whose process is gone (or a zombie not yet reaped)."""
    here = socket.gethostname()
    return [r for r, (host, pid) in enumerate(_STATE["peers"])
            if host == here and pid != os.getpid() and not _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def last_checkpoint(ckpt_dir: Path) -> int:
    """The step of the newest complete checkpoint (0: none, the cell restarts)."""
    steps = [int(p.name[5:]) for p in Path(ckpt_dir).glob("step_*")
             if p.name[5:].isdigit() and (p / "COMPLETE").exists()]
    return max(steps, default=0)


def peer_failure(exc: BaseException, ckpt_dir: Path) -> Optional[RankDied]:
    """The one line for a rank whose peer died (waiting up to GRACE_S for a peer that
    failed to exit), or None when `exc` is this rank's own error."""
    if not _STATE["peers"]:
        return None
    dead, until = dead_ranks(), time.time() + GRACE_S
    while not dead and time.time() < until and _collective_error(exc):
        time.sleep(0.1)
        dead = dead_ranks()
    if dead:
        who = f"rank {', '.join(map(str, dead))} died"
    elif isinstance(exc, Stopped):
        who = f"rank {dist.rank()} was stopped (SIGTERM)"
    else:
        return None
    return RankDied(f"{who} at step {_STATE['step']}; re-run the same command to resume "
                    f"from step {last_checkpoint(ckpt_dir)}")


def _collective_error(exc: BaseException) -> bool:
    """A failed collective (a peer gone): torch's DistError, or gloo's / NCCL's text."""
    import torch.distributed as td
    if isinstance(exc, (Stopped, getattr(td, "DistError", ()))):
        return True
    text = str(exc).lower()
    return any(w in text for w in ("gloo", "nccl", "connection closed", "connection reset"))
