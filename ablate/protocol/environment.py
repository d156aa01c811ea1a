"""The environment protocol: what a task world must provide to be trained and evaluated on.

An environment owns its tasks, its tool schemas (OpenAI function format), its system
prompt, a per-episode state made by `reset`, a `step` from (state, tool name, arguments)
to an observation plus structured info, the correctness of a final answer, its behaviour
metrics. A feature only some worlds have is a `typing.Protocol` beside the code that
uses it (docs/environments.md, "Optional features"): Maskable (ablate/harness/masking.py),
Predictable (ablate/harness/parser.py), Expands (ablate/harness/rollout.py), SkillWorld
(ablate/agents/skills.py), BatchJudge below and Demonstrable (trajectory.py). The
harness, the rewards and the cell loop read only this protocol; docs/environments.md has
a complete example.

Design (read, not copied): verifiers' `MultiTurnEnv.setup_state` / `env_response` keep
per-rollout state outside the environment object, and TRL's `environment_factory` makes
one environment instance per rollout with its tools as methods; here one environment
object serves many episodes and every episode's mutable world lives in its `state`.

Rules every environment keeps:
- `step` never raises on bad input (unknown tool, arguments that are not a JSON object,
  wrong types): the problem comes back as an observation with `error` set, so the model
  can read it and act on it. `Environment.call` wraps `step` to guarantee this.
- `ToolResult.state_changed` is True only when the call changed the world (or what the
  agent knows of it); rewards that pay for actions condition on it (see
  docs/environments.md, "Rewarding effects, not actions").
- Calling `answer_tool` without error ends the episode; `ToolResult.answer` holds the
  answer the judge will see.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
from abc import ABC, abstractmethod
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from ablate.protocol.config import EnvConfig
from ablate.protocol.task import Task, ToolResult

log = logging.getLogger(__name__)


class EnvError(ValueError):
    """A user mistake in choosing or configuring an environment (one-line message)."""


def optional_module(module: str, env: str, package: str, install: str):
    """The optional package `module` an environment adapter needs, or one EnvError line
    naming the environment, the package and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise EnvError(f"env={env} needs the {package} package: {install}") from None


