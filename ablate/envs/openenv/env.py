"""`env=openenv`: an OpenEnv environment server (openenv-core: HTTP /schema, /health and a
WebSocket /ws session per episode with reset / step / state messages) as an ablate
environment.

- Server: `env.url=http://127.0.0.1:PORT` (running), or `env.app=pkg.module:app` (an
  installed OpenEnv app, served by the cell with uvicorn on a free loopback port).
- Tool: one, `step`, whose parameters are the server's action schema (GET /schema,
  `action`, its `metadata` field left out); it is also the answer tool: the episode
  ends when the server says `done`. A server-side rejection of an action (a validation
  error) is an error observation; a server that stops answering (closed connection, or
  no reply within `env.timeout_s`) is one EnvError line that stops the cell, never a hang.
- Tasks: reset seeds. Train seeds are 2·gen_seed·10⁶ + i, test seeds (2·gen_seed + 1)·10⁶
  + i; a task's prompt is the observation of `reset(seed=...)` (the field
  `env.prompt_field`, or the observation as JSON). The server must be deterministic in
  its seed: each episode opens its own session and resets with the task's seed.
- Judge and reward: correct when the episode ended (`done`) with a reward >=
  `env.success_reward`; the reward scheme `openenv_reward` is the sum of the server's
  rewards over the episode (the default), `outcome` the verdict.

Needs openenv-core (`pip install 'ablate[openenv]'`, openenv-core==0.3.0); without it,
one EnvError line with that command.
"""
from __future__ import annotations

import json
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.envs.registry import register_env
from ablate.protocol.environment import EnvError, Environment, optional_module
from ablate.protocol.task import Task, ToolResult
from ablate.envs.openenv.config import OpenEnvEnvConfig
from ablate.envs.openenv.rewards import openenv_reward
from ablate.envs.openenv.server import Served

PIN = "openenv-core==0.3.0"
INSTALL = f"pip install 'ablate[openenv]' (or: pip install {PIN})"
STEP = "step"
SPLIT_STRIDE = 1_000_000
HIDDEN = ("metadata",)            # Action fields that are no argument of the model's


class ServerGone(Exception):
    """The server closed the connection or did not answer within the timeout."""


def core():
    """openenv.core, or one EnvError line with the install command."""
    return optional_module("openenv.core", "openenv", "openenv-core", INSTALL)


@dataclass
class OEState:
    task: Task
    client: Any = None
    rewards: list = field(default_factory=list)
    done: bool = False


@register_env("openenv", rewards={"openenv_reward": openenv_reward},
              default_reward="openenv_reward",
              behaviour_labels={"env_reward": "the sum of the server's rewards",
                                "server_done": "the server ended the episode"})
