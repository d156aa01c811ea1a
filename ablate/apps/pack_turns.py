"""The cells of a pack taking turns in one process (hydra/launcher=pack, docs/packs.md):
one thread per cell, exactly one of them running at a time. At every step boundary
(ablate.core.turns) the running cell hands the process to the next live cell, round
robin, so every cell of the pack is alive at once over ONE base model
(ablate.models.loading.shared_bases) while each computes exactly what it computes alone.

What one cell may not see of another is the process-global state a solo cell owns:
the torch, CUDA, numpy and Python random generators (a cell's task order, sampling and
LoRA initialisation come from its own seed), the root logger's handlers (each cell logs
to its own directory: Hydra's job logging), Hydra's config singleton, the working
directory and the pack's environment variable. A cell leaving puts its state aside; a
cell coming back gets its own restored, so its numbers are those of its solo run
(tests/apps/test_pack_shared.py)."""
from __future__ import annotations

import logging
import os
import random
import threading
from typing import Callable, Sequence

import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig

from ablate.core.turns import set_hook
from ablate.loop.cell import PACK_ENV


def capture() -> dict:
    """The process-global state a cell owns (see the module docstring)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "handlers": list(logging.root.handlers), "level": logging.root.level,
            "hydra": HydraConfig.instance().cfg, "cwd": os.getcwd(),
            "env": os.environ.get(PACK_ENV)}


def restore(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])
    logging.root.handlers[:] = state["handlers"]
    logging.root.setLevel(state["level"])
    HydraConfig.instance().cfg = state["hydra"]
    os.chdir(state["cwd"])
    if state["env"] is None:
        os.environ.pop(PACK_ENV, None)
    else:
        os.environ[PACK_ENV] = state["env"]


class Turns:
    """Round-robin turns among `n` cell threads. `boundary` (a step boundary) and `wait`
    (a cell waiting for work several cells share, ablate.core.turns.wait_for) pass the
    turn to the next cell that can run; when every live cell waits, the one that waited
    last serves them all (one batch) and runs on."""

    def __init__(self, n: int):
        self.cond = threading.Condition()
        self.live = list(range(n))
        self.current = 0
        self.mine = threading.local()          # .index: the cell this thread runs
        self.waiting: dict[int, tuple] = {}    # cell -> (done, serve) while it waits
        self.switches = 0

    def _runnable_after(self, i: int) -> int | None:
        """The next live cell after i, round robin, that can run (i excluded)."""
        order = [j for j in self.live if j > i] + [j for j in self.live if j < i]
        for j in order:
            if j not in self.waiting or self.waiting[j][0]():
                return j
        return None

    def _pass_to(self, i: int, nxt: int) -> None:
        """Hand the turn to nxt and wait for it to come back (self.cond held)."""
        self.current, self.switches = nxt, self.switches + 1
        self.cond.notify_all()
        self.cond.wait_for(lambda: self.current == i)

    def _serve_waiting(self) -> None:
        """Every waiting cell's serve, each distinct one once (outside the lock)."""
        with self.cond:
            serves = list({id(s): s for _, s in self.waiting.values()}.values())
        for serve in serves:
            serve()

    def run(self, i: int, fn: Callable[[], object]) -> object:
        """Cell i's whole run, in its thread: it starts when its turn first comes and
        hands the turn on when it ends, however it ends."""
        self.mine.index = i
        with self.cond:
            self.cond.wait_for(lambda: self.current == i)
        try:
            return fn()
        finally:
            with self.cond:
                self.live.remove(i)
            while True:
                with self.cond:
                    nxt = self._runnable_after(i)
                    if nxt is not None or not self.waiting:
                        self.current = -1 if nxt is None else nxt
                        self.cond.notify_all()
                        break
                self._serve_waiting()

    def boundary(self) -> None:
        i = getattr(self.mine, "index", None)
        if i is None:
            return                             # not a cell thread of this pack
        with self.cond:
            nxt = self._runnable_after(i)
        if nxt is None:
            return                             # no other cell can run now: run on
        state = capture()
        with self.cond:
            self._pass_to(i, nxt)
        restore(state)

    def wait(self, done: Callable[[], bool], serve: Callable[[], None]) -> None:
        i = getattr(self.mine, "index", None)
        if i is None:                          # not a cell thread of this pack
            if not done():
                serve()
            return
        state = capture()
        with self.cond:
            self.waiting[i] = (done, serve)
        while not done():
            with self.cond:
                nxt = self._runnable_after(i)
                if nxt is not None:
                    self._pass_to(i, nxt)
                    continue
            self._serve_waiting()              # every live cell waits: one batch
        with self.cond:
            self.waiting.pop(i, None)
        restore(state)


def take_turns(jobs: Sequence[Callable[[], object]]) -> tuple[list, int]:
    """Run each job (a cell) in a thread of its own, taking turns at step boundaries;
    (their results in order, how many times the turn passed). A job that raises raises
    here, after every job ended."""
    turns = Turns(len(jobs))
    results: list = [None] * len(jobs)
    errors: list = [None] * len(jobs)

    def body(i: int) -> None:
        try:
            results[i] = turns.run(i, jobs[i])
        except BaseException as exc:           # noqa: BLE001 - re-raised below
            errors[i] = exc

    threads = [threading.Thread(target=body, args=(i,), name=f"pack-cell-{i}")
               for i in range(len(jobs))]
    set_hook(turns.boundary, turns.wait)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        set_hook(None)
    for exc in errors:
        if exc is not None:
            raise exc
    return results, turns.switches
