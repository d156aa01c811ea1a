"""A real OpenEnv environment (openenv-core's Environment, Action and Observation, served
by its create_app over HTTP + WebSocket) for the tests of env=openenv: guess a number in
1..16 from "higher" / "lower" hints within 5 guesses; reward 1 for the right guess.

    python -m uvicorn envs_external.openenv_guess:app --port 8000     # PYTHONPATH=tests
"""
from __future__ import annotations

import random
import time
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

HIGH, MAX_GUESSES = 16, 5


class GuessAction(Action):
    guess: int = Field(..., description="Your guess, 1..16")
    wait_s: float = Field(default=0.0, description="(tests) seconds the server stalls")


class GuessObservation(Observation):
    message: str = Field(default="", description="What the game says")


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.target = 1

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              **kwargs: Any) -> GuessObservation:
        self.target = random.Random(seed).randint(1, HIGH)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GuessObservation(message=f"Guess my number between 1 and {HIGH}; you have "
                                        f"{MAX_GUESSES} guesses.", done=False, reward=0.0)

    def step(self, action: GuessAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> GuessObservation:   # type: ignore[override]
        if action.wait_s:
            time.sleep(action.wait_s)
        self._state.step_count += 1
        right = action.guess == self.target
        hint = "correct" if right else ("higher" if action.guess < self.target else "lower")
        done = right or self._state.step_count >= MAX_GUESSES
        return GuessObservation(message=hint, done=done, reward=1.0 if right else 0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess",
                 max_concurrent_envs=64)