class Environment(ABC):
    """Base class of every environment. Subclasses implement the abstract methods and are
    registered with @register_env("name"); `name` and `answer_tool` are class attributes."""

    name: str = ""
    answer_tool: str = ""
    # what the environment owns beside its methods (docs/environments.md)
    config_schema: type = EnvConfig     # its `env` keys: EnvConfig or a subclass of it
    default_reward: str = "outcome"     # reward.name when the command line sets none
    behaviour_labels: dict = {}         # behaviour() column -> what it counts, for tables
    breakdown_label: str = "difficulty"  # what Task.difficulty counts here (eval rows: `hops`)
    config_errors: tuple = ()           # exceptions of from_config that mean bad user input

    # ------------------------------------------------------------------ required
    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """The tasks of `split` ("train" or "test", the held-out split)."""

    @abstractmethod
    def tool_schemas(self) -> list[dict]:
        """OpenAI function-format schemas; one of them is named `answer_tool`."""

    @abstractmethod
    def system_prompt(self) -> str:
        """The system message of every episode."""

    @abstractmethod
    def reset(self, task: Task) -> Any:
        """A fresh per-episode state for `task`."""

    @abstractmethod
    def step(self, state: Any, name: str, arguments: dict) -> ToolResult:
        """Run one well-formed call (`name` is a known tool, `arguments` a dict) on
        `state`, mutating it. Bad argument values return a ToolResult with `error`."""

    @abstractmethod
    def is_correct(self, task: Task, answer: Optional[str], state: Any) -> bool:
        """Correctness of the episode's outcome (a configured judge may override)."""

    # ------------------------------------------------------------------ optional
    @classmethod
    def from_config(cls, env_cfg, **objects) -> "Environment":
        """From the `env` config group: the keys (and `env.options.<key>`) that name a
        constructor parameter are passed, the others (`name`, `_target_`, ...) ignored;
        `objects` (e.g. a judge made from another group) are passed when the constructor
        takes them."""
        params = inspect.signature(cls.__init__).parameters
        get = env_cfg.get if hasattr(env_cfg, "get") else (
            lambda k, d=None: getattr(env_cfg, k, d))
        kw = {k: get(k) for k in params if k != "self" and get(k, None) is not None}
        kw.update({k: v for k, v in dict(get("options", None) or {}).items() if k in params})
        kw.update({k: v for k, v in objects.items() if k in params})
        return cls(**kw)

    @classmethod
    def config_keys(cls) -> tuple[str, ...]:
        """The `env.<key>` this environment accepts: the fields of its config_schema."""
        return tuple(f.name for f in dataclasses.fields(cls.config_schema))

    @classmethod
    def option_keys(cls) -> tuple[str, ...]:
        """The `env.options.<key>` it accepts: constructor arguments that are no key of
        its schema (from_config passes them)."""
        params = inspect.signature(cls.__init__).parameters.values()
        return tuple(p.name for p in params if p.name != "self" and p.kind not in (
            p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in cls.config_keys())

    @classmethod
    def check_config(cls, env_cfg) -> None:
        """EnvError (one line, naming the environment and what it allows) for a key its
        schema lacks or an option its constructor does not take; an environment adds its
        own value checks (super().check_config first)."""
        label = _get(env_cfg, "name") or cls.name or cls.__name__
        keys = [k for k in _keys(env_cfg) if k not in cls.config_keys()]
        if keys:
            raise EnvError(f"env={label} has no key env.{keys[0]}; allowed: "
                           f"{', '.join(cls.config_keys())}")
        options = [k for k in _keys(_get(env_cfg, "options")) if k not in cls.option_keys()]
        if options:
            raise EnvError(f"env={label} takes no option env.options.{options[0]}; allowed: "
                           f"{', '.join(cls.option_keys()) or '(none)'}")

    @classmethod
    def prompt_text(cls, env_cfg) -> str:
        """The text of every episode's prompt beside the question (system prompt and
        tool schemas): preflight sizes the question budget with it. The default builds
        the environment; one with constant prompts returns them without building."""
        env = cls.from_config(env_cfg)
        try:
            return (env.system_prompt() + json.dumps(env.prompt_tool_schemas())
                    + "".join(q + r for q, r in env.examples()))
        finally:
            env.close()

    def describe(self) -> dict:
        """What a reader of a cell's rows needs of its environment (environment.json):
        its name, tools, default reward, the labels of its behaviour columns and what
        the rows' `hops` breakdown counts (the cell adds a Predictable world's outcome
        labels, ablate/harness/parser.py)."""
        return {"name": self.name, "answer_tool": self.answer_tool,
                "tools": list(self.tool_names()), "default_reward": self.default_reward,
                "behaviour_labels": dict(self.behaviour_labels),
                "breakdown_label": self.breakdown_label}

    def prompt_tool_schemas(self) -> list[dict]:
        """The tools described to the model in its prompt (default: all of
        tool_schemas()); an environment whose final answer is written as text
        (`text_answer`) may leave its answer tool out."""
        return self.tool_schemas()

    def examples(self) -> list[tuple[str, str]]:
        """Worked (question, reply) pairs shown before every question as earlier chat
        turns (few-shot prompting; Brown et al. 2020, arXiv:2005.14165). Default: none."""
        return []

    def text_answer(self, text: str) -> Optional[dict]:
        """The answer tool's arguments for a final answer written as text in a turn
        without a well-formed tool call (e.g. `<answer>42</answer>`); the harness then
        calls the answer tool with them. None (the default): text is no answer."""
        return None

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        """Per-episode behaviour metrics (JSON scalars) beyond the generic ones."""
        return {}

    def reward_schemes(self) -> dict[str, Callable]:
        """Reward schemes of this world: name -> its Rubric, registered in
        ablate.rewards.REWARDS (docs/rewards.md); {} = only the generic ones."""
        return {}

    def close(self) -> None:
        """Release files, connections."""

    # ------------------------------------------------------------------ provided
    @property
    def train_tasks(self) -> list[Task]:
        if "_train_tasks" not in self.__dict__:
            self._train_tasks = self.tasks("train")
        return self._train_tasks

    @property
    def test_tasks(self) -> list[Task]:
        if "_test_tasks" not in self.__dict__:
            self._test_tasks = self.tasks("test")
        return self._test_tasks

    def tool_names(self) -> tuple[str, ...]:
        return tuple(s["function"]["name"] for s in self.tool_schemas())

    def call(self, state: Any, name: Any, arguments: Any) -> ToolResult:
        """`step` made safe for model output: parses JSON-string arguments, rejects
        unknown tools and non-object or unexpected arguments with an observation, and
        turns an exception inside the environment into an `internal` error. Never raises."""
        tool = name if isinstance(name, str) else ""
        args = parse_arguments(arguments)
        problem = self._check_call(tool, name, args, arguments)
        if problem is not None:
            return ToolResult(name=tool, arguments=args if isinstance(args, dict) else None,
                              observation=problem, error=problem)
        try:
            result = self.step(state, tool, args)
        except Exception as exc:   # a bug in an environment must not kill the rollout
            self._log_failure(tool, exc, arguments)
            return ToolResult(name=tool, arguments=args,
                              observation=f"Error: {tool} failed inside the environment.",
                              error=f"internal: {type(exc).__name__}: {exc}")
        check_result(self, tool, result)
        return result

    def _log_failure(self, tool: str, exc: Exception, arguments: Any) -> None:
        """Once per (tool, exception type) with its traceback, then a line with the count
        at the 10th, 100th, ... time: a broken tool does not flood the log."""
        counts = self.__dict__.setdefault("tool_failures", {})
        key = (tool, type(exc).__name__)
        counts[key] = n = counts.get(key, 0) + 1
        if n == 1:
            log.error("env %s: tool %s raised %s on %s (shown to the model as an internal "
                      "error; later %s of %s are counted, not logged)", self.name, tool,
                      key[1], quote(arguments, 200), key[1], tool, exc_info=exc)
        elif n in (10, 100, 1000, 10000):
            log.error("env %s: tool %s raised %s %d times so far", self.name, tool, key[1], n)

    def _check_call(self, tool: str, raw_name: Any, args: Any, raw_args: Any) -> Optional[str]:
        names = self.tool_names()
        if tool not in names:
            shown = quote(raw_name) if raw_name not in (None, "") else "(none)"
            return f"Error: unknown tool {shown}. Available tools: {', '.join(names)}."
        if not isinstance(args, dict):
            return (f"Error: the arguments of {tool} must be a JSON object; "
                    f"got {quote(raw_args)}.")
        params = self._params(tool)
        extra = [k for k in args if k not in params]
        if extra:
            return (f"Error: {tool} got unexpected argument(s) "
                    f"{', '.join(quote(k, 30) for k in extra[:3])}; it takes "
                    f"{', '.join(params) or 'no arguments'}.")
        missing = [k for k in self._required(tool) if k not in args]
        if missing:
            return f"Error: {tool} needs argument(s) {', '.join(missing)}."
        return None

    def _params(self, tool: str) -> tuple[str, ...]:
        return tuple(self._schema(tool).get("properties", {}))

    def _required(self, tool: str) -> tuple[str, ...]:
        return tuple(self._schema(tool).get("required", ()))

    def _schema(self, tool: str) -> dict:
        for s in self.tool_schemas():
            if s["function"]["name"] == tool:
                return s["function"].get("parameters", {})
        return {}


def check_result(env: Environment, tool: str, result: Any) -> None:
    """EnvError (one line) for what a tool returned that breaks the protocol: a bug of
    the environment, not of the model's input."""
    label = f"env={env.name or type(env).__name__}: tool {tool}"
    if not isinstance(result, ToolResult):
        raise EnvError(f"{label} returned a {type(result).__name__}; expected an "
                       "ablate.envs.ToolResult")
    if not isinstance(result.observation, str):
        raise EnvError(f"{label} returned a {type(result.observation).__name__} "
                       "observation; expected a str (the text the model reads)")
    if result.done and tool != env.answer_tool:
        raise EnvError(f"{label} ended the episode; only answer_tool="
                       f"{env.answer_tool!r} may")


def _get(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)


def _keys(cfg: Any) -> list[str]:
    if cfg is None:
        return []
    if hasattr(cfg, "keys"):
        return [str(k) for k in cfg.keys()]
    return [f.name for f in dataclasses.fields(cfg)] if dataclasses.is_dataclass(cfg) else []


def parse_arguments(arguments: Any) -> Any:
    """OpenAI tool calls carry arguments as a JSON string; accept that or a dict. None
    (no arguments) is an empty object; anything else is returned as is (and rejected)."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return arguments
    return arguments


def quote(value: Any, limit: int = 60) -> str:
    """A short rendering of a model-sent value for error messages (strings quoted)."""
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "…"
        return json.dumps(text, ensure_ascii=False)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


@runtime_checkable
class BatchJudge(Protocol):
    """A world that judges many episodes at once (an LLM judge's batched requests)."""

    def judge_many(self, items: list[tuple[Task, Optional[str], Any]]) -> list[bool]: ...


def judge_all(env: Environment, items: list[tuple[Task, Optional[str], Any]]) -> list[bool]:
    """is_correct of many (task, answer, final state): the world's batched judge when it
    has one (BatchJudge), else one is_correct per item."""
    if isinstance(env, BatchJudge):
        return list(env.judge_many(items))
    return [bool(env.is_correct(t, a, s)) for t, a, s in items]
