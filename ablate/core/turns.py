"""Step boundaries: the points where a cell may hand its process to another cell (the
cells of one pack share a process and a base model: hydra/launcher=pack, docs/packs.md).
The loop calls `step_boundary()` before each training step; a runner of several cells
in one process sets the hook; with none set it does nothing (a solo cell)."""
from __future__ import annotations

from typing import Callable

_HOOK: list[Callable[[], None]] = []


def step_boundary() -> None:
    for hook in _HOOK:
        hook()


def set_hook(hook: Callable[[], None] | None) -> None:
    """The one hook (None: none); its runner sets it for the pack's lifetime."""
    _HOOK[:] = [hook] if hook is not None else []
