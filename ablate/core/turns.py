"""Turn points: where a cell may hand its process to another cell (the cells of one pack
share a process and a base model: hydra/launcher=pack, docs/packs.md). The loop calls
`step_boundary()` before each training step; a sampler whose requests several cells
serve together calls `wait_for(done, serve)`. A runner of several cells in one process
sets the hooks; without one, a step boundary does nothing and `wait_for` serves at once
(a solo cell)."""
from __future__ import annotations

from typing import Callable

_BOUNDARY: list[Callable[[], None]] = []
_WAIT: list[Callable[[Callable[[], bool], Callable[[], None]], None]] = []


def step_boundary() -> None:
    for hook in _BOUNDARY:
        hook()


def wait_for(done: Callable[[], bool], serve: Callable[[], None]) -> None:
    """Return once done(); `serve` is the work that makes it so (e.g. one batch of every
    waiting cell's requests). A runner decides when serve runs; without one, now."""
    if _WAIT:
        _WAIT[0](done, serve)
    elif not done():
        serve()


def set_hook(boundary: Callable[[], None] | None,
             wait: Callable[[Callable[[], bool], Callable[[], None]], None] | None = None
             ) -> None:
    """The runner's hooks (None: none) for its lifetime."""
    _BOUNDARY[:] = [boundary] if boundary is not None else []
    _WAIT[:] = [wait] if wait is not None else []
