"""`hydra/launcher=pack`: a -m grid's cells packed by what they can share (base model,
LoRA shape, sampler and learner backends, device), one process per pack (docs/packs.md,
issue 62). Hydra instantiates only launcher classes defined under `hydra_plugins`
(hydra/core/plugins.py, `is_in_toplevel_plugins_module`), so the class lives here and
the work in ablate.apps.pack. No `from __future__ import annotations`: Hydra's plugin
scan runs this module before it is in sys.modules, where dataclasses looks up string
annotations (hydra/core/plugins.py, `_scan_all_plugins`)."""

from dataclasses import dataclass
from typing import Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

TARGET = "hydra_plugins.ablate_pack_launcher.pack_launcher.PackLauncher"


@dataclass
class PackLauncherConf:
    _target_: str = TARGET
    # cells per pack at most (a grid of more cells that agree makes several packs)
    size: int = 8
    # true: rollouts and updates per cell, each cell's rows equal to its solo run's (for
    # checking); false: the cells' rollouts decode in shared calls (docs/packs.md)
    exact: bool = False
    # the cells' updates in shared forwards and backwards (ablate/learners/packed.py);
    # null: on where run.device is cuda, off on cpu, where they measured no faster and
    # held more memory (benchmarks/results/bench_joint_update_tiny.json)
    joint_updates: Optional[bool] = None
    # batched: the most positions of keys and values the pack's HF sampler keeps between
    # calls over all cells (episodes to extend), the oldest dropped first and encoded anew
    # if extended (cost, not results); null: no cap (a pack keeps N cells' at once)
    kept_tokens: Optional[int] = None


ConfigStore.instance().store(group="hydra/launcher", name="pack", node=PackLauncherConf,
                             provider="ablate")


class PackLauncher(Launcher):
    def __init__(self, size: int = 8, exact: bool = False,
                 joint_updates: Optional[bool] = None,
                 kept_tokens: Optional[int] = None) -> None:
        super().__init__()
        self.size, self.exact, self.joint_updates = size, exact, joint_updates
        self.kept_tokens = kept_tokens
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        # local: Hydra imports every hydra_plugins module at the start of any Hydra app
        # (plugin discovery); ablate (torch, transformers) loads only when a pack launches
        from ablate.apps.pack import launch
        return launch(self, job_overrides, initial_job_idx)
