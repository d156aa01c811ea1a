"""OpenEnv's own `env` keys (`env=openenv`), beside the common ones of
ablate.protocol.config.EnvConfig."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ablate.protocol.config import EnvConfig


@dataclass
class OpenEnvEnvConfig(EnvConfig):
    name: str = "openenv"
    url: Optional[str] = None            # a running server, http://127.0.0.1:PORT
    app: Optional[str] = None            # or `pkg.module:app`, served by the cell (uvicorn)
    max_turns: int = 8
    gen_seed: int = 0                    # reset seeds: train and test ranges never meet
    train_tasks: int = 64                # episodes' reset seeds for training
    test_tasks: int = 32                 # held-out reset seeds
    timeout_s: float = 10.0              # per message (reset, step), seconds
    connect_timeout_s: float = 30.0      # per session's WebSocket handshake, seconds
    start_timeout_s: float = 60.0        # a served `app` must answer /health within this
    prompt_field: Optional[str] = None   # the observation field that is the text; None: JSON
    success_reward: float = 1.0          # correct: the episode ended with a reward >= this
