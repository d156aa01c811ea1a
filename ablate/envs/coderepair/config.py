"""Code repair's own `env` keys (`env=coderepair`), beside the common ones of
ablate.protocol.config.EnvConfig."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ablate.protocol.config import EnvConfig


@dataclass
class CodeRepairEnvConfig(EnvConfig):
    name: str = "coderepair"
    max_turns: int = 20                  # reading five files and fixing three bugs takes ~20
    gen_seed: int = 0                    # the same seed gives the same repositories
    train_tasks: int = 400               # repositories generated for training
    test_tasks: int = 200                # held-out repositories (never shared with train)
    max_hops: int = 3                    # the highest difficulty (1..3 bugs; a task's hops)
    max_difficulty: Optional[int] = None   # the same as max_hops when given
