"""Experiment tracking with wandb. The local files of a cell remain the source of truth
for `analysis`; wandb is a view. WANDB_MODE is honoured (offline by default, `disabled`
in tests); run names come from the factors (Hydra's override dirname), grouped by sweep."""
from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

log = logging.getLogger("ablate.loop.tracking")


def run_name(cell_dir: Path) -> str:
    """Hydra names a multirun cell directory after its overrides; single runs by time."""
    return cell_dir.name


class Tracker:
    def __init__(self, cfg, cell_dir: Path, writer: bool = True):
        self.name = run_name(Path(cell_dir))
        self.run = None
        mode = cfg.run.wandb_mode
        if mode == "disabled" or not writer:   # ranks > 0 of a cell log nothing
            return
        try:
            import wandb
        except ImportError:  # pragma: no cover - wandb is a dependency
            log.warning("wandb is not installed; tracking disabled")
            return
        group = Path(cell_dir).parent.name
        self.run = wandb.init(
            project=cfg.run.wandb_project, mode=mode, dir=str(cell_dir), name=self.name,
            group=group, config=OmegaConf.to_container(cfg, resolve=True), reinit="create_new")

    def log(self, row: dict, step: int) -> None:
        if self.run is not None:
            self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))},
                         step=step)

    def finish(self, summary: dict) -> None:
        if self.run is not None:
            for k, v in summary.items():
                if isinstance(v, (int, float)):
                    self.run.summary[k] = v
            self.run.finish()
            self.run = None