class OpenEnvEnv(Environment):
    answer_tool = STEP
    config_schema = OpenEnvEnvConfig

    def __init__(self, url: Optional[str] = None, app: Optional[str] = None,
                 gen_seed: int = 0, train_tasks: int = 64, test_tasks: int = 32,
                 timeout_s: float = 10.0, connect_timeout_s: float = 30.0,
                 start_timeout_s: float = 60.0,
                 prompt_field: Optional[str] = None, success_reward: float = 1.0):
        if (url is None) == (app is None):
            raise EnvError("env=openenv needs exactly one of env.url (a running server) "
                           "and env.app (pkg.module:app to serve)")
        for key, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if value <= 0:
                raise EnvError(f"env.{key}={value}; allowed: > 0")
        core()
        self.served = Served(app, start_timeout_s) if app else None
        self.url = (url or self.served.url).rstrip("/")
        self.gen_seed, self.timeout_s = int(gen_seed), float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.prompt_field, self.success_reward = prompt_field, float(success_reward)
        self.counts = {"train": int(train_tasks), "test": int(test_tasks)}
        self._schema_cache: Optional[dict] = None
        self._tasks: dict[str, list[Task]] = {}
        self._clients: "weakref.WeakSet" = weakref.WeakSet()

    # ---------------------------------------------------------------- the server
    def _get(self, path: str) -> dict:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=self.timeout_s) as r:
                return json.loads(r.read())
        except (OSError, ValueError) as exc:
            raise EnvError(f"env=openenv: GET {self.url}{path} failed within "
                           f"env.timeout_s={self.timeout_s} ({exc})") from None

    def _connect(self):
        # a handshake on a busy host can outlast one message's timeout: its own limit
        client = core().GenericEnvClient(base_url=self.url,
                                         connect_timeout_s=self.connect_timeout_s,
                                         message_timeout_s=self.timeout_s).sync()
        self._clients.add(client)
        return client

    def _call(self, client, what: str, fn):
        """fn() on the session; a dead or silent server is one EnvError line."""
        try:
            return fn()
        except RuntimeError as exc:        # EnvClient: the server answered with an error
            if str(exc).startswith("Server error"):
                raise
            raise self._gone(what, exc) from None
        except Exception as exc:           # closed connection, timeout, refused
            raise self._gone(what, exc) from None

    def _gone(self, what: str, exc: BaseException) -> EnvError:
        detail = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        limit = (f"env.connect_timeout_s={self.connect_timeout_s}" if "handshake" in detail
                 else f"env.timeout_s={self.timeout_s}")
        return EnvError(f"env=openenv: the server at {self.url} did not answer {what} "
                        f"within {limit} ({detail[:200]})")

    # ---------------------------------------------------------------- tasks
    def split_seed(self, split: str) -> int:
        return (2 * self.gen_seed + (split == "test")) * SPLIT_STRIDE

    def tasks(self, split: str) -> list[Task]:
        if split not in self.counts:
            raise EnvError(f"env=openenv: split {split!r}; allowed: train, test")
        if split not in self._tasks:
            client = self._connect()
            try:
                self._tasks[split] = [self._task(client, split, i)
                                      for i in range(self.counts[split])]
            finally:
                client.close()
        return self._tasks[split]

    def _task(self, client, split: str, i: int) -> Task:
        seed = self.split_seed(split) + i
        try:
            result = self._call(client, "reset", lambda: client.reset(seed=seed))
        except RuntimeError as exc:        # the server answered reset with an error
            raise EnvError(f"env=openenv: reset(seed={seed}) at {self.url}: "
                           f"{str(exc)[:200]}") from None
        return Task(id=f"{split}-{i}", prompt=self.render(result.observation), answer="",
                    metadata={"difficulty": 1, "seed": seed}, key=f"openenv:seed:{seed}")

    def render(self, observation: Any) -> str:
        if isinstance(observation, dict):
            if self.prompt_field and self.prompt_field in observation:
                return str(observation[self.prompt_field])
            shown = {k: v for k, v in observation.items() if k not in HIDDEN}
            return json.dumps(shown, ensure_ascii=False, sort_keys=True)
        return str(observation)

    # ---------------------------------------------------------------- tools
    def action_schema(self) -> dict:
        if self._schema_cache is None:
            action = dict(self._get("/schema").get("action") or {})
            props = {k: v for k, v in (action.get("properties") or {}).items()
                     if k not in HIDDEN}
            self._schema_cache = {"type": "object", "properties": props,
                                  "required": [k for k in action.get("required", [])
                                               if k in props],
                                  "additionalProperties": False,
                                  **({"$defs": action["$defs"]} if "$defs" in action else {})}
        return self._schema_cache

    def tool_schemas(self) -> list[dict]:
        return [{"type": "function", "function": {
            "name": STEP, "description": "Act in the environment (one action); the "
                                         "environment ends the episode.",
            "parameters": self.action_schema()}}]

    def system_prompt(self) -> str:
        return ("You act in an environment through the tool step. Each call is one "
                "action; read the observation it returns, and keep acting until the "
                "episode ends.")

    # ---------------------------------------------------------------- episodes
    def reset(self, task: Task) -> OEState:
        state = OEState(task=task, client=self._connect())
        self._call(state.client, "reset", lambda: state.client.reset(
            seed=task.metadata["seed"]))
        return state

    def call(self, state: OEState, name: Any, arguments: Any) -> ToolResult:
        """Environment.call; a dead server stops the cell (one EnvError line)."""
        result = super().call(state, name, arguments)
        if result.error and result.error.startswith("internal: EnvError: env=openenv"):
            raise EnvError(result.error[len("internal: EnvError: "):])
        return result

    def step(self, state: OEState, name: str, arguments: dict) -> ToolResult:
        if state.done:
            msg = "Error: the episode is over."
            return ToolResult(name, arguments, observation=msg, error=msg)
        try:
            result = self._call(state.client, "step",
                                lambda: state.client.step(dict(arguments)))
        except RuntimeError as exc:        # the server rejected the action
            msg = f"Error: {str(exc)[:300]}"
            return ToolResult(name, arguments, observation=msg, error=msg)
        reward = float(result.reward or 0.0)
        state.rewards.append(reward)
        state.done = bool(result.done)
        text = self.render(result.observation)
        if state.done:
            state.client.close()
        return ToolResult(name, arguments, observation=text, state_changed=True,
                          done=state.done, answer=text if state.done else None,
                          extra={"reward": reward})

    def is_correct(self, task: Task, answer: Optional[str], state: OEState) -> bool:
        return bool(state is not None and state.done and state.rewards
                    and state.rewards[-1] >= self.success_reward)

    def judge_many(self, items) -> list[bool]:
        return [self.is_correct(t, a, s) for t, a, s in items]

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        ok = [r for r in results if r.error is None]
        return {"env_reward": float(sum(r.extra.get("reward", 0.0) for r in ok)),
                "server_done": any(r.done for r in ok)}


    def snapshot(self, state: OEState) -> Any:
        raise EnvError("env=openenv: a server session cannot be snapshot (tree search "
                       "agents are not supported)")

    def close(self) -> None:
        for client in list(self._clients):
            try:
                client.close()
            except Exception:   # best effort: the server may be gone
                pass
        if self.served is not None:
            self.served.stop()
